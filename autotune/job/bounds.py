"""Lower bounds of the step model (job/model.py) that hold for every way of
cutting the layers into stages and mixing recomputation: they prune before
pricing and decide when balancing can stop (tests/test_job_model.py checks
both against the model, even split and balanced plans alike).

Memory: some stage holds at least the average over the stages of the
parameters and their state (ZeRO-divided), of the last stage's logits, and
of every block's activations for one micro-batch in the lightest
recomputation mode allowed (a stage's peak keeps at least one micro-batch
of each of its chunks: after 1F1B's first forward, or at the end of the
interleaved warm-up), plus the per-stage constants (workspace, reserve,
ZeRO-3's gathered block). One stage holds it all.

Step, pipelined: with `S` the work of one micro-batch through every chunk
(blocks without recomputation, the ends, a send-recv per chunk and pass),
1F1B's stage `b` cannot start before micro-batch 1 has gone forward through
the stages before it, works `m W_b`, and its last backward still runs back
through them: `step >= sum_{s<b} W_s + m W_b` for every `b`; the best split
makes them equal, giving `S / (1 - (1 - 1/m)^pp)`. Every stage is busy
`m W_b` and the largest is at least the average: `m S / pp` (the only bound
used for interleaved schedules). The optimizer step of the stage holding
the most parameters is at least that of the average stage. Single stage:
`m S` exactly. Data parallelism: the stage holding the most parameters
runs at least the average stage's collectives (their bytes at the fastest
bandwidth, no latency: model.data_parallel_floor_s), and the step is at
least any stage's collectives plus its optimizer step (every overlap
window lies inside the makespan), so `step >= dp_floor(P / pp) +
optimizer(P / pp)` too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autotune.job.block import activation_bytes_per_mode, block_params_per_chip, end_memory
from autotune.job.model import Candidates, block_seconds, hide_expert_comm
from autotune.specs.job import JobInput
from autotune.specs.model_params import ffn_matrices
from cost_models.data_parallel import OPTIMIZER_BYTES_PER_PARAM
from cost_models.elementwise import adam_step_bytes_per_param
from cost_models.moe import expert_params_per_chip


def _per_key(c: Candidates, fn) -> np.ndarray:
    keys = c.figure_keys()
    cache = {k: fn(*k) for k in dict.fromkeys(keys)}
    return np.asarray([cache[k] for k in keys], dtype=float)


def state_bytes_per_param(
    c: Candidates, element_bytes: int, grad_bytes: int, experts: bool = False
) -> np.ndarray:
    """Bytes per parameter on one chip: weights, gradients and the 12 bytes
    of fp32 Adam state, each divided over the replicas from its ZeRO stage
    on (cost_models.data_parallel); a weight's replicas are its data x
    context group, a routed expert's its expert-data group (`experts`)."""
    dp = c.expert_replicas if experts else c.replicas.astype(float)
    z = c.zero
    return (
        element_bytes / np.where(z >= 3, dp, 1.0)
        + grad_bytes / np.where(z >= 2, dp, 1.0)
        + OPTIMIZER_BYTES_PER_PARAM / np.where(z >= 1, dp, 1.0)
    )


def memory_lower_bound(
    inp: JobInput, c: Candidates, per_stage_bytes: float, recompute_searched: bool
) -> np.ndarray:
    """Bytes no layer split or recomputation mix can bring the fullest
    stage below (module docstring); `per_stage_bytes` is what every stage
    holds regardless (workspace and reserve). With recomputation searched
    the lightest mode counts, else each candidate's own."""
    model, t = inp.model, inp.training
    e = t.dtype.num_bytes
    g = 4 if t.fp32_gradients else e
    per_param = state_bytes_per_param(c, e, g)
    params = _per_key(c, lambda r, k, b, cp: block_params_per_chip(model, r * k))
    ends = _per_key(c, lambda r, k, b, cp: end_memory(model, t, r, k, b, cp)).reshape(-1, 3)
    acts = _per_key(
        c, lambda r, k, b, cp: activation_bytes_per_mode(model, t, r * k, b, cp)
    ).reshape(-1, 3)
    lightest = acts.min(axis=1) if recompute_searched else acts[np.arange(len(c)), c.recompute]
    total = (model.num_layers * params + ends[:, 0] + ends[:, 1]) * per_param
    if model.moe is not None:
        # the routed experts' weights and state, sharded over the expert-data group
        moe = model.moe
        experts = expert_params_per_chip(
            moe.num_experts, c.ep, c.etp, model.hidden_size, moe.expert_ffn_size,
            ffn_matrices(model),
        )  # fmt: skip
        per_expert_param = state_bytes_per_param(c, e, g, experts=True)
        total += sum(model.moe_layer_flags) * experts * per_expert_param
    total += ends[:, 2] + model.num_layers * lightest
    gathered = np.where(c.zero == 3, 2 * params * e, 0.0)
    return total / c.pp + per_stage_bytes + gathered


def step_lower_bound(
    inp: JobInput,
    c: Candidates,
    arrays: dict[str, np.ndarray],
    p2p_s: np.ndarray,
    hbm_bytes_per_s: float,
    dp_floor_s: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Seconds no layer split or recomputation mix can beat (module
    docstring); `arrays` are job/model.py's per-candidate figures.
    `dp_floor_s` maps the average stage's parameters per chip to the least
    seconds of its data-parallel collectives (model.data_parallel_floor_s);
    the step is at least that plus the average stage's optimizer step."""
    model, t = inp.model, inp.training
    e = t.dtype.num_bytes
    g = 4 if t.fp32_gradients else e
    m = (t.global_batch_sequences // (c.dp * c.mbs)).astype(float)
    pp, v = c.pp.astype(float), c.v
    f_blk, b_blk = block_seconds(arrays)
    ends = arrays["head_f"] + arrays["head_b"] + arrays["tail_f"] + arrays["tail_b"]
    work = model.num_layers * (f_blk + b_blk) + ends + np.where(c.pp > 1, 2 * pp * v * p2p_s, 0)
    if model.moe is not None:
        # a mixture of experts' routed part and dense blocks' wider FFN
        moe_layers = sum(model.moe_layer_flags)
        dense_layers = model.num_layers - moe_layers
        routed = hide_expert_comm(t, arrays, f_blk, b_blk, c.pp, v, m)
        work = work + moe_layers * (routed["x_f"] + routed["x_b"])
        work = work + dense_layers * (arrays["xd_f"] + arrays["xd_b"])
    chain = work / (1 - (1 - 1 / m) ** pp)
    average = m * work / pp
    pipe = np.where(c.pp == 1, m * work, np.where(v == 1, np.maximum(chain, average), average))
    params = model.num_layers * arrays["params"] + arrays["head_p"] + arrays["tail_p"]
    owned = params / pp / np.where(c.zero >= 1, c.replicas, 1)
    optimizer = owned * adam_step_bytes_per_param(e, g) / hbm_bytes_per_s
    bound = pipe + optimizer
    if dp_floor_s is not None:
        bound = np.maximum(bound, dp_floor_s(params / pp) + optimizer)
    return bound
