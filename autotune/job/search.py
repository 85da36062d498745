"""The one search: every configuration the user did not pin, on every
cluster kind, priced by the one step model (architecture.md "one plan, one
way through"). A fully pinned file is a search over one configuration.

1. Enumerate what the model, the cluster and the pins allow
   (candidates.py), with the reason for every refused degree.
2. Prune by a memory lower bound (bounds.py): no layer split or
   recomputation mix fits a candidate above it, so nothing is lost.
3. Bound every candidate's step without pricing an FC layer
   (`bound_figures`): the FC layers at block.fc_lower_bounds (per layer the
   least over its dataflows of the FLOPs at the highest GEMM rate or the
   bytes its busiest link carries), the ends without their vocabulary
   collectives, the rest exact; through the step model with the chain
   bound for the replay (the even split's bound) and through bounds.py
   (any layer split and recomputation mix).
4. Price exactly with the step model (model.py) in order of the even
   split's bound, pricing the FC layers of a (mesh, micro-batch) the first
   time a candidate needs them (fc.py; a mesh that cannot shard the block
   is refused with the FC planner's reason), until the bound of the next is
   above the `keep`-th best step that fits (`top_n + 1` by default): those
   left cannot enter the report.
5. Balance the layers with the pipeline ILP (layer_split: balanced): first
   the `finalists` best pipelined configurations, then any other whose
   step-3 bound is below the best step found, until none is left (the plan is then
   proved best under the model) or the budget (as many solves again as
   finalists) is spent. A balanced plan is priced by the step model and
   replaces its configuration when it is faster and does not depend on the
   machine's speed: proved within the solver's gap, or found by the
   balancer's move-bounded heuristics when the solver could not prove
   anything within `ilp_time_limit_s` (never a plan the clock cut).
6. Rank by step; steps equal within a relative 1e-9 go to the canonical
   order (candidates.canonical_order). With recomputation searched and a
   balanced pipeline winning, the balancer may mix the winner's mode with
   the next faster one per stage; a proved, faster plan replaces it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from autotune.errors import InputError
from autotune.hardware.layout import AxisLayout, Layout, ParallelAxis
from autotune.job.balance_adapter import Balanced, BalanceFigures, balance_candidate
from autotune.job.block import block_figures, end_figures, fc_lower_bounds
from autotune.job.bounds import memory_lower_bound, state_bytes_per_param, step_lower_bound
from autotune.job.candidates import Refusals, enumerate_candidates
from autotune.job.experts import expert_figures
from autotune.job.fc import FcBlock, FcTable
from autotune.job.hardware import HardwareView
from autotune.job.model import (
    PARTS,
    Candidates,
    KeyFigures,
    Priced,
    block_seconds,
    data_parallel_floor_s,
    gather_figures,
    hide_expert_comm,
    pipeline_send_s,
    price,
)
from autotune.job.trainers import per_expert_kernels, stage_mixes
from autotune.specs.job import RECOMPUTE_MODES, Constraints, JobInput
from autotune.specs.plan_input import DataflowPolicy
from autotune.specs.training import Fp8Recipe
from cost_models import MeshShape
from cost_models.fp8 import fp8_weight_copy_bytes_per_param

TIE_RELATIVE = 1e-9
BATCH = 64  # candidates priced in step 4's first round; each next round doubles


@dataclass(frozen=True)
class Evaluated:
    """One configuration with its step and where the step goes."""

    order: int  # position in the canonical order (the tie rule)
    config: dict[str, int | str]
    step_s: float
    peak_bytes: float
    fits: bool
    parts: dict[str, float]
    counts: np.ndarray | None = None  # balanced: layers per chunk and mode
    balanced: Balanced | None = None
    even_split_step_s: float | None = None

    @property
    def recompute(self) -> str:
        """The recomputation mode, or `per-stage` when a balanced plan mixes."""
        if self.counts is None:
            return str(self.config["recompute"])
        used = {RECOMPUTE_MODES[i] for i in range(3) if self.counts[:, i].sum() > 0}
        return used.pop() if len(used) == 1 else "per-stage"


@dataclass
class SearchOutcome:
    """Every evaluated configuration that fits, best first, the faster ones
    that do not fit, and the search's figures."""

    ranked: list[Evaluated]
    memory_excluded: list[Evaluated]
    num_candidates: int
    num_pruned_by_memory_bound: int
    num_refused_by_fc: int
    num_priced: int
    #: neither priced nor refused: their step bound could not beat the kept ones
    num_pruned_by_step_bound: int
    num_fit: int
    num_balanced: int
    num_balancer_unproved: int
    proved: bool
    refusals: Refusals
    elapsed_s: float
    figures: KeyFigures
    table: FcTable
    candidates: Candidates = field(repr=False)
    #: every enumerated configuration and its memory lower bound (bytes)
    enumerated: Candidates = field(repr=False, default=None)  # type: ignore[assignment]
    memory_bound: np.ndarray = field(repr=False, default=None)  # type: ignore[assignment]


def add_layouts(
    c: Candidates, hw: HardwareView, layouts: dict[tuple[int, int, int, int, int], Layout]
) -> None:
    """The layout of every (rows, cols, dp, pp, cp) of `c` not yet in
    `layouts` (enumeration kept only configurations that lay out)."""
    for key in dict.fromkeys(c.layout_keys()):
        if key not in layouts:
            rows, cols, dp, pp, cp = key
            layout = hw.layout(MeshShape(rows, cols), dp, pp, cp)
            assert isinstance(layout, Layout)
            layouts[key] = layout


def context_axis(hw: HardwareView, rows: int, cols: int, cp: int) -> AxisLayout | None:
    """Where a context-parallel group of `cp` next to the `rows x cols`
    tensor mesh runs (it is laid out right after the tensor mesh, so the
    outer axes do not move it); None without context parallelism."""
    if cp == 1:
        return None
    layout = hw.layout(MeshShape(rows, cols), 1, 1, cp)
    assert isinstance(layout, Layout)
    return layout.axis(ParallelAxis.CONTEXT)


def key_figures(
    inp: JobInput, hw: HardwareView, table: FcTable, c: Candidates, figs: KeyFigures
) -> None:
    """Fill `figs` for the candidates' keys (their FC entries are blocks)."""
    t, model = inp.training, inp.model
    keys = c.figure_keys()
    entries = table.entries(list(dict.fromkeys(keys)))
    for key, entry in entries.items():
        if key in figs.blocks:
            continue
        rows, cols, mbs, cp = key
        assert isinstance(entry, FcBlock)
        context = context_axis(hw, rows, cols, cp)
        figs.blocks[key] = block_figures(model, t, hw, entry, rows * cols, mbs, context)
        comm = hw.tensor_comm(MeshShape(rows, cols))
        figs.ends[key] = end_figures(model, t, hw, comm, rows, cols, mbs, cp)
    add_layouts(c, hw, figs.layouts)
    add_expert_figures(inp, hw, c, figs)


def new_figures(inp: JobInput) -> KeyFigures:
    """Empty figures for the job's model (which of its blocks are MoE)."""
    flags = inp.model.moe_layer_flags if inp.model.moe is not None else ()
    return KeyFigures({}, {}, {}, moe_flags=flags, mtp_layers=inp.model.mtp_layers)


def add_expert_figures(inp: JobInput, hw: HardwareView, c: Candidates, figs: KeyFigures) -> None:
    """A mixture of experts' routed part (job/experts.py) for every
    (rows, cols, mbs, cp, dp, pp, ep, etp) of `c` not yet in `figs`, and
    the expert-data axis of every (rows, cols, dp, pp, cp, ep, etp)."""
    if inp.model.moe is None:
        return
    gpu_nodes = hw.cluster.chips_per_node is not None
    host = per_expert_kernels(inp.constraints.trainer, gpu_nodes)
    host_launch_s = hw.host_launch_s if host else 0.0
    for key in dict.fromkeys(c.expert_keys()):
        if key in figs.experts:
            continue
        rows, cols, mbs, cp, dp, pp, ep, etp = key
        axes = hw.expert_axes(MeshShape(rows, cols), dp, pp, cp, ep, etp)
        assert not isinstance(axes, str)  # enumeration kept only those that lay out
        tensor, expert, _ = axes
        figs.experts[key] = expert_figures(
            inp.model, inp.training, hw, expert, rows * cols, mbs, cp, tensor, host_launch_s
        )
        figs.expert_data_axes[(rows, cols, dp, pp, cp, ep, etp)] = axes[2]


def _fc_feasible(
    c: Candidates, table: FcTable, refusals: Refusals, errors: list[InputError]
) -> np.ndarray:
    """Mask of candidates whose mesh can run the block at their micro-batch;
    the others' reasons are recorded (per mesh and micro-batch)."""
    keys = c.figure_keys()
    entries = table.entries(list(dict.fromkeys(keys)))
    ok = {}
    for (rows, cols, mbs, cp), entry in entries.items():
        ok[(rows, cols, mbs, cp)] = isinstance(entry, FcBlock)
        if not isinstance(entry, FcBlock):
            where = f"{rows}x{cols} at micro-batch {mbs}" + (f", context {cp}" if cp > 1 else "")
            refusals.add("tensor_mesh", where, entry)
    for err in table.errors:
        if err not in errors:
            errors.append(err)
    return np.array([ok[k] for k in keys], dtype=bool)


def _evaluated(config: dict[str, int | str], p: Priced, j: int, order: int) -> Evaluated:
    """Row `j` of `p` for the candidate `config`."""
    return Evaluated(
        order=order,
        config=config,
        step_s=float(p.step_s[j]),
        peak_bytes=float(p.peak_bytes[j]),
        fits=bool(p.fits[j]),
        parts={k: float(p.parts[k][j]) for k in PARTS},
    )


def _sorted(items: list[Evaluated]) -> list[Evaluated]:
    """Ascending step; within the tie tolerance the canonical order wins."""
    result: list[Evaluated] = []
    group: list[Evaluated] = []
    for e in sorted(items, key=lambda x: (x.step_s, x.order)):
        if group and e.step_s > group[0].step_s * (1 + TIE_RELATIVE):
            result += sorted(group, key=lambda x: x.order)
            group = []
        group.append(e)
    return result + sorted(group, key=lambda x: x.order)


def _balance_figures(
    inp: JobInput, hw: HardwareView, c: Candidates, figs: KeyFigures, i: int
) -> BalanceFigures:
    """One candidate's figures for the balancer (balance_adapter.py)."""
    one = c.take(np.array([i]))
    gathered = gather_figures(one, figs)
    a = {k: float(x[0]) for k, x in gathered.items() if x.ndim == 1}
    rec, act, x_act, xd_act = (
        tuple(float(x) for x in gathered[k][0]) for k in ("rec", "act", "x_act", "xd_act")
    )
    t = inp.training
    e = t.dtype.num_bytes
    g = 4 if t.fp32_gradients else e
    per_param = float(state_bytes_per_param(one, e, g)[0])
    # an FP8 recipe's weight copies (blocks only; job/model.py)
    fp8_copies = 0.0
    if t.fp8 is not Fp8Recipe.NONE:
        divided = float(one.replicas[0]) if int(one.zero[0]) >= 3 else 1.0
        fp8_copies = fp8_weight_copy_bytes_per_param(t.fp8.value) / divided
    zero = int(one.zero[0])
    forward_s, backward_s = (float(x) for x in block_seconds(a))
    m = t.global_batch_sequences // (int(one.dp[0]) * int(one.mbs[0]))
    # the MoE block's seconds as the step prices them (all-to-alls hidden)
    routed = hide_expert_comm(t, a, forward_s, backward_s, int(one.pp[0]), int(one.v[0]), m)
    a["x_f"], a["x_b"] = float(routed["x_f"]), float(routed["x_b"])
    constant = a["fc_buf"] + a["cp_buf"] + (2 * a["params"] * e if zero == 3 else 0.0)
    experts: dict = {}
    tail_f, tail_b, tail_state = a["tail_f"], a["tail_b"], a["tail_p"] * per_param + a["tail_x"]
    if figs.moe_flags:
        # the routed experts' state is sharded over their expert-data group
        # (job/model.py); the dispatched-token buffers on every stage
        d_x = float(one.expert_replicas[0])
        per_expert_param = float(state_bytes_per_param(one, e, g, experts=True)[0])
        fp8_x = fp8_copies * float(one.replicas[0]) / d_x if zero >= 3 else fp8_copies
        moe_state = a["x_router"] * per_param + a["x_params"] * (per_expert_param + fp8_x)
        experts = {
            "moe_flags": figs.moe_flags,
            "moe_forward_s": a["x_f"],
            "moe_backward_s": a["x_b"],
            "moe_activation_bytes": x_act,
            "moe_state_bytes": moe_state,
            "dense_forward_s": a["xd_f"],
            "dense_backward_s": a["xd_b"],
            "dense_activation_bytes": xd_act,
            "dense_state_bytes": a["xd_params"] * (per_param + fp8_copies),
        }
        constant += a["x_buf"]
        # multi-token-prediction blocks run after the last block (job/model.py):
        # with the tail, their activations held as its state
        mtp = figs.mtp_layers
        tail_f += mtp * (forward_s + a["x_f"])
        tail_b += mtp * (backward_s + a["x_b"])
        tail_state += mtp * (a["params"] * (per_param + fp8_copies) + moe_state + act[0] + x_act[0])
    return BalanceFigures(
        num_layers=inp.model.num_layers,
        pp=int(one.pp[0]),
        v=int(one.v[0]),
        m=m,
        forward_s=forward_s,
        backward_s=backward_s,
        recompute_s=rec,  # type: ignore[arg-type]
        activation_bytes=act,  # type: ignore[arg-type]
        layer_state_bytes=a["params"] * (per_param + fp8_copies),
        head_forward_s=a["head_f"],
        head_backward_s=a["head_b"],
        head_state_bytes=a["head_p"] * per_param,
        tail_forward_s=tail_f,
        tail_backward_s=tail_b,
        tail_state_bytes=tail_state,
        constant_bytes=constant,
        full_transient_bytes=act[0],
        usable_bytes=hw.usable_bytes,
        **experts,
    )


def _balancer_modes(
    c: Candidates,
    rows: list[int],
    priced: dict[int, tuple[Priced, int]],
    fixed: bool,
    mix: bool,
) -> tuple[str, ...]:
    """Recomputation modes the balancer gets for a configuration whose
    candidates (one per mode left) are `rows`: a pinned mode alone;
    otherwise the fastest mode whose even split fits (with `mix`, also the
    next faster one, which does not fit everywhere, so mixing per stage is
    what can pay); when none fits, the lightest (with `mix`, every one).
    One mode keeps the balancer's MILP small enough to prove in about a
    second; only the winner gets two (step 6)."""
    if fixed:
        return (RECOMPUTE_MODES[int(c.recompute[rows[0]])],)

    def step_of(r: int) -> float:
        p, j = priced[r]
        return float(p.step_s[j])

    def fits(r: int) -> bool:
        p, j = priced[r]
        return bool(p.fits[j])

    by_time = sorted(rows, key=lambda r: (step_of(r), int(c.recompute[r])))
    fitting = [r for r in by_time if fits(r)]
    if not fitting:
        lightest = max(rows, key=lambda r: int(c.recompute[r]))
        chosen = by_time if mix else [lightest]
    else:
        f = by_time.index(fitting[0])
        chosen = by_time[max(f - 1, 0) : f + 1] if mix else [fitting[0]]
    codes = sorted({int(c.recompute[r]) for r in chosen})
    return tuple(RECOMPUTE_MODES[k] for k in codes)


def _balanced_evaluation(
    inp: JobInput,
    hw: HardwareView,
    c: Candidates,
    figs: KeyFigures,
    pick: int,
    order: int,
    modes: tuple[str, ...],
    time_limit_s: float,
) -> tuple[Balanced, Evaluated | None]:
    """Balance candidate `pick` with `modes`; its step-model evaluation when
    the balancer's plan fits and does not depend on the machine's speed
    (proved, or found by its move-bounded heuristics)."""
    f = _balance_figures(inp, hw, c, figs, pick)
    outcome = balance_candidate(f, modes, time_limit_s)
    if not outcome.usable:
        return outcome, None
    one = c.take(np.array([pick]))
    model = inp.model
    p = price(
        one,
        figs,
        hw,
        inp.training,
        model.num_layers,
        model.hidden_size,
        assignments=[outcome.counts],
    )
    e = _evaluated(one.row(0), p, 0, order)
    return outcome, replace(e, counts=outcome.counts, balanced=outcome)


def _mix_winner(
    inp: JobInput,
    hw: HardwareView,
    c: Candidates,
    figs: KeyFigures,
    ranked: list[Evaluated],
    lim: Constraints,
    keys: dict[tuple, list[int]],
    priced: dict[int, tuple[Priced, int]],
) -> tuple[list[Evaluated], bool]:
    """Step 6: let the balancer mix the balanced winner's mode with the next
    faster one per stage; a proved, faster plan that fits replaces it.
    Returns the ranking and whether a solve ran."""
    if not stage_mixes(lim.trainer):
        return ranked, False
    top = ranked[0]
    rows = keys[_config_key_of(top.config, True)]
    modes = _balancer_modes(c, rows, priced, False, mix=True)
    if len(modes) < 2:
        return ranked, False
    pick = next(i for i in rows if RECOMPUTE_MODES[int(c.recompute[i])] in modes)
    _, mixed = _balanced_evaluation(inp, hw, c, figs, pick, top.order, modes, lim.ilp_time_limit_s)
    if mixed is None or not mixed.fits or mixed.step_s >= top.step_s:
        return ranked, True
    mixed = replace(mixed, even_split_step_s=top.even_split_step_s)
    return _sorted([mixed, *ranked[1:]]), True


def _config_key_of(config: dict[str, int | str], recompute_searched: bool) -> tuple[int, ...]:
    row = [int(config[k]) for k in _KEY_COLUMNS]
    rc = RECOMPUTE_MODES.index(str(config["recompute"]))
    return (*row, -1 if recompute_searched else rc)


_KEY_COLUMNS = ("rows", "cols", "pp", "dp", "mbs", "v", "zero", "cp", "ep", "etp")


def _config_key(c: Candidates, i: int, recompute_searched: bool) -> tuple[int, ...]:
    """Candidates of one key share one balancer problem: with recomputation
    searched the balancer may choose it, so it is not part of the key."""
    return _config_keys(c, np.array([i]), recompute_searched)[0]


def _config_keys(
    c: Candidates, index: np.ndarray, recompute_searched: bool
) -> list[tuple[int, ...]]:
    """:func:`_config_key` of the candidates at `index`, column by column."""
    columns = [getattr(c, k)[index].tolist() for k in _KEY_COLUMNS]
    modes = [-1] * len(index) if recompute_searched else c.recompute[index].tolist()
    return list(zip(*columns, modes, strict=True))


def bound_figures(inp: JobInput, hw: HardwareView, c: Candidates, figs: KeyFigures) -> KeyFigures:
    """Figures at or below the step model's for every candidate, without
    pricing any FC layer: the FC lower bound of block.fc_lower_bounds, the
    ends without their vocabulary collectives, everything else exact."""
    t, model = inp.training, inp.model
    out = figs.like()
    # one FC bound per mesh and token count (context degrees share them)
    per_mesh: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for rows, cols, mbs, cp in dict.fromkeys(c.figure_keys()):
        per_mesh.setdefault((rows, cols), []).append((mbs, cp))
    for (rows, cols), keys in per_mesh.items():
        counts = sorted({mbs * (t.sequence_length // cp) for mbs, cp in keys})
        blocks = dict(zip(counts, fc_lower_bounds(model, t, hw, rows, cols, counts), strict=True))
        for mbs, cp in keys:
            context = context_axis(hw, rows, cols, cp)
            fc = blocks[mbs * (t.sequence_length // cp)]
            key = (rows, cols, mbs, cp)
            out.blocks[key] = block_figures(model, t, hw, fc, rows * cols, mbs, context)
            out.ends[key] = end_figures(model, t, hw, None, rows, cols, mbs, cp)
    add_layouts(c, hw, out.layouts)
    add_expert_figures(inp, hw, c, out)
    return out


def search(
    inp: JobInput,
    hw: HardwareView,
    policy: DataflowPolicy | None = None,
    *,
    constraints: Constraints | None = None,
    balance_layers: bool | None = None,
    table: FcTable | None = None,
    max_extra_solves: int | None = None,
    keep: int | None = None,
    below_s: float = np.inf,
) -> SearchOutcome:
    """Run steps 1-6 of the module docstring. `balance_layers` (default:
    the training's `layer_split`) turns the pipeline ILP on or off;
    `table` reuses another search's FC prices; `keep` (default `top_n + 1`)
    is how many of the best configurations step 4 prices exactly, and
    `below_s` skips every configuration no faster than it (the free search
    behind a pinned plan's hint looks only for one that beats it)."""
    t0 = time.perf_counter()
    lim = constraints or inp.constraints
    t = inp.training
    policy = policy or inp.search.dataflow
    if balance_layers is None:
        balance_layers = t.balances_layers
    keep = keep or lim.top_n + 1
    refusals = Refusals()
    everything = enumerate_candidates(inp, hw, refusals, lim)
    searched_rc = t.pinned("recompute") is None
    per_stage = hw.workspace_bytes + hw.reserve_bytes
    mem_bound = memory_lower_bound(inp, everything, per_stage, searched_rc)
    kept = mem_bound <= hw.hbm_bytes
    c = everything.take(np.flatnonzero(kept))
    order = np.flatnonzero(kept)
    table = table or FcTable(inp, hw, policy)
    figs = new_figures(inp)
    n = len(c)
    model = inp.model
    cheap = bound_figures(inp, hw, c, figs)

    # lower bounds from the cheap figures: of the even split (step 4) and of
    # any layer split and recomputation mix (step 5)
    arrays = gather_figures(c, cheap) if n else {}
    p2p = pipeline_send_s(c, cheap, hw, t, model.hidden_size) if n else np.zeros(0)
    bound = np.zeros(0)
    if n:
        bound = step_lower_bound(
            inp,
            c,
            arrays,
            p2p,
            hw.hbm_bytes_per_s,
            lambda params: data_parallel_floor_s(c, cheap.layouts, hw, t, params),
        )
    even_bound = np.zeros(n)
    if n:
        even_bound = price(c, cheap, hw, t, model.num_layers, model.hidden_size, exact=False).step_s
    usable = np.ones(n, dtype=bool)  # False once the FC planner refuses the mesh
    fc_known = np.zeros(n, dtype=bool)
    priced_mask = np.zeros(n, dtype=bool)
    step = np.full(n, np.inf)
    fits = np.zeros(n, dtype=bool)
    priced_rows: dict[int, tuple[Priced, int]] = {}

    def ensure_fc(rows: np.ndarray) -> np.ndarray:
        """Price the FC layers of `rows`' keys; the rows the planner can run."""
        todo = rows[~fc_known[rows]]
        if todo.size:
            sub = c.take(todo)
            ok = _fc_feasible(sub, table, refusals, [])
            usable[todo[~ok]] = False
            fc_known[todo] = True
            key_figures(inp, hw, table, sub.take(np.flatnonzero(ok)), figs)
        return rows[usable[rows]]

    def run(rows: np.ndarray, limit: float = np.inf) -> None:
        """Price `rows` exactly; with a finite `limit`, only those whose
        even-split bound on their planned FC layers is not above it (the
        limit only falls, so the others are never needed)."""
        rows = ensure_fc(rows)
        rows = rows[~priced_mask[rows]]
        if rows.size and np.isfinite(limit):
            sub = c.take(rows)
            low = price(sub, figs, hw, t, model.num_layers, model.hidden_size, exact=False)
            rows = rows[low.step_s <= limit]
        if not rows.size:
            return
        sub = c.take(rows)
        p = price(sub, figs, hw, t, model.num_layers, model.hidden_size)
        step[rows] = p.step_s
        fits[rows] = p.fits
        priced_mask[rows] = True
        for j, i in enumerate(rows.tolist()):
            priced_rows[i] = (p, j)

    def threshold() -> float:
        good = np.sort(step[fits])
        limit = float(good[keep - 1]) * (1 + TIE_RELATIVE) if good.size >= keep else np.inf
        return min(limit, below_s)

    # step 4: exact prices in order of the even split's bound, until the
    # next bound is above the keep-th best step that fits
    ranked_rows = np.argsort(even_bound, kind="stable")
    pos, size = 0, BATCH
    while pos < ranked_rows.size:
        limit = threshold()
        if even_bound[ranked_rows[pos]] > limit:
            break
        batch = ranked_rows[pos : pos + size]
        run(batch[even_bound[batch] <= limit], limit)
        pos += size
        size *= 2

    evaluated: dict[int, Evaluated] = {}
    for i, (p, j) in priced_rows.items():
        evaluated[i] = _evaluated(c.row(i), p, j, int(order[i]))

    # step 5: balance pipelined configurations
    num_balanced = unproved = 0
    proved = True
    keys: dict[tuple, list[int]] = {}
    if balance_layers and np.any(c.pp > 1):
        pipelined = np.flatnonzero((c.pp > 1) & usable & (bound < below_s))
        for i, key in zip(pipelined.tolist(), _config_keys(c, pipelined, searched_rc), strict=True):
            keys.setdefault(key, []).append(i)
        key_bound = {k: min(float(bound[i]) for i in rows) for k, rows in keys.items()}
        solved: set[tuple] = set()
        tight = np.zeros(n, dtype=bool)  # bound recomputed on the planned FC layers

        def tighten(rows: np.ndarray) -> None:
            """Recompute the step bound of `rows` on their planned FC
            layers (at or above the cheap figures, so still a bound)."""
            rows = ensure_fc(rows[~tight[rows]])
            tight[rows] = True
            if rows.size:
                sub = c.take(rows)
                arrays = gather_figures(sub, figs)
                send = pipeline_send_s(sub, figs, hw, t, model.hidden_size)
                exact = step_lower_bound(
                    inp,
                    sub,
                    arrays,
                    send,
                    hw.hbm_bytes_per_s,
                    lambda params: data_parallel_floor_s(sub, figs.layouts, hw, t, params),
                )
                bound[rows] = np.maximum(bound[rows], exact)

        def key_tight(key: tuple) -> float:
            """The key's bound on planned FC layers (inf: none can run)."""
            rows = np.asarray(keys[key], dtype=np.int64)
            tighten(rows)
            rows = rows[usable[rows]]
            return float(bound[rows].min()) if rows.size else np.inf

        def best() -> float:
            good = [e.step_s for e in evaluated.values() if e.fits]
            return min(good, default=np.inf)

        def balance_key(key: tuple) -> None:
            nonlocal num_balanced, unproved
            missing = np.array([i for i in keys[key] if not priced_mask[i]], dtype=np.int64)
            run(missing)
            for i in missing.tolist():
                if i in priced_rows:
                    p, j = priced_rows[i]
                    evaluated[i] = _evaluated(c.row(i), p, j, int(order[i]))
            rows = [i for i in keys[key] if priced_mask[i]]
            if not rows:
                return  # the FC planner cannot run this mesh at this micro-batch
            modes = _balancer_modes(c, rows, priced_rows, not searched_rc, mix=False)
            pick = next(i for i in rows if RECOMPUTE_MODES[int(c.recompute[i])] in modes)
            outcome, e = _balanced_evaluation(
                inp, hw, c, figs, pick, int(order[pick]), modes, lim.ilp_time_limit_s
            )
            solved.add(key)
            num_balanced += 1
            if not outcome.proved:
                unproved += 1
            fitting = [evaluated[i].step_s for i in rows if i in evaluated and evaluated[i].fits]
            even = min(fitting, default=None)
            if e is None or not e.fits or (even is not None and e.step_s >= even):
                return
            for i in rows:
                evaluated.pop(i, None)
            evaluated[-1 - pick] = replace(e, even_split_step_s=even)

        by_step = sorted(
            (e.step_s, e.order, _config_key(c, i, searched_rc))
            for i, e in evaluated.items()
            if i >= 0 and e.fits and int(c.pp[i]) > 1
        )
        finalists = 0
        for _, _, key in by_step:
            if finalists >= lim.finalists:
                break
            if key in solved:
                continue
            finalists += 1
            if key_bound[key] < best() and key_tight(key) < best():
                balance_key(key)
        budget = lim.finalists if max_extra_solves is None else max_extra_solves
        for kb, key in sorted((b, k) for k, b in key_bound.items()):
            if key in solved:
                continue
            if kb >= best():
                break
            if key_tight(key) >= best():
                continue
            if budget <= 0:
                proved = False
                break
            budget -= 1
            balance_key(key)

    ranked = _sorted([e for e in evaluated.values() if e.fits])
    if ranked and balance_layers and searched_rc and ranked[0].counts is not None:
        ranked, ran = _mix_winner(inp, hw, c, figs, ranked, lim, keys, priced_rows)
        num_balanced += int(ran)
    best_step = ranked[0].step_s if ranked else np.inf
    excluded = _sorted([e for e in evaluated.values() if not e.fits and e.step_s < best_step])
    return SearchOutcome(
        ranked=ranked,
        memory_excluded=excluded[:5],
        num_candidates=len(everything),
        num_pruned_by_memory_bound=int((~kept).sum()),
        num_refused_by_fc=int((fc_known & ~usable).sum()),
        num_priced=int(priced_mask.sum()),
        num_pruned_by_step_bound=int((usable & ~priced_mask).sum()),
        num_fit=int(fits.sum()),
        num_balanced=num_balanced,
        num_balancer_unproved=unproved,
        proved=proved,
        refusals=refusals,
        elapsed_s=time.perf_counter() - t0,
        figures=figs,
        table=table,
        candidates=c,
        enumerated=everything,
        memory_bound=mem_bound,
    )


def priced_candidates(
    inp: JobInput, hw: HardwareView, constraints: Constraints | None = None
) -> tuple[Candidates, KeyFigures, FcTable]:
    """Every configuration the FC planner can run (no memory bound), with
    the figures the step model reads; for tests and references."""
    c = enumerate_candidates(inp, hw, Refusals(), constraints or inp.constraints)
    table = FcTable(inp, hw, inp.search.dataflow)
    c = c.take(np.flatnonzero(_fc_feasible(c, table, Refusals(), [])))
    figs = new_figures(inp)
    key_figures(inp, hw, table, c, figs)
    return c, figs, table


def exhaustive(
    inp: JobInput, hw: HardwareView, constraints: Constraints | None = None
) -> list[Evaluated]:
    """Reference for tests: every candidate priced exactly (no memory bound,
    no step bound), every pipelined configuration balanced, the winner's
    recomputation mixed, ranked by the same rule (fitting ones only)."""
    lim = constraints or inp.constraints
    t = inp.training
    searched_rc = t.pinned("recompute") is None
    balance_layers = t.balances_layers
    c, figs, _ = priced_candidates(inp, hw, lim)
    model = inp.model
    p = price(c, figs, hw, t, model.num_layers, model.hidden_size)
    priced = {i: (p, i) for i in range(len(c))}
    evaluated = {i: _evaluated(c.row(i), p, i, i) for i in range(len(c))}
    keys: dict[tuple, list[int]] = {}
    pipelined = np.flatnonzero(c.pp > 1)
    for i, key in zip(pipelined.tolist(), _config_keys(c, pipelined, searched_rc), strict=True):
        keys.setdefault(key, []).append(i)
    if balance_layers:
        for rows in keys.values():
            modes = _balancer_modes(c, rows, priced, not searched_rc, mix=False)
            pick = next(i for i in rows if RECOMPUTE_MODES[int(c.recompute[i])] in modes)
            _, e = _balanced_evaluation(inp, hw, c, figs, pick, pick, modes, lim.ilp_time_limit_s)
            fitting = [evaluated[i].step_s for i in rows if evaluated[i].fits]
            even = min(fitting, default=None)
            if e is None or not e.fits or (even is not None and e.step_s >= even):
                continue
            for i in rows:
                evaluated.pop(i, None)
            evaluated[-1 - pick] = replace(e, even_split_step_s=even)
    ranked = _sorted([e for e in evaluated.values() if e.fits])
    if ranked and balance_layers and searched_rc and ranked[0].counts is not None:
        ranked, _ = _mix_winner(inp, hw, c, figs, ranked, lim, keys, priced)
    return ranked
