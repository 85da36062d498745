"""`meshtune pipeline` end to end: every example, golden JSON, ILP vs
simulator agreement, SVG timeline, bad input and infeasible exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsoncheck import assert_json_close

from autotune.cli import main

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MESHTUNE_UPDATE_GOLDEN") == "1"
EXAMPLES = [
    "examples/pipeline-llama-pp8.yaml",
    "examples/pipeline-deepseek-v3-pp16.yaml",
    "examples/pipeline-seed-format.yaml",
]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def docs():
    cwd = os.getcwd()
    os.chdir(Path(__file__).resolve().parent.parent)
    try:
        out = {}
        for ex in EXAMPLES:
            result = run("pipeline", ex, "--format", "json")
            assert result.exit_code == 0, result.output
            out[ex] = json.loads(result.stdout)
        return out
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_plans_and_agrees_with_simulator(docs, example):
    doc = docs[example]
    assert doc["schema"] == "meshtune.pipeline/1" and doc["status"] == "ok"
    plan = doc["plan"]
    # Acceptance: ILP prediction and simulated makespan within 5%.
    assert doc["predicted_step_time_s"] == pytest.approx(plan["step_time_s"], rel=0.05)
    assert doc["solver"]["gap"] is not None and doc["solver"]["gap"] <= 1e-3 + 1e-12
    assert all(st["headroom_bytes"] >= 0 for st in plan["stages"])
    if doc["baseline"] is not None:
        assert plan["step_time_s"] <= doc["baseline"]["step_time_s"] * (1 + 1e-9)
    b = plan["bubble"]
    assert b["total"] == pytest.approx(b["ideal"] + b["imbalance"] + b["recompute"])


def test_deepseek_recomputes_on_early_stages_only(docs):
    plan = docs["examples/pipeline-deepseek-v3-pp16.yaml"]["plan"]
    sel = plan["seed_config"]["select_recompute"]
    assert sel[0] > 0 and sum(sel[8:]) == 0
    kinds = [
        k for st in plan["stages"] for ch in st["chunks"] for k, n in ch["layers"].items() if n
    ]
    assert kinds.index("moe") > kinds.index("dense") and kinds[-1] == "mtp"
    assert sum(sum(ch["layers"].values()) for st in plan["stages"] for ch in st["chunks"]) == 62


def test_seed_format_reports_decomposition(docs):
    doc = docs["examples/pipeline-seed-format.yaml"]
    dec = doc["decomposition"]
    assert doc["inputs"]["format"] == "seed"
    # The example's memories were made from 900 MiB/layer and 350 MiB of activations, +-0.3%.
    assert dec["parameter_bytes_per_layer"] / 2**20 == pytest.approx(900, rel=0.05)
    assert dec["activation_bytes_per_layer"]["none"] / 2**20 == pytest.approx(350, rel=0.05)
    assert len(dec["residuals"]) == 10


def _solver_independent(doc: dict) -> dict:
    """The document without what may differ between equally fast optimal
    plans (the solver may return any of them; which one depends on its
    version): the plan keeps its step time, its fields and its stage fields."""
    out = dict(doc)
    plan = doc["plan"]
    out["plan"] = {
        "keys": list(plan),
        "step_time_s": plan["step_time_s"],
        "fits": plan["fits"],
        "stage_keys": [list(st) for st in plan["stages"]],
    }
    return out


def test_llama_golden_json(docs):
    """Golden JSON: everything fixed by the problem (inputs, baseline,
    predicted step time, the optimal step time) is pinned; the full plan
    document is stored too, for reading."""
    doc = dict(docs["examples/pipeline-llama-pp8.yaml"])
    doc.pop("tool_version")
    doc["solver"] = {k: v for k, v in doc["solver"].items() if k == "name"}
    path = GOLDEN / "pipeline_llama_pp8.json"
    if UPDATE:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    golden = json.loads(path.read_text())
    assert_json_close(_solver_independent(doc), _solver_independent(golden), rel=1e-6)


def test_table_timeline_and_out(repo_root, tmp_path):
    svg, out = tmp_path / "t.svg", tmp_path / "p.json"
    result = run("pipeline", EXAMPLES[0], "--timeline", str(svg), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "Step time" in result.stdout and "offset: [" in result.stdout
    assert "Timeline" in result.stdout
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<rect") > 8 * 32 * 2
    assert json.loads(out.read_text())["schema"] == "meshtune.pipeline/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "t.svg"]


BASE = """\
pipeline: {num_stages: 2, num_micro_batches: 4}
memory: {cap_gib: 10, constant_gib: 1}
recompute_options: {none: 0.0, full: 0.5}
head: {forward_ms: 0.5, memory_gib: 0.5}
tail: {forward_ms: 1.0, memory_gib: 0.5}
layers:
  - {kind: decoder, count: 4, forward_ms: 1.0, parameter_memory_gib: 0.5,
     activation_memory_gib: {none: 1.0, full: 0.1}}
"""


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (
            lambda s: s.replace("num_micro_batches: 4", "num_micro_batches: 0"),
            r"p\.yaml: pipeline\.num_micro_batches: got 0; .*fix: use a value > 0",
        ),
        (
            lambda s: s.replace("{none: 0.0, full: 0.5}", "{none: 0.0, fulll: 0.5}"),
            r"p\.yaml: .*unknown option 'fulll'; fix: use names from none, selective",
        ),
        (
            lambda s: s.replace("{num_stages: 2,", "{num_stages: 2, num_chunks: 2,"),
            r"schedule 1f1b runs one chunk per stage.*fix: set `schedule: interleaved-1f1b`",
        ),
        (
            lambda s: s.replace("count: 4", "count: 1"),
            r"1 body layers cannot give 2 chunks.*fix: lower num_stages",
        ),
        (
            lambda s: s.replace("{none: 1.0, full: 0.1}", "{none: 1.0, selective: 0.1}"),
            r"activation_memory_gib\.selective is not in recompute_options; fix: add",
        ),
        (lambda s: s.replace("memory:", "memroy:"), r"memroy: .*is not a known key"),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, edit, pattern):
    path = tmp_path / "p.yaml"
    path.write_text(edit(BASE))
    out = tmp_path / "out.json"
    result = run("pipeline", str(path), "--out", str(out))
    assert result.exit_code == 2, result.output
    import re

    assert re.search(pattern, result.stderr), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_seed_format_under_determined_exit_2(tmp_path):
    text = (Path(__file__).resolve().parent.parent / EXAMPLES[2]).read_text()
    text = text.replace("stage_id: [1, 4, 6, 9, 10, 11, 12, 13]", "stage_id: [1, 4]").replace(
        "memories: [49019, 29998, 25533, 28313, 19850, 23592, 15925, 19617]",
        "memories: [49019, 29998]",
    )
    path = tmp_path / "seed.yaml"
    path.write_text(text)
    result = run("pipeline", str(path))
    assert result.exit_code == 2
    assert "memory_usage.body_memories" in result.stderr
    assert "cannot be told apart; fix: measure stage" in result.stderr


def test_infeasible_cap_exit_1(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(BASE.replace("cap_gib: 10", "cap_gib: 2"))
    result = run("pipeline", str(path), "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["status"] == "infeasible"
    assert doc["infeasible"]["tightest_stage"] in (0, 1)
    assert doc["infeasible"]["shortfall_bytes"] > 0
    assert "is the tightest and still needs" in result.stderr


@pytest.mark.parametrize(
    ("solver", "extra"),
    [("highs", []), ("highs", ["--verbose"]), ("cbc", []), ("cbc", ["--verbose"])],
)
def test_json_stdout_parses_in_a_real_process(tmp_path, repo_root, solver, extra):
    # The solvers write from C to file descriptor 1, which CliRunner does not
    # see; a child process shows what a shell pipe to `python -m json.tool` gets.
    import subprocess
    import sys

    path = tmp_path / "p.yaml"
    path.write_text(BASE + f"solver: {{solver: {solver}, time_limit_s: 20}}\n")
    code = "from autotune.cli import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "pipeline", str(path), "--format", "json", *extra],
        capture_output=True,
        text=True,
        cwd=repo_root,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["solver"]["name"] == solver and doc["plan"]["fits"]
    if extra:  # the solver's own log on stderr, and no library warning
        assert ("HiGHS" if solver == "highs" else "CBC MILP Solver") in proc.stderr
        assert "Warning" not in proc.stderr
    else:
        assert proc.stderr == ""


def test_no_plan_and_no_proof_is_not_exit_1(tmp_path, monkeypatch):
    # A limit too short for anything: the run says so and exits 4, not 1.
    import autotune.pipeline.balance as bal

    monkeypatch.setattr(bal, "_heuristic_start", lambda *a, **k: (None, None))
    monkeypatch.setattr(bal, "_quick_start", lambda p: None)
    monkeypatch.setattr(bal, "baselines", lambda p: [])
    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    result = run("pipeline", str(path), "--format", "json", "--time-limit", "0.01")
    assert result.exit_code == 4, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "no_plan" and doc["plan"] is None
    assert "none proven impossible" in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "pattern"),
    [
        ("p.yaml", BASE.replace("cap_gib: 10", "cap_gib: .nan"), r"memory\.cap_gib"),
        ("p.yaml", BASE.replace("forward_ms: 1.0,", "forward_ms: .inf,"), r"forward_ms"),
        (
            "p.yaml",
            BASE.replace("{none: 1.0, full: 0.1}", "{none: .nan, full: 0.1}"),
            r"activation_memory_gib",
        ),
        # the shared bounded loader rejects non-finite numbers first, naming the key path
        ("s.yaml", None, r"memory_usage\.body_memories\.memories\[0\]: got \.nan; is not a finite"),
        ("s2.yaml", "time", r"time_config\.head: got -0\.9; must be a number from 0 to 3\.6e\+06"),
        ("l.json", "json", r"l\.json: [\w.\[\]]+: got NaN; is not a finite number"),
    ],
)
def test_non_finite_numbers_one_line_exit_2(tmp_path, repo_root, name, text, pattern):
    import re

    seed = (repo_root / EXAMPLES[2]).read_text()
    if name == "s.yaml":
        text = seed.replace("memories: [49019,", "memories: [.nan,")
    elif name == "s2.yaml":
        text = seed.replace("head: 0.9", "head: -0.9")
    elif name == "l.json":
        text = (repo_root / "tests/fixtures/seed_tool/demo.json").read_text().replace("852", "NaN")
    path = tmp_path / name
    path.write_text(text)
    result = run("pipeline", str(path), "--stages", "16", "--micro-batches", "16")
    assert result.exit_code == 2, result.output
    assert re.search(pattern, result.stderr), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_plan_search_cut_by_the_clock_warns_and_the_json_still_parses(tmp_path, monkeypatch):
    # The moves always wanted, and their safety stop at 0% of the limit: the
    # clock cuts the search, the warning goes to stderr and into the JSON.
    import autotune.pipeline.balance as balance_module

    monkeypatch.setattr(balance_module, "IMPROVE_ABOVE_BOUND", -1.0)
    monkeypatch.setattr(balance_module, "MOVES_SHARE", 0.0)
    path = tmp_path / "p.yaml"
    path.write_text(BASE)
    result = run("pipeline", str(path), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["solver"]["repeatable"] is False
    assert doc["warnings"] == [balance_module.CLOCK_CUT_WARNING]
    assert "meshtune: warning: the time limit stopped the plan search" in result.stderr
