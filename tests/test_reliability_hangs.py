"""Hangs: regression tests for bounded work.

A model dimension of 2^62 or 10^30 made the slice-count search enumerate
divisors for minutes, and a 60,000-character model name made the terminal
report take minutes (rich's highlighter). Divisors now come from a
factorisation, and renderers shorten and escape user strings. The time
bounds below are generous hang detectors (each case ran for minutes), not
speed targets.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli
from hypothesis import given
from hypothesis import strategies as st

from autotune.render_text import MAX_USER_TEXT_CHARS, user_text
from cost_models import Dataflow, MeshShape, valid_slice_counts
from cost_models.divisors import divisors, prime_factors

REPO = Path(__file__).resolve().parent.parent
GPT3 = (REPO / "examples" / "gpt3.yaml").read_text()
HANG_S = 10.0


def test_hangs_divisor_enumeration_of_huge_dimensions_is_fast():
    start = time.perf_counter()
    for dim in (2**62, 10**30, (2**61 - 1) * 8, 2**89 - 1, 2**48 * 3**5):
        counts = valid_slice_counts(Dataflow.OS, 1024, 1024, dim, MeshShape(4, 4), 8)
        quotient = dim // 32 if dim % 32 == 0 else None
        if quotient is None:
            assert counts == []
        else:
            assert counts == divisors(quotient)
            assert all(quotient % s == 0 for s in counts)
    assert time.perf_counter() - start < HANG_S


@given(st.integers(min_value=1, max_value=20_000))
def test_hangs_divisors_match_trial_division(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@given(st.integers(min_value=1, max_value=2**80))
def test_hangs_prime_factors_multiply_back(n):
    product = 1
    for p, e in prime_factors(n).items():
        assert p == 2 or p % 2 == 1
        product *= p**e
    assert product == n


def test_hangs_plan_at_the_largest_allowed_sizes_finishes(tmp_path):
    """Every size at the top of its range: the plan finishes (here: no mesh
    fits or a plan is found) instead of enumerating for minutes."""
    text = (
        GPT3.replace("hidden_size: 12288", "hidden_size: 16777216")
        .replace("ffn_size: 49152", "ffn_size: 16777216")
        .replace("global_batch_sequences: 128", "global_batch_sequences: 16777216")
        .replace("sequence_length: 2048", "sequence_length: 16777216")
    )
    path = tmp_path / "huge.yaml"
    path.write_text(text)
    start = time.perf_counter()
    run = run_cli("plan", str(path), "--format", "json")
    assert run.exit_code in (0, 1), run.stderr
    assert time.perf_counter() - start < HANG_S


def test_hangs_long_model_name_report_is_fast_and_shortened(tmp_path):
    name = "m" * 60_000
    path = tmp_path / "long.yaml"
    path.write_text(GPT3.replace("name: gpt3-175b", f"name: {name}"))
    start = time.perf_counter()
    run = run_cli("plan", str(path))
    assert run.exit_code == 0, run.stderr
    assert time.perf_counter() - start < HANG_S
    assert "m" * (MAX_USER_TEXT_CHARS + 1) not in run.stdout
    assert "..." in run.stdout


def test_hangs_markup_in_a_name_prints_literally(tmp_path):
    path = tmp_path / "markup.yaml"
    path.write_text(GPT3.replace("name: gpt3-175b", "name: '[/bold] [red]x'"))
    run = run_cli("plan", str(path))
    assert run.exit_code == 0, run.stderr
    assert "[/bold] [red]x" in run.stdout


def test_hangs_user_text_is_bounded_and_one_line():
    text = user_text("a\nb" + "c" * 1000)
    assert "\n" not in text
    assert len(text) <= MAX_USER_TEXT_CHARS


# `pipeline` with `time_limit_s: 3` on 10,000 micro-batches took 12-20 s, and
# 100,000 ended in MemoryError after 80 s. The schedule's size is now bounded
# (autotune/pipeline/limits.py) and the whole balance, model building and
# local searches included, ends by its limit (autotune/pipeline/deadline.py).
DEEPSEEK = (REPO / "examples" / "pipeline-deepseek-v3-pp16.yaml").read_text()
INTERLEAVED_4 = """
pipeline: {num_stages: 16, num_chunks: 4, num_micro_batches: 64, schedule: interleaved-1f1b}
memory: {cap_gib: 60, constant_gib: 4.0}
recompute_options: {none: 0.0, selective: 0.04, full: 0.5}
head: {forward_ms: 1.0, memory_gib: 3.0}
tail: {forward_ms: 2.0, memory_gib: 3.0}
layers:
  - kind: decoder
    count: 256
    forward_ms: 1.0
    parameter_memory_gib: 0.4
    activation_memory_gib: {none: 0.3, selective: 0.2, full: 0.03}
"""


def _assert_balance_ends_by_its_limit(tmp_path, text: str) -> None:
    """Balance `text` with a 2 s limit: it ends by the limit (plus the
    polish's grace and 2 s for the first plan's and the final replay's cost
    at these sizes on a shared 2-core machine) with a plan that fits."""
    from autotune.pipeline.balance import POLISH_GRACE_S, balance
    from autotune.pipeline.problem import ShapeOverrides
    from autotune.pipeline.readers import read_pipeline_file

    path = tmp_path / "p.yaml"
    path.write_text(text)
    limit_s = 2.0
    read = read_pipeline_file(path, ShapeOverrides(time_limit_s=limit_s))
    t0 = time.perf_counter()
    result = balance(read.problem, read.settings)
    elapsed = time.perf_counter() - t0
    assert elapsed < limit_s + POLISH_GRACE_S + 2.0, f"{elapsed:.1f} s with a {limit_s} s limit"
    assert result.plan is not None and result.plan.fits
    assert result.solver.time_limited
    # the heuristics were cut by the clock: the result says the plan may vary
    assert not result.solver.repeatable and result.warnings


@pytest.mark.parametrize(
    "text",
    [
        # the largest 1F1B schedule allowed (16 x 512 = 8192 ops): took 9 s with a 3 s limit
        DEEPSEEK.replace("num_micro_batches: 32", "num_micro_batches: 512"),
        # local searches bounded only by move counts: took 25 s with a 3 s limit
        INTERLEAVED_4,
    ],
    ids=["1f1b-512-micro-batches", "interleaved-16x4x64"],
)
def test_hangs_time_limit_on_many_micro_batches_is_honoured(tmp_path, text):
    _assert_balance_ends_by_its_limit(tmp_path, text)


@pytest.mark.parametrize(
    ("args", "text", "field"),
    [
        (["--micro-batches", "100000"], DEEPSEEK, "--micro-batches: got 100000"),
        (
            [],
            DEEPSEEK.replace("num_micro_batches: 32", "num_micro_batches: 10000"),
            "pipeline.num_micro_batches: got 10000",
        ),
        (["--micro-batches", "1024"], DEEPSEEK, "--micro-batches: got 1024"),
    ],
)
def test_hangs_100000_micro_batches_is_bad_input_naming_the_range(tmp_path, args, text, field):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    run = run_cli("pipeline", str(path), "--time-limit", "3", *args)
    assert time.perf_counter() - t0 < HANG_S
    # a flag out of its own range is named alone; a schedule too large for
    # the file's stages names the file too
    where = () if field == "--micro-batches: got 100000" else (str(path),)
    line = assert_one_line_error(run, *where, field, "8192")
    assert "fix: use" in line


def test_hangs_a_slow_milp_build_is_cut_at_the_deadline(tmp_path, monkeypatch):
    """The MILP's model is built in Python before its solver's limit
    starts; on a loaded machine the build alone ran 18-31 s past a 60 s
    limit. A build that would end past the deadline is now abandoned."""
    from autotune.pipeline import ilp

    real_build = ilp._build

    def slow_build(*args, **kwargs):
        time.sleep(30.0)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(ilp, "_build", slow_build)
    _assert_balance_ends_by_its_limit(tmp_path, DEEPSEEK)


def test_hangs_a_time_box_whose_alarm_is_lost_still_ends():
    """Python drops an exception raised in a garbage-collection callback or
    a __del__ method (seen in this suite: hypothesis's gc callback took the
    alarm); the alarm fires again until the body ends."""
    from autotune.pipeline.deadline import OutOfTime, TimeBox, deadline_of_whole_call

    dropped = []

    @deadline_of_whole_call(lambda: 0.05)
    def spin() -> TimeBox:
        with TimeBox() as box:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < HANG_S:
                try:
                    while time.perf_counter() - t0 < HANG_S:
                        pass
                except OutOfTime:
                    if dropped:
                        raise
                    dropped.append(time.perf_counter() - t0)  # lost, as in a gc callback
        return box

    t0 = time.perf_counter()
    box = spin()
    assert box.expired and dropped
    assert time.perf_counter() - t0 < 1.0


def test_clock_cuts_count_deadline_stops_and_expired_time_boxes():
    from autotune.pipeline.deadline import TimeBox, clock_cuts, deadline_of_whole_call, past

    before = clock_cuts()
    assert not past(None) and not past(time.perf_counter() + 60.0)
    assert clock_cuts() == before
    assert past(time.perf_counter() - 1.0)
    assert clock_cuts() == before + 1

    @deadline_of_whole_call(lambda: 0.02)
    def spin() -> TimeBox:
        with TimeBox() as box:
            while True:
                pass
        return box

    @deadline_of_whole_call(lambda: 60.0)
    def quick() -> TimeBox:
        with TimeBox() as box:
            pass
        return box

    assert not quick().expired and clock_cuts() == before + 1
    assert spin().expired and clock_cuts() == before + 2


def test_hangs_an_alarm_landing_as_a_box_closes_leaves_nothing_armed(monkeypatch):
    """An alarm that lands on the first instructions of TimeBox.__exit__,
    while the box still counts as open, used to abort the close: the box
    stayed open with its handler installed and the timer re-arming every
    10 ms, so later alarms landed in unrelated code (a pytest INTERNALERROR
    from a gc callback) or killed the process ("Alarm clock") once the
    default handler was back. The handler now ignores alarms raised inside
    a closing box."""
    import signal
    import sys

    from autotune.pipeline import deadline

    real_setitimer = signal.setitimer
    landed = []

    def alarm_during_close(which, seconds):
        if not landed:  # the alarm lands inside __exit__, the box still open
            landed.append(seconds)
            monkeypatch.setattr(deadline, "_box_open", True)
            deadline._raise_out_of_time(signal.SIGALRM, sys._getframe(1))
        return real_setitimer(which, seconds)

    box = deadline.TimeBox()
    box._armed, box._previous = True, signal.getsignal(signal.SIGALRM)
    monkeypatch.setattr(signal, "setitimer", alarm_during_close)
    assert box.__exit__(None, None, None) is False
    assert landed and not box.expired
    # outside any closing box the same alarm still ends the body
    with pytest.raises(deadline.OutOfTime):
        deadline._raise_out_of_time(signal.SIGALRM, sys._getframe())
    monkeypatch.setattr(deadline, "_box_open", False)
    real_setitimer(signal.ITIMER_REAL, 0)


def test_hangs_an_alarm_landing_as_a_box_opens_does_not_skip_its_close(monkeypatch):
    """A deadline already past arms a box's timer for 0.1 ms, which can fire
    before TimeBox.__enter__ returns. Raising there used to skip __exit__:
    the box stayed open with its handler installed and the timer re-arming,
    and a later alarm killed the test run ("Alarm clock"). The handler now
    re-arms and returns inside __enter__; the next alarm ends the body and
    the box closes."""
    import signal
    import sys

    from autotune.pipeline import deadline

    real_setitimer = signal.setitimer
    landed = []

    def alarm_during_open(which, seconds):
        out = real_setitimer(which, seconds)
        if not landed and seconds > 0:
            landed.append(seconds)  # the alarm lands in __enter__, after the arming
            deadline._raise_out_of_time(signal.SIGALRM, sys._getframe(1))
        return out

    monkeypatch.setattr(signal, "setitimer", alarm_during_open)

    @deadline.deadline_of_whole_call(lambda: 0.0)
    def spin() -> deadline.TimeBox:
        with deadline.TimeBox() as box:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < HANG_S:
                pass
        return box

    try:
        box = spin()
    finally:
        monkeypatch.undo()
    assert landed and box.expired
    assert not deadline._box_open
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
