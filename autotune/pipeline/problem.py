"""The balancer's problem, in base units (seconds, bytes), and how it is solved.

Everything the MILP, the local search, the simulator and brute force read is
here: the body layers in model order (runs of identical layers, each with its
forward and backward seconds per micro-batch, parameter bytes and activation
bytes per recomputation option), the recomputation options (backward time
factor), the head and tail extras, the memory cap and the schedule shape.
The input files (yaml_format.py, seed_format.py) are readers that build a
`Problem`; a program can build one directly (`Problem.from_layers`).

This module imports nothing else from the package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

# The recomputation options meshtune knows, in the order the seed framework's
# lists are derived from them (see seed_config in result.py).
RECOMPUTE_OPTIONS = ("none", "selective", "comm", "selective_comm", "full")


class ProblemError(ValueError):
    """A problem that cannot be balanced as given (names the field)."""


class Schedule(str, Enum):
    """Pipeline schedule."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"


class SolverChoice(str, Enum):
    """MILP solver: HiGHS (through highspy) when installed, else CBC."""

    AUTO = "auto"
    HIGHS = "highs"
    CBC = "cbc"


def _check_number(name: str, value: float, *, positive: bool = False) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ProblemError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ProblemError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")


@dataclass(frozen=True)
class RecomputeOption:
    """A recomputation option: backward seconds of a layer that uses it are
    `backward_s * (1 + backward_time_coef)` (it re-runs part of the forward)."""

    name: str
    backward_time_coef: float

    def __post_init__(self) -> None:
        _check_number(f"option {self.name!r} backward_time_coef", self.backward_time_coef)


@dataclass(frozen=True)
class LayerGroup:
    """`count` identical consecutive body layers.

    `forward_s`, `backward_s`: seconds per micro-batch of one layer (backward
    without recomputation); `parameter_bytes`: parameters, gradients and
    optimizer state of one layer; `activation_bytes[o]`: bytes one layer keeps
    per micro-batch in flight under option index `o`, or None when this kind
    may not use that option.
    """

    kind: str
    count: int
    forward_s: float
    backward_s: float
    parameter_bytes: float
    activation_bytes: tuple[float | None, ...]

    def __post_init__(self) -> None:
        where = f"layer kind {self.kind!r}"
        if not isinstance(self.count, int) or self.count <= 0:
            raise ProblemError(f"{where} count must be a positive integer, got {self.count!r}")
        _check_number(f"{where} forward_s", self.forward_s, positive=True)
        _check_number(f"{where} backward_s", self.backward_s)
        _check_number(f"{where} parameter_bytes", self.parameter_bytes)
        for o, act in enumerate(self.activation_bytes):
            if act is not None:
                _check_number(f"{where} activation_bytes[{o}]", act)
        if all(a is None for a in self.activation_bytes):
            raise ProblemError(f"{where} allows no recomputation option")


@dataclass(frozen=True)
class EndBlock:
    """Head (first chunk) or tail (last chunk): seconds per micro-batch and
    the extra bytes on its stage."""

    forward_s: float = 0.0
    backward_s: float = 0.0
    memory_bytes: float = 0.0

    def __post_init__(self) -> None:
        for name in ("forward_s", "backward_s", "memory_bytes"):
            _check_number(f"head/tail {name}", getattr(self, name))


@dataclass(frozen=True)
class Layer:
    """One body layer, for `Problem.from_layers`: `activation_bytes` maps
    each option name this layer may use to its bytes per micro-batch."""

    kind: str
    forward_s: float
    backward_s: float
    parameter_bytes: float
    activation_bytes: dict[str, float]


@dataclass(frozen=True)
class Problem:
    """Everything the balancer needs, in base units.

    Shape: `num_stages` (pp), `num_chunks` per stage (v), `num_micro_batches`
    (m), `schedule` (1F1B needs v = 1; interleaved needs m a multiple of pp),
    `min_layers_per_chunk`. Model: `groups` in model order, `options` (the
    index order of every `activation_bytes`), `head`, `tail`. Memory:
    `constant_bytes` on every stage besides its layers, `memory_cap_bytes`
    per stage.
    """

    num_stages: int
    num_chunks: int
    num_micro_batches: int
    schedule: Schedule
    min_layers_per_chunk: int
    options: tuple[RecomputeOption, ...]
    groups: tuple[LayerGroup, ...]
    head: EndBlock
    tail: EndBlock
    constant_bytes: float
    memory_cap_bytes: float

    def __post_init__(self) -> None:
        for name in ("num_stages", "num_chunks", "num_micro_batches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ProblemError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.min_layers_per_chunk, int) or self.min_layers_per_chunk < 0:
            raise ProblemError(
                f"min_layers_per_chunk must be an integer >= 0, got {self.min_layers_per_chunk!r}"
            )
        schedule = Schedule(self.schedule)
        object.__setattr__(self, "schedule", schedule)
        if schedule is Schedule.ONE_F_ONE_B and self.num_chunks != 1:
            raise ProblemError(f"1f1b runs one chunk per stage, got num_chunks {self.num_chunks}")
        if schedule is Schedule.INTERLEAVED and self.num_micro_batches % self.num_stages:
            raise ProblemError(
                f"interleaved 1F1B needs num_micro_batches ({self.num_micro_batches}) to be a "
                f"multiple of num_stages ({self.num_stages})"
            )
        object.__setattr__(self, "options", tuple(self.options))
        object.__setattr__(self, "groups", tuple(self.groups))
        if not self.options:
            raise ProblemError("options lists no recomputation option")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ProblemError(f"options repeat a name: {names}")
        if not self.groups:
            raise ProblemError("groups lists no body layer")
        for g in self.groups:
            if len(g.activation_bytes) != len(self.options):
                raise ProblemError(
                    f"layer kind {g.kind!r} gives {len(g.activation_bytes)} activation sizes "
                    f"for {len(self.options)} options"
                )
        _check_number("constant_bytes", self.constant_bytes)
        _check_number("memory_cap_bytes", self.memory_cap_bytes, positive=True)
        if self.num_layers < self.num_virtual * self.min_layers_per_chunk:
            raise ProblemError(
                f"{self.num_layers} body layers cannot give {self.num_virtual} chunks at least "
                f"{self.min_layers_per_chunk} layer(s) each"
            )

    @classmethod
    def from_layers(
        cls,
        layers: Sequence[Layer],
        *,
        options: dict[str, float],
        num_stages: int,
        num_micro_batches: int,
        memory_cap_bytes: float,
        num_chunks: int = 1,
        schedule: Schedule | str | None = None,
        head: EndBlock | None = None,
        tail: EndBlock | None = None,
        constant_bytes: float = 0.0,
        min_layers_per_chunk: int = 1,
    ) -> Problem:
        """Build a problem from one entry per body layer in model order;
        consecutive equal layers become one group. `options` maps each
        recomputation option to its backward time coefficient (kept in
        RECOMPUTE_OPTIONS order for known names, then as given). The schedule
        defaults to 1F1B for one chunk and interleaved 1F1B otherwise."""
        names = [n for n in RECOMPUTE_OPTIONS if n in options]
        names += [n for n in options if n not in names]
        runs: list[tuple[Layer, int]] = []
        for layer in layers:
            for name in layer.activation_bytes:
                if name not in options:
                    raise ProblemError(
                        f"layer kind {layer.kind!r} uses option {name!r}, which is not in options"
                    )
            if runs and runs[-1][0] == layer:
                runs[-1] = (layer, runs[-1][1] + 1)
            else:
                runs.append((layer, 1))
        groups = []
        seen: dict[str, int] = {}
        for layer, count in runs:
            # Two runs of one kind with different figures get distinct names.
            seen[layer.kind] = seen.get(layer.kind, 0) + 1
            kind = layer.kind if seen[layer.kind] == 1 else f"{layer.kind}#{seen[layer.kind]}"
            groups.append(
                LayerGroup(
                    kind=kind,
                    count=count,
                    forward_s=layer.forward_s,
                    backward_s=layer.backward_s,
                    parameter_bytes=layer.parameter_bytes,
                    activation_bytes=tuple(layer.activation_bytes.get(n) for n in names),
                )
            )
        if schedule is None:
            schedule = Schedule.ONE_F_ONE_B if num_chunks == 1 else Schedule.INTERLEAVED
        return cls(
            num_stages=num_stages,
            num_chunks=num_chunks,
            num_micro_batches=num_micro_batches,
            schedule=Schedule(schedule),
            min_layers_per_chunk=min_layers_per_chunk,
            options=tuple(RecomputeOption(n, options[n]) for n in names),
            groups=tuple(groups),
            head=head or EndBlock(),
            tail=tail or EndBlock(),
            constant_bytes=constant_bytes,
            memory_cap_bytes=memory_cap_bytes,
        )

    @property
    def num_virtual(self) -> int:
        """Chunks over the whole pipeline (pp * v), in model order."""
        return self.num_stages * self.num_chunks

    @property
    def num_layers(self) -> int:
        """Body layers over all kinds."""
        return sum(g.count for g in self.groups)

    def stage_of(self, chunk: int) -> int:
        """Stage holding model chunk `chunk` (chunk c lives on stage c mod pp)."""
        return chunk % self.num_stages

    def option_index(self, name: str) -> int:
        """Index of a recomputation option by name."""
        return [o.name for o in self.options].index(name)


# Kick-repair-climb rounds after the layer moves (perturb.py).
DEFAULT_SEARCH_ROUNDS = 400


@dataclass(frozen=True)
class SolverSettings:
    """How the balancer searches (not part of the problem): solver, wall-time
    limit of the whole search, the relative gap at which it stops, how many
    kick-repair-climb rounds follow the layer moves (perturb.py; 0 skips
    them, for callers that balance many candidates); `verbose` sends the
    solver's log to stderr. (The solvers always run on one thread with a
    fixed seed, so the same problem gives the same plan.) `deadline_s`, when
    given, is the time.perf_counter() time by which the search must end
    even when the time limit would run later (a command whose limit counts
    from its own start); the time limit alone still sets the work budget,
    so the plan does not depend on when the call began."""

    solver: SolverChoice = SolverChoice.AUTO
    time_limit_s: float = 60.0
    relative_gap: float = 1e-3
    verbose: bool = False
    search_rounds: int = DEFAULT_SEARCH_ROUNDS
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "solver", SolverChoice(self.solver))
        _check_number("time_limit_s", self.time_limit_s, positive=True)
        if self.deadline_s is not None:
            _check_number("deadline_s", self.deadline_s)
        _check_number("relative_gap", self.relative_gap)
        if self.relative_gap >= 1:
            raise ProblemError(f"relative_gap must be < 1, got {self.relative_gap!r}")
        if isinstance(self.search_rounds, bool) or not isinstance(self.search_rounds, int):
            raise ProblemError(f"search_rounds must be an integer, got {self.search_rounds!r}")
        if not 0 <= self.search_rounds <= 1000:
            raise ProblemError(f"search_rounds must be 0 to 1000, got {self.search_rounds!r}")


@dataclass(frozen=True)
class ShapeOverrides:
    """Values given on the command line that replace the file's (None = keep):
    the seed tool took the run's shape as flags (-s, -i, -mb, -mem, -t)."""

    num_stages: int | None = None
    num_chunks: int | None = None
    num_micro_batches: int | None = None
    memory_cap_bytes: float | None = None
    time_limit_s: float | None = None

    def apply(self, problem: Problem) -> Problem:
        """The problem with these values in place; a chunk count above 1
        selects interleaved 1F1B, a count of 1 plain 1F1B."""
        changes: dict = {}
        if self.num_stages is not None:
            changes["num_stages"] = self.num_stages
        if self.num_micro_batches is not None:
            changes["num_micro_batches"] = self.num_micro_batches
        if self.memory_cap_bytes is not None:
            changes["memory_cap_bytes"] = self.memory_cap_bytes
        if self.num_chunks is not None:
            changes["num_chunks"] = self.num_chunks
            changes["schedule"] = (
                Schedule.INTERLEAVED if self.num_chunks > 1 else Schedule.ONE_F_ONE_B
            )
        return replace(problem, **changes) if changes else problem

    def apply_settings(self, settings: SolverSettings) -> SolverSettings:
        """The settings with the time limit in place."""
        if self.time_limit_s is None:
            return settings
        return replace(settings, time_limit_s=self.time_limit_s)
