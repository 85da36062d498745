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

from clirun import run_cli
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
