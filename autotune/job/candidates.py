"""Every parallel configuration the cluster allows, as columns of arrays.

A candidate is (tensor mesh rows x cols, pipeline stages pp, data-parallel
replicas dp, micro-batch size b, interleave v, recomputation, ZeRO stage)
with `rows * cols * pp * dp` equal to the chip count, `dp` dividing the
global batch and `b` dividing each replica's share. Ranks are laid out
tensor-innermost, then data-parallel, then pipeline (Megatron-LM's order), so
a tensor group of at most a node's chips stays inside one node.

Rules that make a configuration impossible (not merely slow):
- the mesh shards every head: `num_heads` divisible by `cols`, key/value
  heads divisible by `cols` or `cols` by them (replicated KV heads), hidden
  and FFN widths divisible by `rows * cols`; with `rows > 1` whole sequences
  sit on each mesh row (`b` divisible by `rows`) so attention stays local;
- `pp * v` chunks of at least one layer each; interleaving (`v > 1`) needs
  the micro-batch count to be a multiple of `pp` (Megatron-LM's rule);
- ZeRO stages above 0 only with `dp > 1` (they are ZeRO 0 otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.job.cluster_view import SearchHardware
from autotune.specs.job_search import RECOMPUTE_MODES, AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec

COLUMNS = ("rows", "cols", "pp", "dp", "mbs", "v", "recompute", "zero")


@dataclass(frozen=True)
class Candidates:
    """One row per configuration; `recompute` indexes RECOMPUTE_MODES.
    Rows are in the canonical order of :func:`canonical_order`."""

    rows: np.ndarray
    cols: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    mbs: np.ndarray
    v: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray

    def __len__(self) -> int:
        return int(self.rows.size)

    @property
    def tp(self) -> np.ndarray:
        """Tensor-parallel chips `rows * cols`."""
        return self.rows * self.cols

    def take(self, index: np.ndarray) -> Candidates:
        """The rows at `index` (a boolean mask or integer positions)."""
        return Candidates(*(getattr(self, c)[index] for c in COLUMNS))

    def row(self, i: int) -> dict[str, int | str]:
        """One candidate as plain values."""
        out: dict[str, int | str] = {c: int(getattr(self, c)[i]) for c in COLUMNS}
        out["recompute"] = RECOMPUTE_MODES[int(self.recompute[i])]
        return out


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def _fixed(value, allowed: list[int]) -> list[int]:
    return allowed if value == "auto" else [x for x in allowed if x == value]


def tensor_meshes(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, limits: SearchConstraints
) -> list[tuple[int, int]]:
    """(rows, cols) tensor meshes allowed by the cluster, the model's widths
    and the user's choices, ascending by chip count then rows."""
    out = []
    for t in divisors(hw.num_chips):
        if limits.max_tensor_parallel is not None and t > limits.max_tensor_parallel:
            continue
        if limits.tensor_parallel_within_node and (t > hw.chips_per_node or hw.chips_per_node % t):
            continue
        if model.hidden_size % t or model.ffn_size % t:
            continue
        for rows in divisors(t):
            cols = t // rows
            if model.num_heads % cols:
                continue
            kv = model.kv_heads
            if kv % cols and cols % kv:
                continue
            mesh = train.tensor_mesh
            if mesh == "1d" and rows != 1:
                continue
            if isinstance(mesh, list) and [rows, cols] != mesh:
                continue
            out.append((rows, cols))
    return out


def enumerate_candidates(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, limits: SearchConstraints
) -> Candidates:
    """Every allowed configuration (see module docstring), canonical order."""
    cols_out: dict[str, list[int]] = {c: [] for c in COLUMNS}
    batch, layers = train.global_batch_sequences, model.num_layers
    modes = (
        list(range(len(RECOMPUTE_MODES)))
        if train.recompute == "auto"
        else [RECOMPUTE_MODES.index(train.recompute)]
    )
    zeros_allowed = [z for z in limits.zero_stages if 0 <= z <= 3] or [0]
    for rows, cols in tensor_meshes(model, hw, train, limits):
        t = rows * cols
        for pp in _fixed(train.pipeline_parallel, divisors(hw.num_chips // t)):
            if pp > layers or (
                limits.max_pipeline_stages is not None and pp > limits.max_pipeline_stages
            ):
                continue
            dp = hw.num_chips // (t * pp)
            if batch % dp or (train.data_parallel != "auto" and dp != train.data_parallel):
                continue
            per_replica = batch // dp
            sizes = [b for b in divisors(per_replica) if b <= limits.max_micro_batch_size]
            for mbs in _fixed(train.micro_batch_size, sizes):
                if mbs % rows:
                    continue
                m = per_replica // mbs
                vs = range(1, limits.max_interleave + 1) if pp > 1 else [1]
                for v in _fixed(train.interleave, list(vs)):
                    if pp * v > layers or (v > 1 and m % pp):
                        continue
                    zeros = zeros_allowed if dp > 1 else [0]
                    if train.zero_stage != "auto":
                        zeros = [train.zero_stage] if dp > 1 or train.zero_stage == 0 else []
                    for rc in modes:
                        for z in zeros:
                            for name, val in zip(
                                COLUMNS, (rows, cols, pp, dp, mbs, v, rc, z), strict=True
                            ):
                                cols_out[name].append(val)
    arrays = {c: np.asarray(cols_out[c], dtype=np.int64) for c in COLUMNS}
    return Candidates(**arrays).take(canonical_order(Candidates(**arrays)))


def canonical_order(c: Candidates) -> np.ndarray:
    """The tie-break order: fewer tensor chips, then fewer pipeline stages,
    fewer rows, smaller ZeRO stage, less recomputation, less interleaving,
    larger micro-batch. Among equal step times the earliest row wins, so
    the plan prefers the simplest configuration and never depends on
    enumeration or solver timing."""
    keys = (-c.mbs, c.v, c.recompute, c.zero, c.rows, c.pp, c.tp)
    return np.lexsort(keys)
