"""Golden JSON of `meshtune compare` on a small weak-scaling sweep."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner
from jsoncheck import assert_json_close

from autotune.cli import main

GOLDEN = Path(__file__).parent / "golden" / "compare_gpt3_16_32.json"


def test_compare_golden_json(repo_root):
    result = CliRunner().invoke(
        main,
        ["compare", "examples/gpt3.yaml", "--chips", "16,32", "--format", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    if os.environ.get("MESHTUNE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(doc, indent=2) + "\n")
    assert_json_close(doc, json.loads(GOLDEN.read_text()))
