"""The Plan: the chosen configuration in full, its predictions, the
alternatives and what each loses to, the search's figures and where the
inputs came from. One type for every plan, pinned or searched; the report,
the `meshtune.plan/3` document, `export` and `verify` all read it
(architecture.md "the Plan document").

`make_plan` runs the one search (search.py), then prices the winner in
detail with the same step model (model.py) and builds its FC plan (the
per-layer dataflows and slice counts phase 1 chose for that mesh and
micro-batch, or Megatron's GEMMs). For a file that pins degrees it also
searches with every degree free (no layer balancing: even splits are
configurations a user can run as they are); when that finds a configuration
that fits and is more than 10% faster, the plan says which and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune.errors import InputError, NoFeasiblePlanError
from autotune.hardware.layout import Layout, ParallelAxis
from autotune.job.accuracy import Extrapolation, step_band_rel
from autotune.job.balance_adapter import Balanced
from autotune.job.block import BlockFigures, EndFigures
from autotune.job.candidates import Refusals, tensor_meshes
from autotune.job.experts import ExpertFigures
from autotune.job.extrapolate import plan_extrapolations
from autotune.job.fc import FcBlock, FcTable, megatron_plan_result
from autotune.job.hardware import GIB, HardwareView, hardware_view
from autotune.job.model import PARTS, Candidates, StageDetail, price
from autotune.job.search import TIE_RELATIVE, Evaluated, SearchOutcome, key_figures, search
from autotune.plan.results import PlanResult
from autotune.plan.search import evaluate_meshes, plan_result
from autotune.specs.job import DEGREE_KEYS, RECOMPUTE_MODES, JobInput, TrainingInput
from autotune.specs.model import FfnKind
from autotune.specs.model_params import block_params
from autotune.specs.training import FcAlgorithm, TrainingSpec
from cost_models import MeshShape
from cost_models.transformer_flops import (
    model_flops_per_token,
    recompute_flops_per_token,
    windowed_attention_share,
)

BETTER_BY = 0.10
"""A pinned plan names a free configuration faster by more than this share."""


@dataclass(frozen=True)
class Alternative:
    """Another configuration: its step, memory and what it loses to (the
    part of the step in which it exceeds the chosen one most)."""

    config: dict[str, int | str]
    recompute: str
    step_s: float
    peak_bytes: float
    fits: bool
    slower_by_s: float
    loses_to: str
    loses_s: float
    #: within the chosen plan's error band: the model cannot tell them apart
    within_band: bool = False


@dataclass(frozen=True)
class Better:
    """A configuration the free search finds, faster than a pinned plan."""

    config: dict[str, int | str]
    recompute: str
    step_s: float
    peak_bytes: float
    speedup: float  # pinned step / this step


@dataclass(frozen=True)
class Plan:
    """One plan in full (base units)."""

    inp: JobInput
    hw: HardwareView
    config: dict[str, int | str]
    recompute: str
    training: TrainingSpec
    layout: Layout
    fc: PlanResult
    block: BlockFigures
    ends: EndFigures
    stages: StageDetail
    step_s: float
    makespan_s: float
    parts: dict[str, float]
    busiest_stage: int
    bubble_fraction: float
    peak_bytes: float
    fits: bool
    model_flops_per_step: float
    hardware_flops_per_step: float
    balanced: Balanced | None
    even_split_step_s: float | None
    alternatives: tuple[Alternative, ...]
    tied: tuple[Alternative, ...]
    faster_but_out_of_memory: tuple[Alternative, ...]
    better: Better | None
    outcome: SearchOutcome
    warnings: tuple[str, ...]
    #: the step's relative error band from the calibration's held-out errors
    #: (job/accuracy.py); None when the calibration records none
    band_rel: float | None = None
    #: parts of the plan priced beyond what the calibration measured
    extrapolations: tuple[Extrapolation, ...] = ()
    #: a mixture of experts: one MoE block's routed part (job/experts.py)
    experts: ExpertFigures | None = None

    @property
    def num_chips(self) -> int:
        """Chips of the cluster."""
        return self.hw.num_chips

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step and replica."""
        t = self.inp.training
        return t.global_batch_sequences // (int(self.config["dp"]) * int(self.config["mbs"]))

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one step."""
        t = self.inp.training
        return t.global_batch_sequences * t.sequence_length

    @property
    def tokens_per_s(self) -> float:
        """Tokens the whole cluster trains per second."""
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float | None:
        """Model FLOPs / (step * chips * peak)."""
        peak = self.hw.peak_flops_per_s
        return (
            None if not peak else self.model_flops_per_step / (self.step_s * self.num_chips * peak)
        )

    @property
    def hfu(self) -> float | None:
        """Executed FLOPs (recomputation included) / (step * chips * peak)."""
        peak = self.hw.peak_flops_per_s
        if not peak:
            return None
        return self.hardware_flops_per_step / (self.step_s * self.num_chips * peak)

    @property
    def usable_bytes(self) -> float:
        """HBM less the reserve and the workspace."""
        return self.hw.usable_bytes


def _flops(inp: JobInput, shares: np.ndarray) -> tuple[float, float]:
    """Model FLOPs per step (MFU's numerator) and executed FLOPs with the
    recomputation of each mode weighted by its share of the layers."""
    m, t = inp.model, inp.training
    args = (m.hidden_size, m.num_heads, m.kv_heads, m.head_dim, m.ffn_size)
    gated = m.ffn_kind is FfnKind.SWIGLU
    flash = t.attention.value == "flash"
    # a flash kernel skips the masked half (and a window's masked tiles):
    # count what it executes
    windowed = m.windowed_blocks / m.num_layers
    share = 1.0
    if flash and windowed:
        share = (
            1.0
            - windowed
            + windowed * windowed_attention_share(t.sequence_length, m.sliding_window)
        )
    per_token = model_flops_per_token(
        m.num_layers,
        *args,
        gated,
        m.vocab_size or 0,
        t.sequence_length,
        causal=flash,
        core_share=share,
    )
    extra = sum(
        float(shares[i])
        * recompute_flops_per_token(
            mode, m.num_layers, *args, gated, t.sequence_length, flash, core_share=share
        )
        for i, mode in enumerate(RECOMPUTE_MODES)
    )
    if m.moe is not None:
        # a mixture of experts: the weights a token uses (plan/layers
        # `block_params` with `active`: k routed experts), MLA's core widths
        active = sum(block_params(m, i, active=True) for i in range(m.num_layers))
        core = 12.0 * m.num_layers * t.sequence_length * m.num_heads * m.core_head_dim
        core *= (0.5 if flash else 1.0) * share
        per_token = 6.0 * (active + m.hidden_size * (m.vocab_size or 0)) + core
        full = 2.0 * active + core / 3.0
        extra = float(shares[1]) * core / 3.0 + float(shares[2]) * full
    tokens = t.global_batch_sequences * t.sequence_length
    return per_token * tokens, (per_token + extra) * tokens


def resolved_training(inp: JobInput, config: dict[str, int | str], recompute: str) -> TrainingSpec:
    """The training of one configuration (`per-stage` recomputation counts
    as the lightest mode used, for the FC plan's per-step counts only)."""
    mode = recompute if recompute in RECOMPUTE_MODES else str(config["recompute"])
    return inp.training.resolved(
        data_parallel=int(config["dp"]),
        pipeline_parallel=int(config["pp"]),
        context_parallel=int(config.get("cp", 1)),
        expert_parallel=int(config.get("ep", 1)),
        expert_tensor_parallel=int(config.get("etp", 1)),
        micro_batch_size=int(config["mbs"]),
        interleave=int(config["v"]),
        recompute=mode,
        zero_stage=int(config["zero"]),
    )


def _loses(e: Evaluated, winner: Evaluated) -> tuple[str, float]:
    diffs = {k: e.parts[k] - winner.parts[k] for k in PARTS}
    worst = max(diffs, key=lambda k: diffs[k])
    return PARTS[worst], diffs[worst]


def _alternative(e: Evaluated, winner: Evaluated, band_rel: float | None = None) -> Alternative:
    loses_to, loses_s = _loses(e, winner)
    if not e.fits:
        loses_to, loses_s = "memory", e.peak_bytes - winner.peak_bytes
    within = band_rel is not None and e.fits and e.step_s <= winner.step_s * (1 + band_rel)
    return Alternative(
        e.config,
        e.recompute,
        e.step_s,
        e.peak_bytes,
        e.fits,
        e.step_s - winner.step_s,
        loses_to,
        loses_s,
        within,
    )


def _fc_result(
    inp: JobInput, hw: HardwareView, training: TrainingSpec, mesh: MeshShape
) -> PlanResult:
    """The FC plan of the chosen mesh: phase 1's choice on it, with every
    mesh of its tensor-parallel size ranked beside it (MeshSlice), or
    Megatron's GEMMs (megatron-1d)."""
    pinput = inp.plan_input(training)
    ctx = hw.tensor_context(mesh)
    if inp.training.fc_algorithm is FcAlgorithm.MEGATRON_1D:
        return megatron_plan_result(pinput, mesh, ctx)
    meshes = [x for x in tensor_meshes(inp, hw, Refusals()) if x.num_chips == mesh.num_chips]
    contexts = {}
    usable = []
    for x in meshes:
        try:
            contexts[x] = hw.tensor_context(x)
            usable.append(x)
        except InputError:
            continue
    policy = inp.search.dataflow
    rows = evaluate_meshes(pinput, policy, usable, hw.fc_base, contexts)
    return plan_result(pinput, policy, rows, mesh, hw.fc_base)


def _free_input(inp: JobInput) -> JobInput:
    """The input with every degree left to the search (and the layers cut
    by the even split: a pinned layout holds for its degrees only)."""
    free: dict[str, object] = {k: None for k in DEGREE_KEYS}
    free["micro_batches"] = None
    free["pipeline_layout"] = None
    training = TrainingInput.model_validate({**inp.training.model_dump(mode="python"), **free})
    return inp.model_copy(update={"training": training})


def _better(inp: JobInput, hw: HardwareView, table: FcTable, winner: Evaluated) -> Better | None:
    """The free search's best, when it fits and beats the pinned plan by
    more than BETTER_BY (module docstring)."""
    if not inp.training.pinned_degrees:
        return None
    free = _free_input(inp)
    below_s = winner.step_s * (1 - BETTER_BY)
    outcome = search(free, hw, balance_layers=False, table=table, keep=1, below_s=below_s)
    if not outcome.ranked:
        return None
    best = outcome.ranked[0]
    if best.step_s >= below_s:
        return None
    return Better(
        best.config, best.recompute, best.step_s, best.peak_bytes, winner.step_s / best.step_s
    )


def _pinned_error(inp: JobInput, refusals: Refusals) -> InputError | None:
    """The refusal of a pinned degree, as the one-line error that names it."""
    t = inp.training
    for degree, value, reason in refusals.lines():
        if degree in t.pinned_degrees or degree == "layout":
            field = f"training.{degree}" if degree != "layout" else "training"
            shown = getattr(t, degree) if degree in t.pinned_degrees else value
            return InputError(
                f"{reason}",
                file=inp.source_file,
                field=field,
                value=shown,
                fix="pin another value, or leave the degree out (or `auto`) to let meshtune "
                "choose it",
            )
    return None


def _no_configuration(inp: JobInput, outcome: SearchOutcome) -> Exception:
    """Why nothing can run: a pinned degree's refusal (exit 2), a
    calibration gap (exit 2), or none of the rest (exit 1)."""
    pinned = _pinned_error(inp, outcome.refusals)
    if pinned is not None and outcome.num_candidates == 0:
        return pinned
    if outcome.table.errors and outcome.num_priced == 0:
        return outcome.table.errors[0]
    # context parallelism is refused for most short sequences: its reasons
    # go after the others
    lines = sorted(outcome.refusals.lines(), key=lambda line: line[0] == "context_parallel")
    reasons = "; ".join(f"{d} {v}: {r}" for d, v, r in lines[:4]) or "no configuration"
    if outcome.num_candidates == 0:
        return InputError(
            f"no configuration of {inp.cluster.num_chips} chips is possible ({reasons})",
            file=inp.source_file,
            field="training",
            fix="leave more degrees to the search or change the cluster",
        )
    return NoFeasiblePlanError(f"no configuration can run the model ({reasons})")


def make_plan(
    inp: JobInput, hw: HardwareView | None = None, *, suggest_better: bool = True
) -> Plan:
    """Search `inp` and build its Plan (module docstring). A plan whose
    best configuration does not fit in memory is returned with `fits`
    False (the caller reports it and exits 1); no configuration at all is
    an InputError (exit 2) or NoFeasiblePlanError (exit 1).
    `suggest_better` False skips the free search of a pinned file."""
    hw = hw or hardware_view(inp)
    outcome = search(inp, hw)
    if outcome.ranked:
        winner = outcome.ranked[0]
    else:
        closest = _closest(inp, hw, outcome)
        if closest is None:
            raise _no_configuration(inp, outcome)
        winner = closest
    config = winner.config
    mesh = MeshShape(int(config["rows"]), int(config["cols"]))
    training = resolved_training(inp, config, winner.recompute)
    one = Candidates.of([{**config, "recompute": RECOMPUTE_MODES.index(str(config["recompute"]))}])
    model = inp.model
    priced = price(
        one,
        outcome.figures,
        hw,
        inp.training,
        model.num_layers,
        model.hidden_size,
        assignments=None if winner.counts is None else [winner.counts],
        detail=True,
    )
    fc = _fc_result(inp, hw, training, mesh)
    key = one.figure_keys()[0]
    layout = outcome.figures.layouts[one.layout_keys()[0]]
    experts = None
    if model.moe is not None:
        experts = outcome.figures.experts[one.expert_keys()[0]]
        ep_axes = hw.expert_axes(
            mesh,
            int(config["dp"]),
            int(config["pp"]),
            int(config.get("cp", 1)),
            int(config.get("ep", 1)),
            int(config.get("etp", 1)),
        )
        assert not isinstance(ep_axes, str)
        # the expert-tensor axis is listed when it splits the experts
        shown = tuple(a for a in ep_axes if a.size > 1 or a.axis is not ParallelAxis.EXPERT_TENSOR)
        layout = replace(layout, axes=layout.axes + shown)
    detail = priced.detail[0]
    assert detail is not None
    model_flops, hw_flops = _flops(inp, priced.recompute_flops_share[0])
    ranked = outcome.ranked
    tied = [e for e in ranked[1:] if e.step_s <= winner.step_s * (1 + TIE_RELATIVE)]
    rest = [e for e in ranked[1:] if e.step_s > winner.step_s * (1 + TIE_RELATIVE)]
    lim = inp.constraints
    parts = {k: float(priced.parts[k][0]) for k in PARTS}
    step_s = float(priced.step_s[0])
    band = step_band_rel(parts, step_s, inp.calibration.expected_error)
    better = None
    if suggest_better and outcome.ranked:
        better = _better(inp, hw, outcome.table, winner)
    return Plan(
        inp=inp,
        hw=hw,
        config=config,
        recompute=winner.recompute,
        training=training,
        layout=layout,
        fc=fc,
        block=outcome.figures.blocks[key],
        ends=outcome.figures.ends[key],
        experts=experts,
        stages=detail,
        step_s=step_s,
        makespan_s=float(priced.makespan_s[0]),
        parts=parts,
        busiest_stage=int(priced.busiest_stage[0]),
        bubble_fraction=float(priced.bubble_fraction[0]),
        peak_bytes=float(priced.peak_bytes[0]),
        fits=bool(priced.fits[0]),
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops,
        balanced=winner.balanced,
        even_split_step_s=winner.even_split_step_s,
        alternatives=tuple(_alternative(e, winner, band) for e in rest[: lim.top_n]),
        tied=tuple(_alternative(e, winner) for e in tied[: lim.top_n]),
        faster_but_out_of_memory=tuple(_alternative(e, winner) for e in outcome.memory_excluded),
        better=better,
        outcome=outcome,
        warnings=tuple(
            dict.fromkeys(
                [
                    *hw.warnings,
                    *fc.warnings,
                    *_gap_warnings(outcome),
                    *_batch_warnings(inp, config, float(priced.bubble_fraction[0])),
                ]
            )
        ),
        band_rel=band,
        extrapolations=plan_extrapolations(
            inp.calibration,
            model,
            training,
            fc,
            layout.axes,
            config,
            detail.weights_bytes,
            experts,
        ),
    )


#: pipeline bubble above which a pipeline the batch forces is worth a warning
FORCED_PIPELINE_BUBBLE = 0.05


def _batch_warnings(inp: JobInput, config: dict[str, int | str], bubble: float) -> list[str]:
    """A line when the global batch, not the model, made the pipeline: the
    search chose `pp` stages (neither it nor data parallelism pinned) whose
    chips could not have been data-parallel replicas because `dp pp` does
    not divide the batch (every replica takes whole sequences), and the
    pipeline costs a bubble above FORCED_PIPELINE_BUBBLE. Names the nearest
    batches that `dp pp` divides (e.g. 72 GPUs of an NVL72 rack and a batch
    of 512: pipeline 9)."""
    t = inp.training
    pp, dp = int(config["pp"]), int(config["dp"])
    batch = t.global_batch_sequences
    if pp == 1 or bubble <= FORCED_PIPELINE_BUBBLE:
        return []
    if t.pinned("pipeline_parallel") is not None or t.pinned("data_parallel") is not None:
        return []
    replicas = dp * pp
    if batch % replicas == 0:
        return []
    lower = batch // replicas * replicas
    nearest = " or ".join(str(b) for b in (lower, lower + replicas) if b > 0)
    return [
        f"the batch of {batch} sequences does not divide over {replicas} data-parallel "
        f"replicas, so pipeline parallelism {pp} takes those chips (bubble {bubble:.1%}); "
        f"a batch of {nearest} sequences would let data parallelism take them"
    ]


def _gap_warnings(outcome: SearchOutcome) -> list[str]:
    """One line per calibration gap that kept tensor meshes from the search."""
    return [
        f"tensor meshes the calibration cannot price were left out: {err.one_line()}"
        for err in outcome.table.errors
    ]


def _closest(inp: JobInput, hw: HardwareView, outcome: SearchOutcome) -> Evaluated | None:
    """When nothing fits: the configuration that misses memory by the least
    (its report names the stage and the shortfall): among those priced, or,
    when the memory bound pruned them all, the one with the smallest bound
    whose mesh can run the block."""
    figs = outcome.figures
    c = outcome.candidates
    keys = c.figure_keys()
    c = c.take(np.flatnonzero([k in figs.blocks for k in keys]))  # the FC planner runs them
    if len(c) == 0:
        everything = outcome.enumerated
        if everything is None or len(everything) == 0:
            return None
        for i in np.argsort(outcome.memory_bound, kind="stable")[:64].tolist():
            one = everything.take(np.array([i]))
            key = one.figure_keys()[0]
            if isinstance(outcome.table.entries([key])[key], FcBlock):
                key_figures(inp, hw, outcome.table, one, figs)
                c = one
                break
        else:
            return None
    model = inp.model
    p = price(c, figs, hw, inp.training, model.num_layers, model.hidden_size)
    i = int(np.argmin(p.peak_bytes - p.capacity_bytes))
    return Evaluated(
        order=i,
        config=c.row(i),
        step_s=float(p.step_s[i]),
        peak_bytes=float(p.peak_bytes[i]),
        fits=False,
        parts={k: float(p.parts[k][i]) for k in PARTS},
    )


def out_of_memory_message(plan: Plan) -> str:
    """One line naming the stage that misses by the most and by how much."""
    st = plan.stages
    headroom = plan.hw.hbm_bytes - st.total_bytes
    s = int(np.argmin(headroom))
    where, more = "", ""
    if plan.experts is not None:
        # the busiest expert-parallel rank holds the most routed tokens
        ep = int(plan.config.get("ep", 1))
        where = (
            f" on its busiest expert-parallel rank (EP {ep}, {plan.experts.imbalance:.2f}x the "
            "mean routed tokens)"
        )
        more = "more expert parallelism, "
    return (
        f"out of memory: pipeline stage {s}{where} needs {st.total_bytes[s] / GIB:.1f} GiB "
        f"(weights {st.weights_bytes[s] / GIB:.1f}, gradients {st.gradients_bytes[s] / GIB:.1f}, "
        f"optimizer {st.optimizer_bytes[s] / GIB:.1f}, activations "
        f"{st.activation_bytes[s] / GIB:.1f}, buffers {st.buffer_bytes[s] / GIB:.1f}, "
        f"workspace {plan.hw.workspace_bytes / GIB:.1f}, reserve {plan.hw.reserve_bytes / GIB:.1f})"
        f" of {plan.hw.hbm_bytes / GIB:.1f} GiB, short by {-headroom[s] / GIB:.1f} GiB; fix: more "
        f"recomputation, a higher ZeRO stage, more pipeline stages, {more}more context "
        "parallelism or a smaller micro-batch (or leave them to the search)"
    )
