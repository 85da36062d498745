"""Every numeric field of every input format, set to 1e308, -1e308, 5e-324
and the largest 64-bit integers (tests/extremes.py lists the formats, their
samples and the commands that read them): no finite input becomes infinity
or NaN inside. Each run exits 0, 1 or 2; a failure is one `meshtune: error:`
line, and on exit 2 (bad input) that line names the field and the number as
it was written; nothing is written on failure; a JSON written on success
holds no NaN or infinity, no export file holds `nan` or `inf`, and no
numpy overflow warning is raised on the way.

A sweep over about 450 fields and five numbers: slow, run by CI, not by the
fast loop.
"""

from __future__ import annotations

import pytest
from extremes import EXTREMES, contract_breaches, fields, formats, run_case

# an overflow numpy only warns about is a finite input become infinity inside
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("error::RuntimeWarning")]

CASES = [(fmt, field) for fmt in formats() for field in fields(fmt)]


@pytest.mark.parametrize(
    ("fmt", "field"), CASES, ids=[f"{fmt.name}: {field.path}" for fmt, field in CASES]
)
def test_extreme_numbers_in_every_field_keep_the_failure_contract(fmt, field):
    breaches = []
    for number in EXTREMES:
        run, written = run_case(fmt, field, number)
        breaches += [f"{number}: {b}" for b in contract_breaches(fmt, field, number, run, written)]
    assert not breaches, "\n".join(breaches)


def test_extreme_numbers_every_format_is_swept():
    # the formats meshtune reads, each with fields found in its sample
    names = {fmt.name.split(" ")[0] for fmt in formats()}
    assert {"plan", "model", "Hugging", "cluster", "chip", "calibration", "pipeline", "seed",
            "benchmark", "nccl-tests"} <= names  # fmt: skip
    assert all(fields(fmt) for fmt in formats())
