"""Adam and RMSprop over one flat parameter buffer, with gradient-norm clipping (shared by the policies).

For the small networks of classic-control RL, ``torch.optim`` spends its time in Python and per-tensor dispatch,
not arithmetic, even with ``foreach``: the same update on one contiguous buffer takes a tenth of the time
(docs/speed.md). ``FlatOptimizer`` moves the
parameters of a module into one flat tensor (each parameter becomes a view of it, and its ``.grad`` a view of one
flat gradient buffer, which autograd accumulates into in place) and applies the textbook update to the buffer.

The arithmetic follows ``torch.optim.Adam`` (``amsgrad=False``, no weight decay) and ``torch.optim.RMSprop``
(``centered=False``, no momentum) step for step; tests compare the two over many steps.

Two ways to take a step. ``minimize`` (every built-in learning step, eager or compiled, ``zoo.accel.compiled``): the
gradient by ``torch.autograd.grad``, clipping, and a step taken only where the loss and the gradient are finite --
decided on the device (a mask, no ``.item()``), so the whole update can be one graph with no host sync; a skipped
step leaves the parameters, moments and step count as they were and returns a NaN loss, which stops the run. The
step count and learning rate are tensors for that reason (a Python number would be a constant of the graph). An
optimiser made with ``eager_host_step`` (the on-policy learners') decides on the host instead when it runs eager,
and steps with ``step``: torch.optim's arithmetic to the bit. ``backward_and_step`` (a plugin's own ``learn``):
backward into the flat gradient buffer, the data-parallel hook, clipping, a host-side finite check that raises
before the step, then ``step``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..errors import NonFiniteError

FLAT_ALGORITHMS = ("adam", "rmsprop")
# module -> the flat buffer flatten_parameters made for it (flat_parameters checks it still holds the parameters)
_FLAT_BUFFERS: weakref.WeakKeyDictionary[nn.Module, torch.Tensor] = weakref.WeakKeyDictionary()


def flat_parameters(module: nn.Module) -> torch.Tensor | None:
    """The flat buffer ``flatten_parameters`` moved ``module``'s parameters into, while they still lie in it (None
    otherwise: never flattened, copied, or moved since). A read of data pointers: outside a compiled step."""
    flat = _FLAT_BUFFERS.get(module)
    if flat is None:
        return None
    storage = flat.untyped_storage().data_ptr()
    params = list(module.parameters())
    return flat if params and all(p.untyped_storage().data_ptr() == storage for p in params) else None


def flatten_parameters(module: nn.Module) -> torch.Tensor:
    """Move ``module``'s parameters into one new flat buffer (each parameter becomes a view of it); return it.

    Operations on the buffer (a Polyak average, a reset) then act on every parameter at once; ``flat_parameters``
    finds it again from the module (the learner state's tensors and the compiled step's flat views).
    """
    params = list(module.parameters())
    if len({(p.device, p.dtype) for p in params}) != 1:
        raise ValueError("flat parameters need all parameters on one device with one dtype")
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1) for p in params])
    offset = 0
    for p in params:
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    _FLAT_BUFFERS[module] = flat
    return flat


class FlatOptimizer:
    """Adam or RMSprop on a module's parameters, stored contiguously.

    Arguments:
        - module: its parameters are re-pointed into one flat buffer (call after moving it to its device).
        - algorithm: ``"adam"`` or ``"rmsprop"``.
        - lr: learning rate (``self.lr`` may be changed between steps for schedules).
        - eps: added to the denominator; betas (Adam) or alpha (RMSprop) as in torch.
        - eager_host_step: outside a compiled graph, ``minimize`` checks the loss and the gradient on the host and
          steps with ``step`` (torch.optim's arithmetic, step for step: the on-policy learners); by default it
          takes the device-masked step in eager too (the off-policy family: eager and compiled then agree closer).
    Examples:
        >>> net = nn.Linear(3, 1)
        >>> opt = FlatOptimizer(net, "adam", lr=1e-3)
        >>> opt.zero_grad(); net(torch.randn(4, 3)).sum().backward()
        >>> grad_norm = opt.clip_grad_norm(0.5); opt.step()
    """

    def __init__(
        self,
        module: nn.Module,
        algorithm: str,
        lr: float,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
        alpha: float = 0.99,
        eager_host_step: bool = False,
    ) -> None:
        if algorithm not in FLAT_ALGORITHMS:
            raise ValueError(f"optimizer '{algorithm}' is unknown: use 'adam' or 'rmsprop'")
        params = list(module.parameters())
        if not params or not all(p.requires_grad for p in params):
            raise ValueError("the module must have parameters, all trainable")
        self.algorithm, self.eps, self.betas, self.alpha = algorithm, eps, betas, alpha
        self.eager_host_step = eager_host_step
        self.params = params
        # minimize differentiates with respect to the module's parameters as they are when it runs: these, or
        # the views a compiled step swaps in (zoo.accel.flat_views)
        self.module = module
        self.names = [tuple(name.split(".")) for name, _ in module.named_parameters()]
        self.flat = flatten_parameters(module)
        self.grad = torch.zeros_like(self.flat)
        offset = 0
        for p in params:
            p.grad = self.grad[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        # Tensors, read by the compiled step as inputs: the learning rate (``lr`` sets it) and the step count.
        self.lr_tensor = torch.tensor(float(lr), device=self.flat.device)
        self._lr = float(lr)
        self.step_count = torch.zeros((), dtype=torch.int64, device=self.flat.device)
        self.grad_norm = torch.zeros((), device=self.flat.device)  # of the latest ``minimize``, before clipping
        if algorithm == "adam":
            self.exp_avg = torch.zeros_like(self.flat)
        self.exp_avg_sq = torch.zeros_like(self.flat)

    @property
    def lr(self) -> float:
        """The learning rate (a schedule may set it between steps)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = float(value)
        self.lr_tensor.fill_(self._lr)

    @property
    def steps(self) -> int:
        """Steps taken (a host read of ``step_count``)."""
        return int(self.step_count)

    @steps.setter
    def steps(self, value: int) -> None:
        self.step_count.fill_(int(value))

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the optimiser's state (parameters, gradients, moments, counters), for graph capture."""
        moments = [self.exp_avg] if self.algorithm == "adam" else []
        return [self.flat, self.grad, *moments, self.exp_avg_sq, self.step_count, self.lr_tensor, self.grad_norm]

    def reset_state(self) -> None:
        """Forget the moment estimates and the step count (after the parameters were re-initialised)."""
        self.step_count.zero_()
        self.exp_avg_sq.zero_()
        if self.algorithm == "adam":
            self.exp_avg.zero_()

    def backward_and_step(
        self, loss: torch.Tensor, max_grad_norm: float, sync: Callable[[torch.Tensor], None]
    ) -> float:
        """zero_grad, backward, ``sync(self.grad)`` (a data-parallel all-reduce), clip, step; returns the norm.

        Raises NonFiniteError before the step, leaving the parameters as they were, when the loss or the
        gradient is NaN or infinite.
        """
        self.zero_grad()
        loss.backward()
        sync(self.grad)
        grad_norm = self.clip_grad_norm(max_grad_norm)
        loss_value = loss.item()
        if not (math.isfinite(grad_norm) and math.isfinite(loss_value)):
            what = "gradient" if math.isfinite(loss_value) else "loss"
            raise NonFiniteError(f"the {what} is not finite (loss {loss_value}, gradient norm {grad_norm})")
        self.step()
        return grad_norm

    def zero_grad(self) -> None:
        """Zero the flat gradient buffer (the parameters' ``.grad`` stay views of it)."""
        self.grad.zero_()

    @torch.no_grad()
    def clip_grad_norm(self, max_norm: float) -> float:
        """Scale gradients so that their global L2 norm is at most ``max_norm`` (as ``clip_grad_norm_``);
        returns the norm before clipping. ``max_norm <= 0`` disables clipping (the norm is still returned)."""
        norm = torch.linalg.vector_norm(self.grad)
        if max_norm > 0:
            self.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return float(norm)

    def minimize(self, loss: torch.Tensor, max_grad_norm: float = 0.0,
                 sync: Callable[[torch.Tensor], None] | None = None) -> torch.Tensor:
        """One step down the gradient of ``loss`` with no host sync (traceable into one graph): the gradient by
        ``torch.autograd.grad`` into ``self.grad`` (``sync``, the data-parallel hook, sees it first), its norm
        clipped to ``max_grad_norm`` (0: no clipping), then the step where the loss and the gradient are finite (else
        nothing changes). Returns the loss, detached: NaN when the step was skipped, so that the metric carrying it
        stops the run. ``self.grad_norm`` holds the gradient's norm before clipping. With ``eager_host_step``, an
        eager call checks on the host instead and steps with ``step`` (the same rule, torch.optim's arithmetic)."""
        grads = torch.autograd.grad(loss, self.current_parameters())
        if self.eager_host_step and not torch.compiler.is_compiling():
            with torch.no_grad():
                torch.cat([g.reshape(-1) for g in grads], out=self.grad)
            if sync is not None:
                sync(self.grad)
            return self._host_step(loss.detach(), max_grad_norm)
        grad = torch.cat([g.reshape(-1) for g in grads])
        if sync is not None:
            sync(grad)
        return self.apply_gradient(grad, loss.detach(), max_grad_norm)

    @torch.no_grad()
    def _host_step(self, loss: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
        """``minimize``'s eager form for ``eager_host_step``, on the gradient in ``self.grad``: clip
        (``clip_grad_norm``), then ``step`` where the loss and the gradient norm are finite on the host; the loss, or
        NaN where the step was skipped."""
        norm = self.clip_grad_norm(max_grad_norm)
        self.grad_norm.fill_(norm)
        if not (math.isfinite(norm) and math.isfinite(float(loss))):
            return torch.full_like(loss, math.nan)
        self.step()
        return loss

    def current_parameters(self) -> list[torch.Tensor]:
        """The module's parameters as its attributes hold them now: ``self.params``, or inside a compiled step the
        views of the flat buffer swapped in for them (``zoo.policies.flat_views``)."""
        current = []
        for path in self.names:
            value: Any = self.module
            for part in path:
                value = getattr(value, part)
            current.append(value)
        return current

    @torch.no_grad()
    def apply_gradient(self, grad: torch.Tensor, loss: torch.Tensor, max_grad_norm: float = 0.0) -> torch.Tensor:
        """``minimize`` from a flat gradient already computed (e.g. written in closed form): clip, then a step masked
        by the finiteness of ``grad`` and ``loss``; returns ``loss``, NaN where the step was skipped."""
        norm = torch.linalg.vector_norm(grad)
        self.grad_norm.copy_(norm)
        finite = torch.isfinite(norm) & torch.isfinite(loss)
        on = finite.to(grad.dtype)  # 1: step, 0: every update below is a no-op
        self.step_count.add_(finite.to(torch.int64))
        steps = self.step_count.clamp(min=1).to(grad.dtype)
        # the step's scalars, each one 0-d tensor (see _computed_once)
        scalars = [torch.clamp(max_grad_norm / (norm + 1e-6), max=1.0) if max_grad_norm > 0 else on, on]
        if self.algorithm == "rmsprop":
            scalars += [(1.0 - self.alpha) * on, self.lr_tensor * on]
        else:
            beta1, beta2 = self.betas
            # 1 - beta**t as -expm1(t log beta): 1 - pow(0.999, t) in float32 loses digits (1e-5 relative at t = 1)
            bias_correction1 = -torch.expm1(steps * math.log(beta1))
            bias_correction2 = -torch.expm1(steps * math.log(beta2))
            scalars += [(1.0 - beta1) * on, (1.0 - beta2) * on, bias_correction2.sqrt(),
                        self.lr_tensor * on / bias_correction1]
        clip, on, *scalars = _computed_once(scalars)
        if max_grad_norm > 0:
            grad = grad * clip
        grad = torch.where(on > 0, grad, 0.0)
        self.grad.copy_(grad)
        if self.algorithm == "rmsprop":
            weight, rate = scalars
            self.exp_avg_sq.mul_(1.0 - weight).addcmul_(grad, grad * weight)
            self.flat.sub_(grad / (self.exp_avg_sq.sqrt() + self.eps) * rate)
        else:
            weight1, weight2, root_correction2, rate = scalars
            self.exp_avg.lerp_(grad, weight1)
            self.exp_avg_sq.mul_(1.0 - weight2).addcmul_(grad, grad * weight2)
            denom = (self.exp_avg_sq.sqrt() / root_correction2).add_(self.eps)
            self.flat.sub_(self.exp_avg / denom * rate)
        return torch.where(finite, loss, torch.nan)

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter from the current gradients."""
        self.step_count.add_(1)
        steps = self.steps
        grad = self.grad
        if self.algorithm == "rmsprop":
            self.exp_avg_sq.mul_(self.alpha).addcmul_(grad, grad, value=1.0 - self.alpha)
            self.flat.addcdiv_(grad, self.exp_avg_sq.sqrt().add_(self.eps), value=-self.lr)
            return
        beta1, beta2 = self.betas
        self.exp_avg.lerp_(grad, 1.0 - beta1)
        self.exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        bias_correction1 = 1.0 - beta1**steps
        bias_correction2 = 1.0 - beta2**steps
        denom = (self.exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg, denom, value=-self.lr / bias_correction1)

    def state_dict(self) -> dict[str, Any]:
        """Step count, learning rate and moment buffers (parameters are saved with the module)."""
        state = {"algorithm": self.algorithm, "steps": self.steps, "lr": self.lr, "exp_avg_sq": self.exp_avg_sq.clone()}
        if self.algorithm == "adam":
            state["exp_avg"] = self.exp_avg.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` saved; the algorithm and parameter count must match."""
        if state.get("algorithm") != self.algorithm or state["exp_avg_sq"].shape != self.flat.shape:
            raise ValueError(
                f"optimizer state is for {state.get('algorithm')} with {state['exp_avg_sq'].numel()} parameters, "
                f"expected {self.algorithm} with {self.flat.numel()}: was the checkpoint made with this config?"
            )
        self.steps, self.lr = int(state["steps"]), float(state["lr"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])
        if self.algorithm == "adam":
            self.exp_avg.copy_(state["exp_avg"])


def _computed_once(scalars: list[torch.Tensor]) -> list[torch.Tensor]:
    """``scalars`` as they are eagerly; in a compiled graph, stacked into one tensor first. Inductor otherwise inlines
    each 0-d expression into the elementwise loop that reads it and evaluates it again for every vector of the
    parameters (two ``expm1``, square roots and the finiteness test per 16 floats: more than twice the time of an
    Adam step over SAC Hopper's critics; docs/speed.md); the stack makes it a buffer computed once. The same values
    either way."""
    if not torch.compiler.is_compiling():
        return scalars
    return list(torch.stack(scalars).unbind(0))


def sync_parameter_gradients(parameters: list[nn.Parameter] | Any, ctx: Any) -> None:
    """Average the ``.grad`` of ``parameters`` over data-parallel learners: the hook a policy with its own
    ``torch.optim`` optimiser calls between ``backward`` and ``step`` to run on ``parallel_sync``.

    The gradients are copied into one flat buffer, ``ctx.sync_gradients`` (one all-reduce) averages it, and the
    result is written back into each ``.grad``. Serially ``ctx.sync_gradients`` does nothing, and neither does this
    (no copy is made when ``ctx.world_size`` is 1). Parameters without a gradient count as zeros.

    Examples:
        >>> from zoo.policies.base import LearnContext
        >>> class TwoLearners(LearnContext):  # a stand-in all-reduce: the other learner's gradients are all 0
        ...     def sync_gradients(self, grad): grad.div_(2)
        >>> net = nn.Linear(2, 1); net(torch.ones(1, 2)).sum().backward()  # every gradient 1 here
        >>> sync_parameter_gradients(net.parameters(), TwoLearners(world_size=2))  # between backward and step
        >>> net.weight.grad, net.bias.grad
        (tensor([[0.5000, 0.5000]]), tensor([0.5000]))
    """
    if getattr(ctx, "world_size", 1) <= 1:
        return
    params = [p for p in parameters if p.requires_grad]
    if not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    ctx.sync_gradients(flat)
    offset = 0
    for p in params:
        part = flat[offset : offset + p.numel()].view_as(p)
        if p.grad is None:
            p.grad = part.clone()
        else:
            p.grad.copy_(part)
        offset += p.numel()
