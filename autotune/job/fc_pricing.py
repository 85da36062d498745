"""Time of one transformer block's FC layers on one tensor mesh, cached per
(mesh, tokens): the search prices tens of thousands of candidates but only a
few hundred distinct (mesh, micro-batch) pairs, so the per-GEMM slice-count
search of MeshSlice runs once per pair and GEMM, not once per candidate.

- `1 x t` meshes are Megatron 1D tensor parallelism with sequence
  parallelism (Korthikanti et al. 2022 section 4.2.2): per block, forward
  all-gathers the input of the QKV and first FFN GEMMs and reduce-scatters
  the outputs of the projection and last FFN GEMM (4 ring collectives of the
  `T x h` activation); backward issues twice as many (column-parallel
  layers reduce-scatter the data gradient and all-gather their input again
  for the weight gradient, row-parallel ones all-gather the output gradient
  for both GEMMs: Table 1's Y- and X-stationary rows), priced by the
  whole-step model's own function (job/fc.py `megatron_estimates`): each
  local GEMM by the calibration's GEMM model (efficiency curve, bounded by
  the chip's peak and HBM), each ring collective on the links placed on the
  cluster with their size regimes. The collectives block, so their time
  adds to the GEMMs'. The closed form fuses SwiGLU's gate and up
  projections into one GEMM, as Megatron-LM does.
- `r x c` meshes with `r, c > 1` are MeshSlice (cost_models.meshslice): every
  GEMM's forward (OS), backward-data (LS) and backward-weight (RS) at its best
  valid slice count, on the links the hardware layer places each mesh axis
  on (both axes inside one switched node share its egress; an axis that
  leaves the node runs on the NIC rails; hardware.md section 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.hardware.calibration import comm_model_for
from autotune.hardware.placement import place_mesh
from autotune.job.cluster_view import SearchHardware
from autotune.job.fc import megatron_backward_overlap_s, megatron_estimates
from autotune.plan.dataflow import GemmPass
from autotune.plan.layers import ATTN_OUT, FFN_DOWN, FFN_UP, QKV, FCLayer
from autotune.specs.model import FfnKind, ModelSpec
from cost_models.baselines.common import InfeasibleError
from cost_models.meshslice import Dataflow, meshslice_times, valid_slice_counts
from cost_models.types import CommModel, MeshShape

# MeshSlice slicing block: 128 x 8 tiles (TPU) and 8-wide GEMM tiles on GPUs
# alike keep slice widths a multiple of 8 elements.
SLICE_BLOCK = 8
MAX_SLICES = 32


@dataclass(frozen=True)
class FcTimes:
    """Seconds per block and micro-batch on one chip: forward and backward
    (data + weight) totals, and the part of each that is communication not
    hidden behind compute."""

    forward_s: float
    backward_s: float
    forward_comm_s: float
    backward_comm_s: float


def fc_gemms(model: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) widths of the block's FC GEMMs: QKV (grouped KV heads
    narrower), attention projection, FFN up (gate and up fused for SwiGLU)
    and down."""
    h, d = model.hidden_size, model.head_dim
    qkv = (model.num_heads + 2 * model.kv_heads) * d
    up = model.ffn_size * (2 if model.ffn_kind is FfnKind.SWIGLU else 1)
    return [(h, qkv), (model.attention_width, h), (h, up), (model.ffn_size, h)]


def _placed_comm(hw: SearchHardware, mesh: MeshShape) -> CommModel:
    """The calibration's links of both axes of `mesh` placed on the cluster
    (axes sharing a switch share its bandwidth), size regimes included."""
    assert hw.cluster is not None and hw.calibration is not None, "SearchHardware without cluster"
    return comm_model_for(hw.calibration, place_mesh(hw.cluster, mesh))


def _best_meshslice(
    dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape, hw: SearchHardware, el: int
) -> tuple[float, float]:
    """(total, compute) seconds at the fastest valid slice count; inf when
    the GEMM does not shard evenly over the mesh. Links and compute come
    from the hardware layer: the mesh placed on the cluster (axes sharing a
    switch share its bandwidth) and the calibration's roofline GEMM."""
    counts = valid_slice_counts(dataflow, m, n, k, mesh, SLICE_BLOCK, MAX_SLICES)
    if not counts:
        return math.inf, math.inf
    t = meshslice_times(
        dataflow,
        m,
        n,
        k,
        mesh,
        counts,
        el,
        _placed_comm(hw, mesh),
        hw.gemm,
        overlap_slowdown=hw.overlap_slowdown,
    )
    best = int(np.argmin(t["total_s"]))
    return float(t["total_s"][best]), float(t["compute_s"][best])


@lru_cache(maxsize=4096)
def fc_times(
    model: ModelSpec,
    hw: SearchHardware,
    rows: int,
    cols: int,
    tokens: int,
    element_bytes: int,
    overlap_backward: bool = False,
) -> FcTimes:
    """FC time of one block for `tokens` tokens per micro-batch (see module
    docstring); inf when the mesh cannot shard the block's GEMMs.
    `overlap_backward` (1D meshes): Megatron-LM's asynchronous
    tensor-parallel all-reduce (job/fc.py `megatron_backward_overlap_s`)."""
    gemms = fc_gemms(model)
    if rows == 1:
        layers = [
            FCLayer(name, i, o, tokens, 1)
            for name, (i, o) in zip((QKV, ATTN_OUT, FFN_UP, FFN_DOWN), gemms, strict=True)
        ]
        comm = _placed_comm(hw, MeshShape(1, cols))
        try:
            pairs = megatron_estimates(layers, cols, comm, hw.gemm, element_bytes)
        except InfeasibleError:
            return FcTimes(math.inf, math.inf, math.inf, math.inf)
        fwd = [e for p, e in pairs if p is GemmPass.FORWARD]
        bwd = [e for p, e in pairs if p is not GemmPass.FORWARD]
        saving_s = (
            megatron_backward_overlap_s(layers, pairs, hw.overlap_slowdown)
            if overlap_backward
            else 0.0
        )
        return FcTimes(
            sum(e.total_s for e in fwd),
            sum(e.total_s for e in bwd) - saving_s,
            sum(e.breakdown.exposed_comm_s for e in fwd),
            sum(e.breakdown.exposed_comm_s for e in bwd) - saving_s,
        )
    mesh = MeshShape(rows, cols)
    fwd = fwd_c = bwd = bwd_c = 0.0
    for i, o in gemms:
        tot, comp = _best_meshslice(Dataflow.OS, tokens, o, i, mesh, hw, element_bytes)
        fwd, fwd_c = fwd + tot, fwd_c + comp
        for flow, mnk in ((Dataflow.LS, (tokens, i, o)), (Dataflow.RS, (i, o, tokens))):
            tot, comp = _best_meshslice(flow, *mnk, mesh, hw, element_bytes)
            bwd, bwd_c = bwd + tot, bwd_c + comp
    return FcTimes(fwd, bwd, max(fwd - fwd_c, 0.0), max(bwd - bwd_c, 0.0))
