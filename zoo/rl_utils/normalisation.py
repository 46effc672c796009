"""Running mean/variance statistics, and the reward scaling used by PPO-family algorithms.

Overview:
    ``RunningMeanStd`` keeps float64 statistics of a stream of batches. Batches, and the statistics of other
    workers, are merged with Chan et al.'s parallel formula, so the result is the mean and population variance
    (``ddof=0``) of all the data seen, whatever the order or split. ``ReturnNormalizer`` scales rewards by the
    running standard deviation of the discounted return (OpenAI baselines / Stable-Baselines3 ``VecNormalize``).
    Inputs may be numpy arrays or torch tensors; outputs have the kind of the input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

ArrayOrTensor = np.ndarray | torch.Tensor


def _as_float64(x: Any) -> np.ndarray:
    # Statistics are always accumulated in float64 on the CPU: float32 sums drift over millions of samples.
    if isinstance(x, torch.Tensor):
        return x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def _as_bool(x: Any, field: str, num_envs: int) -> np.ndarray:
    array = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if array.shape != (num_envs,):
        raise ValueError(f"{field} has shape {array.shape}, expected (num_envs,) = ({num_envs},)")
    return array.astype(bool)


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _combine_moments(
    count_a: float, mean_a: np.ndarray | float, var_a: np.ndarray | float, count_b: float, mean_b: np.ndarray,
    var_b: np.ndarray,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Chan et al. (1979): count, mean and population variance of the union of two disjoint data sets."""
    if count_b == 0:
        return count_a, mean_a.copy(), var_a.copy()
    if count_a == 0:
        return count_b, mean_b.copy(), var_b.copy()
    total = count_a + count_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (count_b / total)
    sum_squares = var_a * count_a + var_b * count_b + np.square(delta) * (count_a * count_b / total)
    # np.asarray: with S = () numpy arithmetic yields scalars, and the cached moments must stay arrays.
    return total, np.asarray(mean), np.asarray(sum_squares / total)


def normalize(x: ArrayOrTensor, mean: Any, std: Any, clip: float | None = None) -> ArrayOrTensor:
    """Standardise ``x`` with given statistics: ``(x - mean) / std``, optionally clipped.

    Overview:
        Returns the kind of the input: a torch tensor keeps its dtype and device (integer tensors become the
        default float dtype), a numpy array keeps a floating dtype (others become float64). Numpy results are
        computed in float64 and cast, torch results in the tensor's dtype (autograd flows through ``x``).
    Arguments:
        - x: values, shape ``(..., *S)``.
        - mean: broadcastable to ``S`` (numpy, torch or float).
        - std: broadcastable to ``S``; the caller keeps it positive (add an epsilon before taking the root).
        - clip: if given, results are clipped to ``[-clip, clip]``; must be positive.
    Returns:
        - normalized: same shape and kind as ``x``.
    Examples:
        >>> normalize(np.array([1.0, 3.0]), mean=2.0, std=0.5)
        array([-2.,  2.])
    """
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be positive or None, got {clip}")
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
        mean_t = torch.tensor(_as_float64(mean), dtype=dtype, device=x.device)
        std_t = torch.tensor(_as_float64(std), dtype=dtype, device=x.device)
        result = (x.to(dtype) - mean_t) / std_t
        return result if clip is None else result.clamp(-clip, clip)
    array = np.asarray(x)
    dtype = array.dtype if array.dtype.kind == "f" else np.dtype(np.float64)  # np.floating, without issubdtype
    result = (array.astype(np.float64) - _as_float64(mean)) / _as_float64(std)
    if clip is not None:
        # np.clip's definition, minimum(maximum(x, lo), hi), as two ufunc calls (np.clip's Python wrapper cost
        # a third of a one-observation normalisation); the same bits, NaN included.
        result = np.minimum(np.maximum(result, -clip), clip)
    return result.astype(dtype, copy=False)


def _denormalize(x: ArrayOrTensor, mean: np.ndarray, std: np.ndarray) -> ArrayOrTensor:
    # Inverse of ``normalize`` without clipping, with the same kind-preserving rules.
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
        return x.to(dtype) * torch.tensor(std, dtype=dtype, device=x.device) + torch.tensor(
            mean, dtype=dtype, device=x.device
        )
    array = np.asarray(x)
    dtype = array.dtype if array.dtype.kind == "f" else np.dtype(np.float64)  # np.floating, without issubdtype
    return (array.astype(np.float64) * std + mean).astype(dtype, copy=False)


class RunningMeanStd:
    """Running mean and variance of a stream of batches, in float64.

    Overview:
        ``update`` folds a batch into the statistics and ``merge`` folds in another instance's (e.g. a worker's),
        both with Chan et al.'s parallel formula, so the statistics equal those of all the data seen at once.
        As in Stable-Baselines3 and DI-engine, ``epsilon`` is a pseudo-count of prior samples with mean 0 and
        variance 1, which keeps early normalisation tame. The prior is held apart from the data, so ``merge``
        counts it once: merging two instances equals one instance that saw both data sets. With ``epsilon=0``
        the attributes are exactly the mean and population variance of the data (0 and 1 before any data).
    Arguments:
        - shape: shape ``S`` of one sample; batches have shape ``(N, *S)``.
        - epsilon: prior pseudo-count (non-negative).
    Attributes (read-only):
        - mean, var: float64 arrays of shape ``S``, data combined with the prior.
        - count: ``epsilon`` plus the number of samples seen. ``data_count`` is the latter alone.
        - std: ``sqrt(var)``.
    Examples:
        >>> rms = RunningMeanStd(shape=(2,), epsilon=0.0)
        >>> rms.update(np.array([[0.0, 1.0], [2.0, 3.0]]))
        >>> rms.mean, rms.var
        (array([1., 2.]), array([1., 1.]))
    """

    def __init__(self, shape: tuple[int, ...] | int = (), epsilon: float = 1e-4) -> None:
        self.shape: tuple[int, ...] = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if not epsilon >= 0:
            raise ValueError(f"epsilon must be non-negative, got {epsilon}")
        self.epsilon = float(epsilon)
        self._data_count = 0
        self._data_mean = np.zeros(self.shape, dtype=np.float64)
        self._data_var = np.ones(self.shape, dtype=np.float64)
        self._refresh()

    def _refresh(self) -> None:
        # Cache the prior-combined moments: normalize() runs every environment step.
        if self._data_count == 0:
            mean, var = np.zeros(self.shape), np.ones(self.shape)
        elif self.epsilon == 0.0:
            mean, var = self._data_mean.copy(), self._data_var.copy()
        else:  # the prior: epsilon pseudo-samples of mean 0 and variance 1 (scalars: no arrays to allocate)
            _, mean, var = _combine_moments(self.epsilon, 0.0, 1.0, self._data_count, self._data_mean, self._data_var)
        self._mean, self._var = _read_only(np.asarray(mean)), _read_only(np.asarray(var))

    @property
    def mean(self) -> np.ndarray:
        return self._mean

    @property
    def var(self) -> np.ndarray:
        return self._var

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self._var)

    @property
    def count(self) -> float:
        return self.epsilon + self._data_count

    @property
    def data_count(self) -> int:
        return self._data_count

    def _check_trailing_shape(self, field: str, shape: tuple[int, ...], batched: bool) -> None:
        trailing = shape[len(shape) - len(self.shape) :] if self.shape else ()
        leading_ok = len(shape) == len(self.shape) + 1 if batched else len(shape) >= len(self.shape)
        if not leading_ok or trailing != self.shape:
            expected = "(N, *S)" if batched else "(..., *S)"
            raise ValueError(f"{field} has shape {shape}, expected {expected} with S = {self.shape}")

    def update(self, x: ArrayOrTensor) -> None:
        """Fold a batch of samples into the statistics.

        Arguments:
            - x: numpy array or torch tensor of shape ``(N, *S)``; converted to float64. ``N = 0`` is a no-op.
        Raises:
            - ValueError: wrong shape (the message names ``S``) or non-finite values, which would poison the
              statistics for the rest of training.
        """
        batch = _as_float64(x)
        self._check_trailing_shape("x", batch.shape, batched=True)
        count = batch.shape[0]
        if count == 0:
            return
        if not np.isfinite(batch).all():
            raise ValueError("x contains NaN or infinite values")
        if count == 1 and self._data_count > 0:
            # One sample (one env's step): Chan's formula with count_b = 1, mean_b = x, var_b = 0, written out.
            # The same float operations as the general path minus those that add or multiply an exact zero, so
            # the same bits (tested), in 6 numpy calls instead of 13.
            total = self._data_count + 1
            delta = batch[0] - self._data_mean
            mean = self._data_mean + delta * (1 / total)
            var = (self._data_var * self._data_count + np.square(delta) * (self._data_count / total)) / total
            self._data_count, self._data_mean, self._data_var = total, np.asarray(mean), np.asarray(var)
            self._refresh()
            return
        # Two-pass moments with plain ufuncs (ndarray.mean/var go through slower Python-level wrappers).
        mean = np.add.reduce(batch, axis=0) / count
        centred = batch - mean
        var = np.add.reduce(centred * centred, axis=0) / count
        self._data_count, self._data_mean, self._data_var = _combine_moments(
            self._data_count, self._data_mean, self._data_var, count, np.asarray(mean), np.asarray(var)
        )
        self._refresh()

    def since(self, earlier: dict[str, Any]) -> RunningMeanStd:
        """The statistics of the data folded in after ``earlier`` (a ``state_dict`` of this instance), alone.

        Overview:
            Inverts Chan et al.'s formula: for a worker that keeps updating its own statistics between
            synchronisations, this is what it saw since the last one (``merge`` of the result into ``earlier``
            gives this instance back, up to rounding). The result has ``epsilon = 0``.
        Raises:
            - ValueError: ``earlier`` has another shape or more data than this instance (it is not earlier).
        """
        shape = tuple(earlier["shape"])
        if shape != self.shape:
            raise ValueError(f"earlier has shape {shape}, expected {self.shape}")
        count0 = int(earlier["data_count"])
        added = self._data_count - count0
        if added < 0:
            raise ValueError(f"earlier holds {count0} samples, more than this instance's {self._data_count}")
        part = RunningMeanStd(self.shape, epsilon=0.0)
        if added == 0:
            return part
        mean0 = np.asarray(earlier["data_mean"], dtype=np.float64).reshape(self.shape)
        var0 = np.asarray(earlier["data_var"], dtype=np.float64).reshape(self.shape)
        total = self._data_count
        mean = (total * self._data_mean - count0 * mean0) / added
        sum_squares = total * self._data_var - count0 * var0 - np.square(mean - mean0) * (count0 * added / total)
        part._data_count = added
        part._data_mean = np.asarray(mean, dtype=np.float64)
        part._data_var = np.asarray(np.maximum(sum_squares / added, 0.0), dtype=np.float64)
        part._refresh()
        return part

    def merge(self, other: RunningMeanStd) -> None:
        """Fold another instance's data statistics into this one (``other`` is not modified).

        Overview:
            For gathering workers' statistics: afterwards this instance equals one that saw both data sets.
            This instance keeps its own ``epsilon``; ``other``'s prior is not counted.
        """
        if not isinstance(other, RunningMeanStd):
            raise TypeError(f"other must be a RunningMeanStd, got {type(other).__name__}")
        if other.shape != self.shape:
            raise ValueError(f"other has shape {other.shape}, expected {self.shape}")
        self._data_count, self._data_mean, self._data_var = _combine_moments(
            self._data_count, self._data_mean, self._data_var, other._data_count, other._data_mean, other._data_var
        )
        self._refresh()

    def normalize(self, x: ArrayOrTensor, clip: float | None = None, epsilon: float = 1e-8) -> ArrayOrTensor:
        """``(x - mean) / sqrt(var + epsilon)``, optionally clipped to ``[-clip, clip]``.

        Arguments:
            - x: shape ``(..., *S)``, numpy or torch.
            - clip: clipping bound, or ``None``.
            - epsilon: added to the variance so constant features do not divide by zero.
        Returns:
            - same shape and kind as ``x`` (see ``normalize`` for the dtype rules).
        """
        self._check_trailing_shape("x", tuple(np.shape(x)), batched=False)
        return normalize(x, self._mean, np.sqrt(self._var + epsilon), clip)

    def denormalize(self, x: ArrayOrTensor, epsilon: float = 1e-8) -> ArrayOrTensor:
        """Inverse of ``normalize`` (without clipping): ``x * sqrt(var + epsilon) + mean``, same kind as ``x``."""
        self._check_trailing_shape("x", tuple(np.shape(x)), batched=False)
        return _denormalize(x, self._mean, np.sqrt(self._var + epsilon))

    def state_dict(self) -> dict[str, Any]:
        """Picklable copy of the state (python and numpy values); ``load_state_dict`` restores it exactly."""
        return {
            "shape": self.shape,
            "epsilon": self.epsilon,
            "data_count": self._data_count,
            "data_mean": self._data_mean.copy(),
            "data_var": self._data_var.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``; its shape must equal this instance's."""
        shape = tuple(state["shape"])
        if shape != self.shape:
            raise ValueError(f"state has shape {shape}, expected {self.shape}")
        self.epsilon = float(state["epsilon"])
        self._data_count = int(state["data_count"])
        self._data_mean = np.array(state["data_mean"], dtype=np.float64).reshape(self.shape)
        self._data_var = np.array(state["data_var"], dtype=np.float64).reshape(self.shape)
        self._refresh()

    def __repr__(self) -> str:
        return f"RunningMeanStd(shape={self.shape}, epsilon={self.epsilon}, data_count={self._data_count})"


class ReturnNormalizer:
    """Reward scaling by the running standard deviation of the discounted return (PPO, DPPO).

    Overview:
        Each call does, per environment ``i``: ``ret[i] = ret[i] * gamma + reward[i]``; then the running
        statistics are updated with ``ret``; the returned reward is ``reward / sqrt(var(ret) + epsilon)``, clipped
        to ``[-clip, clip]``; finally ``ret[i] = 0`` where ``done[i]``. This is the order of OpenAI baselines and
        Stable-Baselines3 ``VecNormalize``: the final reward of an episode still counts in that episode's return.
        Rewards are scaled, not centred, because shifting them changes the task (a per-step survival bonus would
        become a penalty). ``done`` is ``terminated or truncated``: either way the next reward opens a new
        episode, so the accumulator restarts; this only affects the scale statistics, not bootstrapping.
    Arguments:
        - num_envs: number of parallel environments ``B``.
        - gamma: discount of the return accumulator (use the agent's discount).
        - epsilon: added to the variance before the square root.
        - clip: bound on the scaled reward, or ``None`` for no clipping.
    Shapes:
        - reward, done: ``(B,)``; the result has the shape and kind (numpy/torch, dtype, device) of ``reward``.
    Examples:
        >>> scaler = ReturnNormalizer(num_envs=2)
        >>> scaled = scaler(np.array([1.0, 0.5]), np.array([False, True]))
    """

    def __init__(self, num_envs: int, gamma: float = 0.99, epsilon: float = 1e-8, clip: float | None = 10.0) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        if not epsilon >= 0:
            raise ValueError(f"epsilon must be non-negative, got {epsilon}")
        if clip is not None and not clip > 0:
            raise ValueError(f"clip must be positive or None, got {clip}")
        self.num_envs = int(num_envs)
        self.gamma = float(gamma)
        self.epsilon = float(epsilon)
        self.clip = clip
        self.return_rms = RunningMeanStd(shape=())
        self._returns = np.zeros(self.num_envs, dtype=np.float64)

    @property
    def returns(self) -> np.ndarray:
        """A copy of the per-environment discounted-return accumulators, shape ``(B,)``."""
        return self._returns.copy()

    def __call__(self, reward: ArrayOrTensor, done: ArrayOrTensor, mask: ArrayOrTensor | None = None) -> ArrayOrTensor:
        """Scale one step of rewards and advance the accumulators (see the class docstring for the order).

        ``mask`` (``(B,)`` bool, default all True) selects the environments whose step counts: elsewhere the
        accumulator, the statistics and ``done`` are left alone (e.g. autoreset steps, whose action was ignored);
        their rewards are still scaled by the current statistics.
        """
        reward64 = _as_float64(reward)
        if reward64.shape != (self.num_envs,):
            raise ValueError(f"reward has shape {reward64.shape}, expected (num_envs,) = ({self.num_envs},)")
        done_np = _as_bool(done, "done", self.num_envs)
        # A new array (not in-place) so the reset below never touches anything the caller holds.
        returns = self._returns * self.gamma + reward64
        if mask is None:
            self.return_rms.update(returns)
        else:
            mask_np = _as_bool(mask, "mask", self.num_envs)
            returns = np.where(mask_np, returns, self._returns)
            self.return_rms.update(returns[mask_np])
            done_np = done_np & mask_np
        scaled = normalize(reward, 0.0, math.sqrt(float(self.return_rms.var) + self.epsilon), self.clip)
        returns[done_np] = 0.0
        self._returns = returns
        return scaled

    def reset(self) -> None:
        """Zero every accumulator (e.g. after resetting all environments by hand); statistics are kept."""
        self._returns = np.zeros(self.num_envs, dtype=np.float64)

    def state_dict(self) -> dict[str, Any]:
        """Picklable copy of the accumulators, hyper-parameters and return statistics."""
        return {
            "num_envs": self.num_envs,
            "gamma": self.gamma,
            "epsilon": self.epsilon,
            "clip": self.clip,
            "returns": self._returns.copy(),
            "return_rms": self.return_rms.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``; its ``num_envs`` must equal this instance's."""
        if int(state["num_envs"]) != self.num_envs:
            raise ValueError(f"state has num_envs {state['num_envs']}, expected {self.num_envs}")
        self.gamma = float(state["gamma"])
        self.epsilon = float(state["epsilon"])
        self.clip = state["clip"]
        self._returns = np.array(state["returns"], dtype=np.float64)
        self.return_rms.load_state_dict(state["return_rms"])
