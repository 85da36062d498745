"""Data parallelism with ZeRO stages 0-3: the model-state memory per chip,
the collective traffic per step, and how much of it a framework hides.

Mixed-precision Adam (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054,
section 3.1): per parameter a 16-bit working weight (`2` bytes), a 16-bit
gradient (`2` bytes; Megatron-LM keeps fp32 "main" gradients, 4 bytes, which
`grad_bytes` expresses), and fp32 master weight, momentum and variance
(`K = 12` bytes). ZeRO's stages shard these over the `d` data-parallel
replicas (its Figure 1):

| stage | weights | gradients | optimizer state |
|---|---|---|---|
| 0 (plain DP) | 2 P | g P | 12 P |
| 1 | 2 P | g P | 12 P / d |
| 2 | 2 P | g P / d | 12 P / d |
| 3 | 2 P / d | g P / d | 12 P / d |

`P` is the parameters one chip holds after tensor and pipeline sharding.
"""

from __future__ import annotations

from dataclasses import dataclass

OPTIMIZER_BYTES_PER_PARAM = 12
"""fp32 master weight, momentum and variance (ZeRO section 3.1, K = 12)."""


@dataclass(frozen=True)
class ModelStateBytes:
    """Per-chip bytes of weights, gradients and optimizer state."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        """Sum of the three."""
        return self.weights + self.gradients + self.optimizer


def model_state_bytes(
    params: float, zero_stage: int, data_parallel: int, param_bytes: int, grad_bytes: int
) -> ModelStateBytes:
    """Bytes per chip of `params` parameters under ZeRO `zero_stage` over
    `data_parallel` replicas (table in the module docstring). ZeRO-3 keeps
    only its shard; the gathered layer it works on is a buffer counted by
    the caller. Units: bytes."""
    d = data_parallel
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0-3, got {zero_stage}")
    weights = param_bytes * params / (d if zero_stage >= 3 else 1)
    grads = grad_bytes * params / (d if zero_stage >= 2 else 1)
    optim = OPTIMIZER_BYTES_PER_PARAM * params / (d if zero_stage >= 1 else 1)
    return ModelStateBytes(weights, grads, optim)


@dataclass(frozen=True)
class DataParallelTraffic:
    """Ring collectives one chip runs per step for data parallelism: the
    per-chip shard of each (all-gather input piece, reduce-scatter output
    piece) and how many run per step. An all-reduce counts as one
    reduce-scatter plus one all-gather of the same shard (ring algorithm)."""

    grad_reduce_scatters: float
    param_all_gathers: float
    shard_bytes_grad: float
    shard_bytes_param: float

    def bytes_sent_per_chip(self, data_parallel: int) -> float:
        """`(d - 1) * (n_rs * shard_grad + n_ag * shard_param)`."""
        steps = data_parallel - 1
        return steps * (
            self.grad_reduce_scatters * self.shard_bytes_grad
            + self.param_all_gathers * self.shard_bytes_param
        )


def data_parallel_traffic(
    params: float,
    zero_stage: int,
    data_parallel: int,
    micro_batches: int,
    param_bytes: int,
    grad_bytes: int,
) -> DataParallelTraffic:
    """Collectives per step and chip (ZeRO section 7; derivation):

    - stage 0: all-reduce of the gradients = reduce-scatter + all-gather of
      `g P / d` shards (bytes sent `2 (d-1)/d g P`);
    - stages 1-2: reduce-scatter of the gradients and all-gather of the
      updated 16-bit weights (same bytes as stage 0 when `g = 2`);
    - stage 3: the weights are gathered for the forward and again for the
      backward of every micro-batch, and the gradients reduce-scattered
      after every micro-batch's backward (DeepSpeed ZeRO-3 and PyTorch FSDP
      without `no_sync`): `3 m (d-1)/d` traffic units, ZeRO's 1.5x for m = 1.

    Units: bytes (shards) and counts.
    """
    d = max(data_parallel, 1)
    grad_shard = grad_bytes * params / d
    param_shard = param_bytes * params / d
    if zero_stage in (0, 1, 2):
        # stage 0's all-reduce gathers the reduced gradient, stages 1-2 the weights
        gather_shard = grad_shard if zero_stage == 0 else param_shard
        return DataParallelTraffic(1.0, 1.0, grad_shard, gather_shard)
    if zero_stage == 3:
        m = micro_batches
        return DataParallelTraffic(float(m), 2.0 * m, grad_shard, param_shard)
    raise ValueError(f"zero_stage must be 0-3, got {zero_stage}")


def exposed_overlap_s(comm_s: float, overlap_window_s: float, last_bucket_s: float) -> float:
    """Communication a framework cannot hide behind compute::

        exposed = max(comm_s - window_s, min(last_bucket_s, comm_s))

    Gradient buckets are reduced while the backward pass continues
    (PyTorch DDP, Li et al. VLDB 2020, "PyTorch Distributed", section 3.2.3;
    Megatron-LM's overlapped gradient reduce), so only what outlasts the
    window is exposed, and at least the last bucket, which is ready only
    when the backward ends. Units: seconds.
    """
    return max(comm_s - overlap_window_s, min(last_bucket_s, comm_s), 0.0)
