"""The hardware as the whole-step model reads it, for every cluster kind:
the chip (peak, HBM capacity and bandwidth, the calibration's roofline GEMM
model and attention rate), where every parallel axis of a configuration
runs (hardware/layout.py) and the link each level of an axis uses for each
collective. Built once per plan; layouts, tensor contexts and links are
cached, so the search prices thousands of candidates from a few dozen of
them.

Link of one level of a data-parallel or pipeline axis, for an operation:
the calibration's entry for the level's resource kind (torus, switched,
fully_connected, scale_out, dcn), its bandwidth times the level's unit-link
count, with its size regimes; without one, the same operation's entry of
the cluster's own calibration (its nominal figures, with a warning); for a
send-recv without an entry, the all-gather entry of the kind; for the
cluster file's explicit `data_parallel_gb_per_s` / `pipeline_gb_per_s`,
that rate with `network_latency_us` per ring step; otherwise the level's
nominal data-sheet rate alone, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from autotune.errors import InputError
from autotune.hardware.calibration import compute_model_for, link_params
from autotune.hardware.cluster import Cluster
from autotune.hardware.layout import AxisLayout, Layout, Level, expert_axes, place_layout
from autotune.hardware.placement import ResourceKind
from autotune.plan.context import SearchContext, check_calibration
from autotune.plan.context import search_context as fc_search_context
from autotune.specs.calibration import CalibrationSpec, LinkSpec
from autotune.specs.job import JobInput
from autotune.specs.training import Fp8Recipe, TrainingSpec
from cost_models import CommModel, ComputeModel, LinkParams, MeshShape, ring_collective_s
from cost_models.moe import DEFAULT_HOST_LAUNCH_S

GB = 1e9
GIB = float(2**30)


@dataclass
class HardwareView:
    """Per-chip figures in base units and the links of every placed axis."""

    cluster: Cluster
    calibration_name: str
    fc_base: SearchContext  # the FC planner's context before a mesh is placed
    peak_flops_per_s: float | None
    gemm: ComputeModel
    attention_flops_per_s: float  # the fused kernel's rate at long sequences
    hbm_bytes: float
    hbm_bytes_per_s: float
    overlap_slowdown: float
    workspace_bytes: float
    reserve_bytes: float
    warnings: list[str]
    #: the fused kernel's rate halves at this sequence length (0: constant)
    attention_seq_half: float = 0.0
    #: the backward kernel's own rate and half length (None: the forward's)
    attention_backward_flops_per_s: float | None = None
    attention_backward_seq_half: float = 0.0
    #: the longest sequence the forward and backward rows measured (None: no
    #: rows; the rates are held there beyond it)
    attention_max_seq: float | None = None
    attention_backward_max_seq: float | None = None
    #: host seconds per kernel of the routed experts' per-expert path, and
    #: whether the calibration measured it (else the cited default)
    host_launch_s: float = DEFAULT_HOST_LAUNCH_S
    host_launch_measured: bool = False
    _layouts: dict = field(default_factory=dict, repr=False)
    _expert_axes: dict = field(default_factory=dict, repr=False)
    _contexts: dict = field(default_factory=dict, repr=False)
    _links: dict = field(default_factory=dict, repr=False)

    @property
    def num_chips(self) -> int:
        """Chips in the cluster."""
        return self.cluster.num_chips

    @property
    def usable_bytes(self) -> float:
        """HBM left for tensors: capacity less the reserve and the workspace."""
        return self.hbm_bytes - self.reserve_bytes - self.workspace_bytes

    def layout(self, mesh: MeshShape, dp: int, pp: int, cp: int = 1) -> Layout | str:
        """Where every axis runs (hardware/layout.py), or why it cannot."""
        key = (mesh, dp, pp, cp)
        if key not in self._layouts:
            self._layouts[key] = place_layout(self.cluster, mesh, dp, pp, cp)
        return self._layouts[key]

    def expert_axes(
        self, mesh: MeshShape, dp: int, pp: int, cp: int, ep: int, etp: int = 1
    ) -> tuple[AxisLayout, AxisLayout, AxisLayout] | str:
        """The expert-tensor, expert-parallel and expert-data axes of a
        configuration (hardware/layout.py `expert_axes`), or why they cannot
        be laid out."""
        key = (mesh, dp, pp, cp, ep, etp)
        if key not in self._expert_axes:
            layout = self.layout(mesh, dp, pp, cp)
            self._expert_axes[key] = (
                layout if isinstance(layout, str) else expert_axes(self.cluster, layout, ep, etp)
            )
        return self._expert_axes[key]

    def tensor_context(self, mesh: MeshShape) -> SearchContext:
        """The FC planner's context with `mesh` placed on the cluster (its
        links, shared resources and calibration checks); InputError when the
        calibration cannot price an axis of it."""
        if mesh not in self._contexts:
            try:
                self._contexts[mesh] = self.fc_base.for_mesh(mesh)
            except InputError as exc:
                self._contexts[mesh] = exc
        got = self._contexts[mesh]
        if isinstance(got, InputError):
            raise got
        return got

    def tensor_comm(self, mesh: MeshShape) -> CommModel:
        """The links of both tensor-mesh axes of `mesh`."""
        return self.tensor_context(mesh).comm

    def level_link(self, level: Level, op: str) -> LinkParams:
        """The link one level of an axis uses for `op` (module docstring)."""
        key = (level, op)
        if key not in self._links:
            self._links[key] = self._resolve(level, op)
        return self._links[key]

    def _resolve(self, level: Level, op: str) -> LinkParams:
        spec = self.cluster.spec
        if level.kind is ResourceKind.CLUSTER_FIGURES:
            latency_s = (spec.network_latency_us or 0.0) * 1e-6
            assert level.nominal_bytes_per_s is not None
            return LinkParams(0.0, latency_s, level.nominal_bytes_per_s)
        kind = level.kind.value
        ctx = self.fc_base
        for calibration in (ctx.calibration, ctx.fallback_calibration):
            if calibration is None:
                continue
            found = level_entry(calibration, level, op)
            if found is not None:
                name, entry = found
                if calibration is not ctx.calibration:
                    figures = calibration.figures.value if calibration.figures else "its"
                    self._warn(
                        f"calibration {self.calibration_name} has no {name}.{kind} entry: "
                        f"{level.resource} uses the cluster's own calibration "
                        f"{calibration.name} ({figures} figures)"
                    )
                return link_params(entry, level.link_multiplier)
        rate = level.nominal_bytes_per_s
        if not rate:
            raise InputError(
                f"has no {op} entry for {kind}, which a {level.description} needs, and the "
                "cluster gives no nominal rate for it",
                file=ctx.calibration_ref or ctx.calibration.name,
                field=f"collectives.{op}.{kind}",
                fix=f"measure {op} on that resource and rerun `meshtune calibrate`, or give the "
                "cluster's link figures",
            )
        latency_s = (spec.network_latency_us or 0.0) * 1e-6
        self._warn(
            f"calibration {self.calibration_name} has no {op}.{kind} entry: {level.resource} "
            f"traffic is priced at its nominal {rate / GB:g} GB/s per chip"
            + ("" if spec.network_latency_us is not None else " with no latency")
        )
        return LinkParams(0.0, latency_s, float(rate))

    def _warn(self, line: str) -> None:
        if line not in self.warnings:
            self.warnings.append(line)

    def hierarchical_ring_s(self, axis: AxisLayout, op: str, total_bytes: ArrayLike) -> np.ndarray:
        """Seconds of one reduce-scatter or all-gather of `total_bytes` per
        chip over `axis`'s groups, level by level (innermost first for a
        reduce-scatter, the reverse for an all-gather; the time is the same
        sum): level `l` of size `P_l` moves a piece of
        `total / (P_1 ... P_l)` per chip, `ring_collective_s` on its link
        (cost_models.collectives). One level is the plain ring of
        `total / P`; a group of one chip costs nothing. Vectorised."""
        total = np.asarray(total_bytes, dtype=float)
        seconds = np.zeros_like(total)
        divided = 1
        for level in axis.levels:
            divided *= level.size
            seconds = seconds + ring_collective_s(
                self.level_link(level, op), level.size, total / divided
            )
        return seconds

    def hierarchical_transfer_floor_s(
        self, axis: AxisLayout, op: str, total_bytes: ArrayLike
    ) -> np.ndarray:
        """A lower bound of :meth:`hierarchical_ring_s`, linear in
        `total_bytes`: each level's `(P_l - 1) * piece / bandwidth` with the
        fastest bandwidth of the level link's size regimes and no launch or
        synchronisation (every term of ring_collective_terms is at least
        this). Seconds; vectorised."""
        total = np.asarray(total_bytes, dtype=float)
        seconds = np.zeros_like(total)
        divided = 1
        for level in axis.levels:
            divided *= level.size
            if level.size <= 1:
                continue
            bw = self.level_link(level, op).fastest_bytes_per_s
            seconds = seconds + (level.size - 1) * (total / divided) / bw
        return seconds

    def hierarchical_all_to_all_s(
        self,
        axis: AxisLayout,
        total_bytes: ArrayLike,
        scale_out_share: float = 1.0,
        scale_up_share: float = 1.0,
        relayed: bool = False,
    ) -> np.ndarray:
        """Seconds of one all-to-all over `axis`'s groups in which every chip
        holds `total_bytes` and sends `total / P` to each of the `P` chips
        (itself included). A pairwise exchange on one level of `P_l` chips is
        `P_l - 1` steps of a `total / P` piece each, the ring formula
        `ring_collective_s(link, P_l, total / P)` (every chip's egress
        carries `(P_l - 1) / P_l` of its bytes, as in an all-gather). Across
        levels, the destinations outside the `Q = P_1 ... P_(l-1)` chips of
        the inner levels are reached over level `l`: `P_l - 1` pieces of
        `Q total / P` each, so level by level::

            t = sum_l ring_collective_s(link_l, P_l, Q_(l-1) total / P)

        the levels one after the other (an upper bound when NCCL runs them
        at once). Each level's link is the calibration's all-to-all entry for
        its resource (fitted from nccl-tests `alltoall_perf` logs or
        `all_to_all` rows), else its all-gather link (the same wires and
        per-chip egress; level_entry). `scale_out_share` scales the bytes on levels
        that cross nodes or slices (a mixture of experts' node-limited
        routing, cost_models.moe.node_limited_share, or a deduplicating
        dispatcher's once-per-node sends) and `scale_up_share` those inside
        one (its once-per-rank sends, cost_models.moe.deduplicated_share).

        `relayed`: a token-based dispatcher (DeepEP, HybridEP) sends a token
        over an outer level once, to the chip of the same local index, which
        forwards it over the inner levels, and runs the levels at once
        ("exchange data between GPUs with the same local index across
        nodes, then forwards within each node ... allows inter-node and
        intra-node transfers to overlap", Megatron-Core MoE report,
        arXiv:2603.07685 section 4.2.2). An inner level then also carries
        what the chip forwards for the `R_l` groups of the levels outside
        it, as much as it sends of its own by symmetry, so::

            t = max_l ring_collective_s(link_l, P_l, R_l Q_(l-1) total / P)

        `R_l` the product of the sizes of the levels outside `l`.
        Vectorised."""
        pieces = axis.all_to_all_pieces(total_bytes, scale_out_share, scale_up_share)
        times = []
        outside = int(np.prod([level.size for level in axis.levels]))
        for level, piece in pieces:
            outside //= level.size
            relay = outside if relayed else 1
            times.append(
                ring_collective_s(self.level_link(level, "all_to_all"), level.size, relay * piece)
            )
        zero = np.zeros_like(np.asarray(total_bytes, dtype=float))
        if relayed:
            return np.maximum.reduce([zero, *times])
        return sum(times, zero)

    def send_s(self, axis: AxisLayout, message_bytes: ArrayLike) -> np.ndarray:
        """Seconds of one send-recv of `message_bytes` between neighbours of
        `axis` (a ring of two on the outermost level it crosses: neighbours
        that sit in different nodes or slices are bounded by that link).
        Zero for a single chip. Vectorised."""
        size = np.asarray(message_bytes, dtype=float)
        if not axis.levels:
            return np.zeros_like(size)
        return ring_collective_s(self.level_link(axis.levels[-1], "send_recv"), 2, size)


def base_training(inp: JobInput) -> TrainingSpec:
    """A resolved training with the input's shape and every degree 1 (what
    the FC planner's context and calibration checks read)."""
    return inp.training.resolved(
        data_parallel=1,
        pipeline_parallel=1,
        micro_batch_size=inp.training.global_batch_sequences,
        interleave=1,
        recompute="none",
        zero_stage=0,
    )


def level_entry(calibration: CalibrationSpec, level: Level, op: str) -> tuple[str, LinkSpec] | None:
    """The (operation, entry) of `calibration` that prices `op` on one
    level of an axis: the level's resource kind under `op`, a send-recv
    (one ring step) or an all-to-all (the same wires and per-chip egress,
    `P - 1` pieces) falling back to the all-gather; None when it has
    neither."""
    for name in (op, "all_gather") if op in ("send_recv", "all_to_all") else (op,):
        entry = calibration.collectives.get(name, {}).get(level.kind.value)
        if entry is not None:
            return name, entry
    return None


def _need(inp: JobInput, field_name: str, why: str) -> InputError:
    return InputError(
        f"is missing; the whole-step model needs it for {why}",
        file=inp.cluster_ref or inp.source_file,
        field=f"cluster.{field_name}",
        fix=f"add `{field_name}:` to the cluster (or name a chip preset with `chip:`) with its "
        "data-sheet value and source",
    )


def hardware_view(inp: JobInput) -> HardwareView:
    """Resolve the cluster, chip and calibration of `inp` (one-line
    InputError for a figure the step cannot do without; warnings for gaps
    it can)."""
    probe = inp.plan_input(base_training(inp))
    ctx = fc_search_context(probe)
    warnings = list(check_calibration(probe))
    cluster, spec, t = ctx.cluster, inp.cluster, inp.training
    chip = cluster.chip
    peaks = chip.peak_tflops_per_s if chip is not None else (spec.peak_tflops_per_s or {})
    # fp8 needs matrix units built for it (Hopper, Blackwell, MI300): a chip
    # that lists its peaks without fp8 cannot run it at all; other dtypes
    # missing from the list only lack a peak (warned by check_calibration)
    if (
        t.fp8 is not Fp8Recipe.NONE
        and "fp8" not in peaks
        and cluster.peak_flops_per_s("fp8") is None
    ):
        what = f"chip {chip.name} of cluster {spec.name}" if chip else f"cluster {spec.name}"
        listed = f"it lists {', '.join(peaks)}" if peaks else "it gives no fp8 peak"
        raise InputError(
            f"got {t.fp8.value}, an FP8 recipe, which {what} has no fp8 matrix units for "
            f"({listed})",
            file=inp.source_file,
            field="training.fp8",
            fix="set fp8: none, or plan on a chip with fp8 tensor cores (H100, H200, B200, MI300X)",
        )
    if cluster.hbm_bytes is None:
        raise _need(inp, "hbm_gib", "the memory check")
    # the calibration's HBM rate (measured) before the chip's nominal one
    hbm_per_s = ctx.compute.hbm_bytes_per_s or cluster.hbm_bytes_per_s
    if hbm_per_s is None:
        if spec.hbm_gb_per_s is None:
            raise _need(inp, "hbm_gb_per_s", "memory-bound operations")
        hbm_per_s = spec.hbm_gb_per_s * GB
    gemm = ctx.compute
    if t.fp8 is not Fp8Recipe.NONE:
        # the FC layers run FP8 (ctx.compute); the output layer and an
        # unfused attention core stay in dtype
        gemm = compute_model_for(
            inp.calibration,
            cluster,
            t.dtype.value,
            t.dtype.num_bytes,
            inp.calibration_ref or inp.calibration.name,
        )
    attention_half = backward_half = 0.0
    backward = longest = backward_longest = None
    measured_attention = inp.calibration.attention
    if measured_attention is not None:
        attention = measured_attention.flops_per_s
        attention_half = measured_attention.seq_half
        longest = float(measured_attention.measured_seq[1])
        if measured_attention.backward is not None:
            backward = measured_attention.backward.flops_per_s
            backward_half = measured_attention.backward.seq_half
            backward_longest = float(measured_attention.backward.measured_seq[1])
    elif spec.attention_tflops_per_s is not None:
        attention = spec.attention_tflops_per_s * 1e12
    else:
        attention = float(gemm.effective_flops_per_s)
        if t.attention.value == "flash":
            warnings.append(
                f"cluster {spec.name} gives no attention_tflops_per_s: the fused attention core "
                "is priced at the calibration's GEMM rate (attention rows in `meshtune calibrate` "
                "measure it)"
            )
    if inp.model.vocab_size is None:
        warnings.append(
            "the model gives no vocab_size: embedding, output layer and loss are left out"
        )
    hbm = float(cluster.hbm_bytes)
    return HardwareView(
        cluster=cluster,
        calibration_name=inp.calibration.name,
        fc_base=ctx,
        peak_flops_per_s=cluster.peak_flops_per_s(t.dtype.value),
        gemm=gemm,
        attention_flops_per_s=attention,
        attention_seq_half=attention_half,
        attention_backward_flops_per_s=backward,
        attention_backward_seq_half=backward_half,
        attention_max_seq=longest,
        attention_backward_max_seq=backward_longest,
        hbm_bytes=hbm,
        hbm_bytes_per_s=float(hbm_per_s),
        overlap_slowdown=ctx.overlap_slowdown,
        workspace_bytes=t.workspace_gib * GIB,
        reserve_bytes=t.memory_reserve_fraction * hbm,
        warnings=warnings,
        host_launch_s=(
            DEFAULT_HOST_LAUNCH_S
            if inp.calibration.host_launch_s is None
            else inp.calibration.host_launch_s
        ),
        host_launch_measured=inp.calibration.host_launch_s is not None,
    )
