"""zoo.rl_utils: estimators and losses, namedtuple in and namedtuple out.

Names, namedtuple fields, defaults and return arity follow DI-engine 0.5.3's ``ding.rl_utils``, so switching is a
change of import. Conventions kept everywhere in this package:

- sequence estimators (gae, returns, V-trace) take time-major tensors ``(T, B, ...)``, and like DI-engine a single
  trajectory ``(T,)``; per-sample losses take ``(B, ...)``, with any further leading dimensions (``(T, B, A, ...)``);
- losses are 0-dim tensors, info fields are Python floats;
- no function mutates its inputs, and targets (returns, advantages, importance weights) carry no gradient;
- ``done`` means terminated (no bootstrap); ``traj_flag`` means the trace ends (terminated or truncated; a
  truncated step bootstraps from the value of its final observation).

Only torch, numpy and scipy are imported here: never policies, pipelines or envs.
"""

from .a2c import a2c_data, a2c_error, a2c_error_continuous, a2c_error_multi_discrete, a2c_loss
from .causal import causal_action_weights, causal_weighted_log_prob, direct_lingam, lingam_result
from .distributed import allreduce_grads, broadcast_params, sync_running_mean_std, world_info
from .distributions import (
    MASKED_LOGIT,  # noqa: F401  (importable beside mask_logits; a constant, documented there)
    categorical_log_prob,
    entropy,
    gaussian_entropy,
    gaussian_log_prob,
    mask_logits,
    multi_categorical_entropy,
    multi_categorical_log_prob,
    multi_categorical_logits,
    one_hot,
    sample_tanh_gaussian,
    tanh_gaussian_log_prob,
    tanh_log_det_jacobian,
)
from .gae import gae, gae_data
from .hl_gauss import HLGauss, categorical_to_scalar, hl_gauss_loss, hl_gauss_probs, two_hot, two_hot_loss
from .normalisation import ReturnNormalizer, RunningMeanStd, normalize
from .ppo import (
    ppo_data,
    ppo_data_continuous,
    ppo_error,
    ppo_error_continuous,
    ppo_error_multi_discrete,
    ppo_info,
    ppo_loss,
    ppo_policy_data,
    ppo_policy_data_continuous,
    ppo_policy_error,
    ppo_policy_error_continuous,
    ppo_policy_loss,
    ppo_value_data,
    ppo_value_error,
)
from .returns import (
    discount_cumsum,
    discount_with_dones,
    generalized_lambda_returns,
    multistep_forward_view,
    nstep_return,
    nstep_return_data,
    td_lambda_data,
    td_lambda_error,
)
from .td import q_nstep_td_data, q_nstep_td_error
from .vtrace import (
    compute_importance_weights,
    vtrace_advantage,
    vtrace_data,
    vtrace_error_continuous_action,
    vtrace_error_discrete_action,
    vtrace_loss,
    vtrace_nstep_return,
)

__all__ = [
    "HLGauss", "ReturnNormalizer", "RunningMeanStd",
    "a2c_data", "a2c_error", "a2c_error_continuous", "a2c_error_multi_discrete", "a2c_loss",
    "allreduce_grads", "broadcast_params", "sync_running_mean_std", "world_info",
    "categorical_log_prob", "entropy", "gaussian_entropy", "gaussian_log_prob", "one_hot",
    "mask_logits",
    "multi_categorical_entropy", "multi_categorical_log_prob", "multi_categorical_logits",
    "sample_tanh_gaussian", "tanh_gaussian_log_prob", "tanh_log_det_jacobian",
    "causal_action_weights", "causal_weighted_log_prob", "direct_lingam", "lingam_result",
    "categorical_to_scalar", "hl_gauss_loss", "hl_gauss_probs", "two_hot", "two_hot_loss",
    "compute_importance_weights", "vtrace_advantage", "vtrace_data", "vtrace_error_continuous_action",
    "vtrace_error_discrete_action", "vtrace_loss", "vtrace_nstep_return",
    "discount_cumsum", "discount_with_dones", "generalized_lambda_returns", "multistep_forward_view",
    "nstep_return", "nstep_return_data", "td_lambda_data", "td_lambda_error",
    "gae", "gae_data", "normalize", "q_nstep_td_data", "q_nstep_td_error",
    "ppo_data", "ppo_data_continuous", "ppo_error", "ppo_error_continuous", "ppo_error_multi_discrete",
    "ppo_info", "ppo_loss",
    "ppo_policy_data", "ppo_policy_data_continuous", "ppo_policy_error", "ppo_policy_error_continuous",
    "ppo_policy_loss", "ppo_value_data", "ppo_value_error",
]  # fmt: skip
