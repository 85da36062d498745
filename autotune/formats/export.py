"""`meshtune export`: one plan in, what a trainer reads out.

Every writer returns an :class:`Export`: its files and two lists of one-line
notes, written into each file's header and printed by the CLI:

- *assumed*: what the plan does not decide and the writer had to settle;
- *not expressed*: each planned choice the target has no key for, never
  dropped silently.

A plan a target cannot run at all (a 2D mesh for a 1D-only trainer) is an
InputError (exit 2) whose fix names a target that can.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from autotune import __version__
from autotune.errors import InputError
from autotune.formats.plan_view import PlanView, read_plan_view
from autotune.io import atomic_write_text
from autotune.plan.schema import PLAN_SCHEMA

# target -> "module:function(PlanView) -> Export"
TARGETS: dict[str, str] = {
    "jax": "autotune.formats.jax_export:export_jax",
    "maxtext": "autotune.formats.maxtext:export_maxtext",
    "megatron": "autotune.formats.megatron:export_megatron",
    "torchtitan": "autotune.formats.torchtitan:export_torchtitan",
    "mindformers": "autotune.formats.mindformers:export_mindformers",
}


@dataclass(frozen=True)
class ExportFile:
    """One file a writer produces (name relative to the output folder)."""

    name: str
    text: str


@dataclass(frozen=True)
class Export:
    """A writer's output and what it had to assume or could not express."""

    target: str
    files: tuple[ExportFile, ...]
    assumed: tuple[str, ...]
    not_expressed: tuple[str, ...]


@dataclass
class Notes:
    """Collects a writer's one-line notes while it maps the plan."""

    assumed: list[str] = field(default_factory=list)
    not_expressed: list[str] = field(default_factory=list)

    def assume(self, line: str) -> None:
        """Record something the plan does not decide."""
        self.assumed.append(line)

    def drop(self, line: str) -> None:
        """Record a planned choice the target cannot express."""
        self.not_expressed.append(line)


def note_sliding_window(view: PlanView, notes: Notes, trainer: str) -> None:
    """The not-expressed line of a writer whose trainer file cannot window
    the attention as the plan priced it (its blocks attend to the whole
    prefix there)."""
    m = view.model
    if m.sliding_window is None:
        return
    n = m.full_attention_every
    if n is None:
        which = "every block"
    else:
        suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
        which = f"all but every {n}{suffix} block"
    notes.drop(
        f"sliding_window {m.sliding_window} on {which}: the {trainer} file attends to the "
        "whole prefix in every block (slower than planned)"
    )


def header_lines(view: PlanView, target: str, keys_from: str, notes: Notes) -> list[str]:
    """The comment lines every exported file starts with (without markers)."""
    t = view.training
    # context parallelism named only where the plan uses it (CP 1 headers unchanged)
    context = (
        f"context parallel {view.context_parallel} ({view.context_comm}), "
        if view.context_parallel > 1
        else ""
    )
    lines = [
        f"meshtune export --to {target}, from {view.source_name} "
        f"({PLAN_SCHEMA}, meshtune {__version__})",
        f"{view.model.name}: {view.num_rows} x {view.num_cols} tensor-parallel mesh, {context}"
        f"data parallel {t.data_parallel}, pipeline parallel {t.pipeline_parallel}, "
        f"{view.micro_batches} micro-batch(es) of {view.micro_batch_sequences} sequence(s), "
        f"{view.total_chips} chips",
        f"interleave {view.interleave}, recompute {view.recompute}, ZeRO stage "
        f"{view.zero_stage}, FC layers {t.fc_algorithm.value}",
        f"key names: {keys_from}",
    ]
    lines += [f"assumed: {line}" for line in notes.assumed]
    lines += [f"not expressed: {line}" for line in notes.not_expressed]
    return lines


def commented(lines: list[str], marker: str = "#") -> str:
    """Lines as comments, one per line, with a trailing newline."""
    return "".join(f"{marker} {line}\n" for line in lines)


def finish(target: str, files: list[ExportFile], notes: Notes) -> Export:
    """Freeze a writer's result."""
    return Export(target, tuple(files), tuple(notes.assumed), tuple(notes.not_expressed))


def expert_comm_notes(
    view: PlanView, trainer: str, notes: Notes, *, dispatcher: bool = True
) -> None:
    """Not-expressed lines for a trainer without a deduplicating dispatcher
    (`dispatcher`) or without the expert all-to-all overlap the plan priced:
    its all-to-alls then run slower than the plan's step says."""
    t = view.training
    if t.expert_dispatcher.value == "allgather":
        notes.drop(
            f"expert_dispatcher allgather: {trainer} dispatches tokens by all-to-all, not by "
            "gathering the expert group's tokens; its communication differs from the plan's"
        )
    if dispatcher and t.expert_dispatcher.deduplicates:
        notes.drop(
            f"expert_dispatcher {t.expert_dispatcher.value}: {trainer} has no deduplicating "
            "dispatcher; every token copy crosses the network, slower than the plan priced"
        )
    if t.overlap_expert_comm:
        notes.drop(
            f"overlap_expert_comm: {trainer} has no schedule that merges one micro-batch's "
            "forward with another's backward to hide the expert all-to-alls; they run "
            "exposed, slower than the plan priced"
        )


def shared_expert_count(view: PlanView, trainer: str, notes: Notes) -> int:
    """The model's shared experts as a count of routed-width experts (what
    MaxText and MindFormers take): `F_s / F_e`, at least 1; a width that is
    not a multiple is a not-expressed line."""
    moe = view.model.moe
    assert moe is not None and moe.shared_expert_ffn_size
    count, rest = divmod(moe.shared_expert_ffn_size, moe.expert_ffn_size)
    if rest:
        notes.drop(
            f"shared experts of width {moe.shared_expert_ffn_size}: {trainer} counts shared "
            f"experts of the routed width {moe.expert_ffn_size}"
        )
    return max(count, 1)


def needs_1d(view: PlanView, target: str, trainer: str) -> None:
    """Refuse a 2D plan for a trainer whose tensor parallelism is 1D."""
    if not view.is_1d:
        raise InputError(
            f"is a 2D mesh ({view.num_rows} x {view.num_cols}); {trainer} runs 1D tensor "
            f"parallelism only, so the {target} export cannot express this plan",
            file=view.file,
            field="mesh",
            fix="export --to jax (or maxtext), or plan again with `tensor_mesh: 1d` (or "
            "`fc_algorithm: megatron-1d`) in the plan file's training section",
        )


def export_plan(plan_file: str, target: str) -> Export:
    """Read `plan_file` and run the `target` writer."""
    if target not in TARGETS:
        raise InputError(
            "is not an export target", field="--to", value=target, fix=f"use {', '.join(TARGETS)}"
        )
    view = read_plan_view(plan_file)
    module_name, attr = TARGETS[target].split(":")
    return getattr(importlib.import_module(module_name), attr)(view)


def write_export(result: Export, out_dir: str) -> list[Path]:
    """Write every file into `out_dir` (created if missing), each atomically."""
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise InputError(
            "is a file, not a folder", field="--out", value=out_dir, fix="name a folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for f in result.files:
        atomic_write_text(folder / f.name, f.text)
        written.append(folder / f.name)
    return written
