"""Per-stage operation order of 1F1B and interleaved 1F1B, and the
micro-batches each stage keeps alive (both depend on the schedule only, never
on the layer assignment).

An op is `(is_forward, local_chunk, micro_batch)`. Stage `s` runs its ops in
the listed order; model chunk `c = local_chunk * pp + s`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

Op = tuple[bool, int, int]


def one_f_one_b_order(stage: int, num_stages: int, num_micro_batches: int) -> list[Op]:
    """Plain 1F1B (PipeDream-flush / Megatron): `min(pp - s - 1, m)` warm-up
    forwards, then one forward and one backward alternating, then the
    remaining backwards."""
    m = num_micro_batches
    warmup = min(num_stages - stage - 1, m)
    order: list[Op] = [(True, 0, j) for j in range(warmup)]
    for i in range(m - warmup):
        order.append((True, 0, warmup + i))
        order.append((False, 0, i))
    order.extend((False, 0, j) for j in range(m - warmup, m))
    return order


def _interleaved_op(k: int, forward: bool, num_stages: int, num_chunks: int) -> Op:
    """The k-th forward (or backward) of a stage under Megatron's interleaved
    order: micro-batches in groups of pp, chunks cycled per group."""
    group, within = divmod(k, num_stages * num_chunks)
    chunk = within // num_stages
    if not forward:
        chunk = num_chunks - 1 - chunk
    return (forward, chunk, group * num_stages + within % num_stages)


def interleaved_order(
    stage: int, num_stages: int, num_chunks: int, num_micro_batches: int
) -> list[Op]:
    """Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
    `forward_backward_pipelining_with_interleaving`): warm-up
    `min(2 (pp - s - 1) + (v - 1) pp, v m)` forwards, then forward/backward
    pairs, then the remaining backwards. Needs m a multiple of pp."""
    total = num_chunks * num_micro_batches
    warmup = min(2 * (num_stages - stage - 1) + (num_chunks - 1) * num_stages, total)
    order = [_interleaved_op(k, True, num_stages, num_chunks) for k in range(warmup)]
    for i in range(total - warmup):
        order.append(_interleaved_op(warmup + i, True, num_stages, num_chunks))
        order.append(_interleaved_op(i, False, num_stages, num_chunks))
    order.extend(
        _interleaved_op(k, False, num_stages, num_chunks) for k in range(total - warmup, total)
    )
    return order


@lru_cache(maxsize=64)
def stage_orders(
    num_stages: int, num_chunks: int, num_micro_batches: int, interleaved: bool
) -> tuple[tuple[Op, ...], ...]:
    """Op order of every stage."""
    if not interleaved:
        return tuple(
            tuple(one_f_one_b_order(s, num_stages, num_micro_batches)) for s in range(num_stages)
        )
    return tuple(
        tuple(interleaved_order(s, num_stages, num_chunks, num_micro_batches))
        for s in range(num_stages)
    )


def alive_profile(order: tuple[Op, ...], num_chunks: int) -> list[tuple[int, ...]]:
    """Micro-batches alive per local chunk after every forward of a stage.

    A forward stores its activations until the matching backward frees them,
    so memory peaks right after some forward; these vectors are all the
    candidates.
    """
    alive = [0] * num_chunks
    profile = []
    for forward, chunk, _ in order:
        alive[chunk] += 1 if forward else -1
        if forward:
            profile.append(tuple(alive))
    return profile


@lru_cache(maxsize=256)
def peak_alive_vectors(
    num_stages: int, num_chunks: int, num_micro_batches: int, interleaved: bool
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per stage, the Pareto-maximal alive vectors: the stage's peak
    activation memory is `max_a sum_k a_k * act_k` over these, whatever the
    per-chunk activation sizes `act_k >= 0` are. With v = 1 this is the
    single vector (min(pp - s, m),)."""
    if not interleaved and num_chunks == 1:
        return tuple(((min(num_stages - s, num_micro_batches),),) for s in range(num_stages))
    result = []
    for order in stage_orders(num_stages, num_chunks, num_micro_batches, interleaved):
        vectors = np.unique(np.asarray(alive_profile(order, num_chunks), dtype=np.int64), axis=0)
        # a is dominated when some other b >= a everywhere (b != a: rows are unique)
        ge = (vectors[:, None, :] >= vectors[None, :, :]).all(axis=2)
        np.fill_diagonal(ge, False)
        maximal = vectors[~ge.any(axis=0)]
        result.append(tuple(sorted((tuple(int(x) for x in row) for row in maximal), reverse=True)))
    return tuple(result)
