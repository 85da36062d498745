"""Every bundled example's plan, exported to each trainer that can express
it, loaded by that trainer's own code, and compared with the plan value by
value: parallel degrees, layers of every virtual pipeline stage,
interleaving, micro-batch, global batch, gradient accumulation, model shape,
recomputation and precision. A value a trainer cannot take must be a `not
expressed:` line of the export.

The trainers run in venvs of their own, built from PyPI on first use by
tests/trainers/venvs.py (several minutes and a few GB the first time; reused
after). A test is skipped only where its trainer cannot be installed here,
with the reason: Megatron-LM's training code is not a package, so its test
runs only with MEGATRON_LM_DIR pointing at a checkout (the key set of
tests/test_formats_export.py is its check otherwise).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import EXAMPLES

from autotune.cli import main

REPO = Path(__file__).resolve().parent.parent
TRAINERS = REPO / "tests" / "trainers"
PLAN_1D = REPO / "tests" / "fixtures" / "formats" / "plan_gpt3_1d_tp8.json"
CASES = [p.stem for p in EXAMPLES] + ["gpt3_1d_tp8"]
MEGATRON_SKIP = (
    "Megatron-LM's training arguments are not on PyPI (megatron-core's wheel holds "
    "megatron/core only): set MEGATRON_LM_DIR to a checkout (d98e8a64) with torch and "
    "triton importable to run this; the key set test checks the flags meanwhile"
)


@pytest.fixture(scope="module")
def plans(example_plans: dict[str, Path]) -> dict[str, Path]:
    return {**example_plans, "gpt3_1d_tp8": PLAN_1D}


def _venv(name: str) -> Path:
    sys.path.insert(0, str(TRAINERS))
    try:
        import venvs
    finally:
        sys.path.remove(str(TRAINERS))
    try:
        return venvs.ensure(name)
    except venvs.Unavailable as error:
        pytest.skip(f"{name} cannot be installed here: {error}")


def plan_values(doc: dict) -> dict[str, object]:
    """What every trainer must have loaded, read from the plan document."""
    c, model = doc["configuration"], doc["provenance"]["model"]
    stages = doc["pipeline"]["stages"]
    per_chunk = [stage["layers_per_chunk"][j] for j in range(c["interleave"]) for stage in stages]
    return {
        "tensor_parallel": c["tensor_parallel"],
        "context_parallel": c.get("context_parallel", 1),
        "pipeline_parallel": c["pipeline_parallel"],
        "data_parallel": c["data_parallel"],
        "interleave": c["interleave"],
        "virtual_stage_layers": per_chunk,
        "micro_batch_sequences": c["micro_batch_size"],
        "global_batch_sequences": c["global_batch_sequences"],
        "micro_batches": c["micro_batches"],
        "sequence_length": c["sequence_length"],
        "num_layers": model["num_layers"],
        "hidden_size": model["hidden_size"],
        "ffn_hidden_size": model["ffn_size"],
        "num_heads": model["num_heads"],
        "num_kv_heads": model.get("num_kv_heads") or model["num_heads"],
    }


def _export(plan: Path, target: str, out: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, ["export", str(plan), "--to", target, "--out", str(out)])
    not_expressed = [
        line.split("not expressed in", 1)[1].split(": ", 1)[1]
        for line in result.output.splitlines()
        if "not expressed in" in line
    ]
    return result.exit_code, not_expressed


def _check(python: Path, script: str, export: Path, *args: str, env: dict | None = None) -> dict:
    """Run a checker on an export file, in the export's folder (MindFormers
    writes its logs under the working directory)."""
    done = subprocess.run(
        [str(python), str(TRAINERS / script), str(export), *args],
        capture_output=True,
        text=True,
        cwd=export.parent,
        env={**os.environ, **(env or {})},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compare(loaded: dict, expected: dict, keys: list[str]) -> list[str]:
    return [
        f"{key}: plan {expected[key]!r}, trainer {loaded[key]!r}"
        for key in keys
        if loaded[key] != expected[key]
    ]


SHARED_KEYS = [
    "tensor_parallel",
    "context_parallel",
    "pipeline_parallel",
    "data_parallel",
    "interleave",
    "virtual_stage_layers",
    "micro_batch_sequences",
    "global_batch_sequences",
    "micro_batches",
    "sequence_length",
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_heads",
    "num_kv_heads",
]


def _is_1d(doc: dict) -> bool:
    return min(doc["mesh"]["num_rows"], doc["mesh"]["num_cols"]) == 1


def _context(doc: dict) -> tuple[int, str]:
    """The plan's context-parallel degree and key/value exchange."""
    c = doc["configuration"]
    return c.get("context_parallel", 1), c.get("context_parallel_comm", "p2p")


@pytest.fixture(scope="module")
def cp_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Plans pinning context parallelism 4 (16 across nodes) with each
    key/value exchange, on H100 nodes and a TPU v5p slice
    (tests/test_formats_export.py CP_CASES)."""
    from test_formats_export import CP_CASES, cp_plan_file

    folder = tmp_path_factory.mktemp("cp-plans")
    return {case: cp_plan_file(folder, case) for case in CP_CASES}


CP_CASE_NAMES = [
    "gpu-p2p",
    "gpu-all_gather",
    "gpu-a2a",
    "gpu-p2p-across-nodes",
    "tpu-p2p",
    "tpu-a2a",
]


# -- MindFormers ---------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_mindformers_loads_every_example(plans: dict[str, Path], case: str, tmp_path: Path):
    doc = json.loads(plans[case].read_text())
    code, not_expressed = _export(plans[case], "mindformers", tmp_path)
    if not _is_1d(doc):
        assert code == 2  # model_parallel is one axis: refused in one line
        return
    assert code == 0
    python = _venv("mindformers")
    loaded = _check(python, "mindformers_check.py", tmp_path / "mindformers.yaml")
    expected = plan_values(doc)
    assert _compare(loaded, expected, SHARED_KEYS) == []
    c = doc["configuration"]
    assert loaded["recompute"] == (c["recompute"] == "full")
    assert loaded["select_recompute"] == (c["recompute"] == "selective")
    assert loaded["compute_dtype"] == {"bf16": "BFloat16", "fp32": "Float32"}[c["dtype"]]
    assert loaded["sequence_parallel"] == (c["tensor_parallel"] > 1 and c["sequence_parallel"])
    zero = c["zero_stage"] if c["data_parallel"] > 1 else 0
    assert loaded["parallel_optimizer_level"] == (f"level{zero}" if zero else None)
    if zero == 1:
        assert any(line.startswith("ZeRO stage 1") for line in not_expressed)
    _check_mindformers_context(loaded, doc)
    _check_experts(loaded, doc)


def _check_mindformers_context(loaded: dict, doc: dict) -> None:
    """Ring attention for p2p, the whole group as the Ulysses degree for a2a,
    neither for all_gather (MindSpore gathers whole keys and values)."""
    cp, comm = _context(doc)
    assert loaded["use_ring_attention"] == (cp > 1 and comm == "p2p")
    assert loaded["ulysses_degree"] == (cp if cp > 1 and comm == "a2a" else 1)


@pytest.mark.parametrize("case", ["gpu-p2p", "gpu-all_gather", "gpu-a2a"])
def test_mindformers_loads_context_parallel_plans(
    cp_plans: dict[str, Path], case: str, tmp_path: Path
) -> None:
    """parallel_config.context_parallel becomes the mcore
    context_parallel_size; the exchange becomes ring attention or the
    Ulysses degree; the global batch stays data parallel x micro-batches."""
    doc = json.loads(cp_plans[case].read_text())
    assert _export(cp_plans[case], "mindformers", tmp_path)[0] == 0
    python = _venv("mindformers")
    loaded = _check(python, "mindformers_check.py", tmp_path / "mindformers.yaml")
    assert _compare(loaded, plan_values(doc), SHARED_KEYS) == []
    assert loaded["context_parallel"] == 4
    _check_mindformers_context(loaded, doc)


def test_mindformers_global_batch_is_the_plans_with_and_without_pipeline(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """MindFormers' global batch was 32 where the plan said 64 (PP 8), and 32
    instead of 1024 with PP 1: batch_size and gradient_accumulation_steps were
    not exported (regression; trainer/base_trainer.py's rule, loaded)."""
    python = _venv("mindformers")
    for case in ("gpt3_1d_tp8", "gpt3-tpu-v5p-auto"):  # PP 8 and PP 1 with accumulation
        doc = json.loads(plans[case].read_text())
        out = tmp_path / case
        assert _export(plans[case], "mindformers", out)[0] == 0
        loaded = _check(python, "mindformers_check.py", out / "mindformers.yaml")
        assert loaded["global_batch_sequences"] == doc["configuration"]["global_batch_sequences"]
        assert loaded["micro_batches"] == doc["configuration"]["micro_batches"]


def test_mindformers_pp_interleave_num_is_exported(tmp_path: Path):
    """Interleaving was "not expressed" although model_config.pp_interleave_num
    exists (regression): the Llama 3 70B example with 2 chunks per stage
    pinned (its balanced chunks exported as planned)."""
    import yaml

    python = _venv("mindformers")
    spec = yaml.safe_load((REPO / "examples" / "llama3-70b-h100-auto.yaml").read_text())
    spec["training"]["interleave"] = 2
    source = tmp_path / "interleaved.yaml"
    source.write_text(yaml.safe_dump(spec))
    plan = tmp_path / "interleaved.json"
    result = CliRunner().invoke(main, ["plan", str(source), "--out", str(plan)])
    assert result.exit_code == 0, result.output
    assert _export(plan, "mindformers", tmp_path)[0] == 0
    loaded = _check(python, "mindformers_check.py", tmp_path / "mindformers.yaml")
    doc = json.loads(plan.read_text())
    assert loaded["interleave"] == doc["configuration"]["interleave"] == 2
    assert loaded["virtual_stage_layers"] == plan_values(doc)["virtual_stage_layers"]


def test_mindformers_uses_the_current_model_key_names(tmp_path: Path) -> None:
    """Current configs name the shape num_hidden_layers, num_attention_heads,
    num_key_value_heads (regression: the legacy num_layers is refused by the
    mcore mapping, num_heads ignored)."""
    assert _export(PLAN_1D, "mindformers", tmp_path)[0] == 0
    text = (tmp_path / "mindformers.yaml").read_text()
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        assert f"    {key}: " in text
    for legacy in ("num_layers", "num_heads", "n_kv_heads"):
        assert f"    {legacy}: " not in text


# -- Megatron-LM -------------------------------------------------------------------


def _megatron_loaded(doc: dict, tmp_path: Path) -> dict:
    """The exported `megatron_args.sh` through Megatron-LM's parse_args and
    validate_args (skipped without MEGATRON_LM_DIR), compared with the plan
    on the keys every trainer shares."""
    checkout = os.environ.get("MEGATRON_LM_DIR")
    if not checkout:
        pytest.skip(MEGATRON_SKIP)
    path = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
    world = str(doc["configuration"]["num_chips"])
    loaded = _check(
        Path(sys.executable),
        "megatron_check.py",
        tmp_path / "megatron_args.sh",
        world,
        env={"PYTHONPATH": path},
    )
    assert _compare(loaded, plan_values(doc), SHARED_KEYS) == []
    return loaded


def _megatron_planned(tmp_path: Path, plan_file: Path) -> dict:
    """Plan `plan_file`, export it to Megatron-LM and load the arguments
    (_megatron_loaded)."""
    doc_path = tmp_path / "plan.json"
    result = CliRunner().invoke(main, ["plan", str(plan_file), "--out", str(doc_path)])
    assert result.exit_code == 0, result.output
    assert _export(doc_path, "megatron", tmp_path)[0] == 0
    return _megatron_loaded(json.loads(doc_path.read_text()), tmp_path)


@pytest.mark.parametrize("case", CASES)
def test_megatron_loads_every_example(plans: dict[str, Path], case: str, tmp_path: Path):
    doc = json.loads(plans[case].read_text())
    code, not_expressed = _export(plans[case], "megatron", tmp_path)
    if not _is_1d(doc):
        assert code == 2
        return
    assert code == 0
    loaded = _megatron_loaded(doc, tmp_path)
    c = doc["configuration"]
    assert loaded["params_dtype"] == {"bf16": "bfloat16", "fp32": "float32"}[c["dtype"]]
    granularity = {"none": None, "selective": "selective", "full": "full"}[c["recompute"]]
    assert loaded["recompute_granularity"] == granularity
    assert loaded["distributed_optimizer"] == (c["zero_stage"] >= 1)
    # ZeRO-2 / 3 run as Megatron-FSDP without pipeline stages, else ZeRO-1 (noted)
    fsdp = c["zero_stage"] >= 2 and c["pipeline_parallel"] == 1
    assert loaded["megatron_fsdp"] == fsdp
    if fsdp:
        strategy = {2: "optim_grads", 3: "optim_grads_params"}[c["zero_stage"]]
        assert loaded["sharding_strategy"] == strategy
    elif c["zero_stage"] >= 2:
        assert any(line.startswith(f"ZeRO stage {c['zero_stage']}") for line in not_expressed)
    cp, comm = _context(doc)
    if cp > 1:
        assert loaded["cp_comm_type"] == comm
    _check_experts(loaded, doc)
    moe = doc["provenance"]["model"].get("moe")
    if moe is not None:
        assert loaded["expert_tensor_parallel"] == c["expert_tensor_parallel"]
        dense = moe.get("first_dense_layers", 0)
        if dense:
            pattern = loaded["moe_layer_freq"]
            assert pattern == [0] * dense + [1] * (doc["provenance"]["model"]["num_layers"] - dense)


def _check_experts(loaded: dict, doc: dict) -> None:
    """A mixture of experts' routed experts, top-k and expert-parallel
    degree as the trainer built them (1 and None for a dense model)."""
    moe = doc["provenance"]["model"].get("moe")
    expected = (
        (None, None, 1)
        if moe is None
        else (moe["num_experts"], moe["experts_per_token"], doc["configuration"]["expert_parallel"])
    )
    got = (loaded["num_experts"], loaded["experts_per_token"], loaded["expert_parallel"])
    assert got == expected


@pytest.mark.parametrize(
    ("dispatcher", "overlap"), [("hybridep", True), ("alltoall", False), ("allgather", False)]
)
def test_megatron_loads_the_expert_dispatcher_and_overlap(
    dispatcher: str, overlap: bool, tmp_path: Path
) -> None:
    """A pipelined MoE plan's dispatcher and expert all-to-all overlap
    through parse_args, validate_args and TransformerConfig (which asserts
    the overlap's rules: interleaved stages, no full recomputation)."""
    from planning import write_plan
    from test_moe import MINI_MOE
    from test_moe_dispatch import pipelined_training

    training = pipelined_training(
        8,
        8,
        fc_algorithm="megatron-1d",
        expert_dispatcher=dispatcher,
        overlap_expert_comm=overlap,
    )
    loaded = _megatron_planned(tmp_path, write_plan(tmp_path, MINI_MOE, training, "h100-hgx-2n"))
    flex = dispatcher in ("deepep", "hybridep")
    assert loaded["moe_token_dispatcher_type"] == ("flex" if flex else dispatcher)
    if flex:
        assert loaded["moe_flex_dispatcher_backend"] == dispatcher
    assert loaded["overlap_moe_expert_parallel_comm"] is overlap


def test_megatron_loads_windows_and_the_mla_recompute(tmp_path: Path) -> None:
    """A sliding-window MLA model planned with selective recomputation:
    --window-size, --window-attn-skip-freq and --recompute-modules
    mla_up_proj through parse_args, validate_args and TransformerConfig."""
    from planning import pinned, write_plan
    from test_moe import MINI_MLA, TP2_EP4

    model = {**MINI_MLA, "sliding_window": 128, "full_attention_every": 2}
    training = pinned({**TP2_EP4, "recompute": "selective", "fc_algorithm": "megatron-1d"})
    loaded = _megatron_planned(tmp_path, write_plan(tmp_path, model, training, "h100-hgx"))
    assert loaded["recompute_granularity"] == "selective"
    assert loaded["recompute_modules"] == ["mla_up_proj"]
    assert loaded["window_size"] == [127, 0]
    assert loaded["window_attn_skip_freq"] == 2


@pytest.mark.parametrize("case", ["gpu-p2p", "gpu-all_gather", "gpu-a2a", "gpu-p2p-across-nodes"])
def test_megatron_loads_context_parallel_plans(
    cp_plans: dict[str, Path], case: str, tmp_path: Path
) -> None:
    """--context-parallel-size and --cp-comm-type through parse_args and
    validate_args: data parallel = world / (TP x PP x CP) is the plan's, and
    TransformerConfig.cp_comm_type its exchange."""
    doc = json.loads(cp_plans[case].read_text())
    assert _export(cp_plans[case], "megatron", tmp_path)[0] == 0
    loaded = _megatron_loaded(doc, tmp_path)
    assert loaded["cp_comm_type"] == _context(doc)[1]


# -- torchtitan ------------------------------------------------------------------


def _torchtitan(plan: Path, out: Path) -> tuple[dict, list[str]]:
    code, not_expressed = _export(plan, "torchtitan", out)
    assert code == 0
    python = _venv("torchtitan")
    return _check(python, "torchtitan_check.py", out / "meshtune_torchtitan.py"), not_expressed


def _variant(tmp_path: Path, change) -> Path:
    doc = json.loads(PLAN_1D.read_text())
    change(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("case", CASES)
def test_torchtitan_loads_and_builds_every_example(
    plans: dict[str, Path], case: str, tmp_path: Path
) -> None:
    doc = json.loads(plans[case].read_text())
    if not _is_1d(doc):
        assert _export(plans[case], "torchtitan", tmp_path)[0] == 2
        return
    loaded, not_expressed = _torchtitan(plans[case], tmp_path)
    assert _compare(loaded, plan_values(doc), SHARED_KEYS) == []
    c = doc["configuration"]
    assert loaded["compute_dtype"] == {"bf16": "bfloat16", "fp32": "float32"}[c["dtype"]]
    assert loaded["activation_checkpoint"] == c["recompute"]
    zero = c["zero_stage"] if c["data_parallel"] > 1 else 0
    assert loaded["data_parallel_shard"] == (c["data_parallel"] if zero else 1)
    if zero:
        reshard = "always" if zero == 3 else "never"
        assert loaded["fsdp_reshard_after_forward"] == reshard
    if zero == 1:
        assert any(line.startswith("ZeRO stage 1") for line in not_expressed)
    _check_torchtitan_context(loaded, doc, not_expressed)
    _check_experts(loaded, doc)
    if doc["provenance"]["model"].get("moe") is not None:
        # the module's comm_backend as torchtitan configured the dispatcher
        classes = {
            "alltoall": "AllToAllTokenDispatcher",
            "deepep": "DeepEPTokenDispatcher",
            "hybridep": "HybridEPTokenDispatcher",
        }
        assert loaded["token_dispatcher"] == classes[c["expert_dispatcher"]]


def _check_torchtitan_context(loaded: dict, doc: dict, not_expressed: list[str]) -> None:
    """FSDP over dp_shard x cp; an exchange other than all_gather (FlexAttention's
    key/value all-gather) is a not-expressed line."""
    cp, comm = _context(doc)
    assert loaded["fsdp"] == loaded["data_parallel_shard"] * cp
    if cp > 1:
        assert loaded["context_parallel_load_balancer"] == "headtail"
        noted = any(line.startswith("context_parallel_comm") for line in not_expressed)
        assert noted == (comm != "all_gather")


@pytest.mark.parametrize("case", ["gpu-p2p", "gpu-all_gather", "gpu-a2a", "gpu-p2p-across-nodes"])
def test_torchtitan_builds_context_parallel_plans(
    cp_plans: dict[str, Path], case: str, tmp_path: Path
) -> None:
    """context_parallel_degree builds the cp mesh of the plan's world (the
    degrees multiply to it) with FlexAttention's context-parallel forward."""
    doc = json.loads(cp_plans[case].read_text())
    loaded, not_expressed = _torchtitan(cp_plans[case], tmp_path)
    assert _compare(loaded, plan_values(doc), SHARED_KEYS) == []
    _check_torchtitan_context(loaded, doc, not_expressed)
    if doc["configuration"]["zero_stage"] == 0:
        assert any(line.startswith("ZeRO stage 0 with context") for line in not_expressed)


def test_torchtitan_0_3_0_has_no_toml_loader_so_the_export_is_a_config_module(tmp_path: Path):
    """`pip install torchtitan` gives 0.3.0, whose ConfigManager imports a
    module and calls a function: the export is that module (regression)."""
    loaded, _ = _torchtitan(PLAN_1D, tmp_path)
    assert loaded["versions"]["torchtitan"] == "0.3.0"
    assert not list(tmp_path.glob("*.toml"))


def test_torchtitan_interleaved_export_builds_not_17_virtual_stages(tmp_path: Path):
    """ "Number of virtual stages (17) must be divisible by pipeline parallel
    size (8)": torchtitan counted the embedding and output as layers
    (regression): 96 layers on 8 stages x 2 chunks build 6 per chunk."""
    loaded, _ = _torchtitan(PLAN_1D, tmp_path)
    assert loaded["interleave"] == 2
    assert loaded["virtual_stage_layers"] == [6] * 16


def test_torchtitan_pp8_of_96_layers_builds_12_per_stage_not_12_13_11(tmp_path: Path):
    """Without an explicit split a PP8 plan of 96 layers built as
    [12, 13, 12, 12, 12, 12, 12, 11] (regression)."""

    def one_chunk(doc: dict) -> None:
        doc["configuration"]["interleave"] = 1
        for stage in doc["pipeline"]["stages"]:
            stage["layers_per_chunk"] = [12]
        doc["pipeline"]["schedule"] = "1f1b"

    loaded, _ = _torchtitan(_variant(tmp_path, one_chunk), tmp_path / "out")
    assert loaded["virtual_stage_layers"] == [12] * 8


def test_torchtitan_uneven_split_10_11_11_builds_as_planned(tmp_path: Path):
    """An uneven plan [10, 11, 11] built as [11, 11, 10] (regression)."""

    def three_stages(doc: dict) -> None:
        c = doc["configuration"]
        c.update(pipeline_parallel=3, interleave=1, data_parallel=4, num_chips=96)
        doc["provenance"]["model"]["num_layers"] = 32
        doc["pipeline"]["schedule"] = "1f1b"
        doc["pipeline"]["stages"] = [
            {"stage": s, "layers": n, "layers_per_chunk": [n], "recompute": {"full": n}}
            for s, n in enumerate([10, 11, 11])
        ]

    loaded, _ = _torchtitan(_variant(tmp_path, three_stages), tmp_path / "out")
    assert loaded["virtual_stage_layers"] == [10, 11, 11]


def test_torchtitan_data_parallel_1_with_tp_and_pp_computes_in_bfloat16(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """With data parallel 1 plus TP/PP, mixed_precision_param bfloat16 was
    ignored and training ran in float32 (regression, torchtitan 0.2.0): the
    built chunks carry fully_shard's bfloat16 policy."""
    doc = json.loads(plans["megatron-gpt-175b-a100"].read_text())
    assert doc["configuration"]["data_parallel"] == 1
    assert doc["configuration"]["tensor_parallel"] > 1
    assert doc["configuration"]["pipeline_parallel"] > 1
    loaded, _ = _torchtitan(plans["megatron-gpt-175b-a100"], tmp_path)
    assert loaded["compute_dtype"] == "bfloat16"


def test_torchtitan_zero0_with_data_parallel_above_1_builds(tmp_path: Path):
    """ZeRO-0 with data parallel above 1 failed ("DDP has not supported > 1D
    parallelism") (regression): plain replicas beside TP and PP build."""

    def zero0(doc: dict) -> None:
        doc["configuration"]["zero_stage"] = 0

    loaded, _ = _torchtitan(_variant(tmp_path, zero0), tmp_path / "out")
    assert (loaded["data_parallel"], loaded["data_parallel_shard"]) == (4, 1)


# -- MaxText ---------------------------------------------------------------------


def _maxtext(plan: Path, out: Path) -> tuple[dict, list[str]]:
    code, not_expressed = _export(plan, "maxtext", out)
    assert code == 0
    python = _venv("maxtext")
    return _check(python, "maxtext_check.py", out / "maxtext.yml"), not_expressed


# MaxText's own names for the rest (mesh axes, repeats, layers per stage)
# are compared in the test itself.
MAXTEXT_KEYS = [
    key
    for key in SHARED_KEYS
    if key
    not in (
        "tensor_parallel",
        "data_parallel",
        "interleave",
        "virtual_stage_layers",
        "micro_batch_sequences",
    )
]


@pytest.mark.parametrize("case", CASES)
def test_maxtext_loads_every_example(plans: dict[str, Path], case: str, tmp_path: Path):
    """pyconfig, the device mesh and the abstract model and optimizer state,
    every array's sharding dividing its dimensions (2D plans included). A
    plan whose weights MaxText cannot shard evenly is refused at export
    (DeepSeek-V3's ZeRO-3 over 1,024 GPUs: its 1,536-wide q_lora over
    fsdp x expert = 1,024 chips, what the loader reported before the export
    refused it)."""
    doc = json.loads(plans[case].read_text())
    run = CliRunner().invoke(
        main, ["export", str(plans[case]), "--to", "maxtext", "--out", str(tmp_path / "x")]
    )
    if run.exit_code == 2:
        assert "holds weights MaxText cannot shard" in " ".join(run.output.split())
        assert not (tmp_path / "x").exists()
        assert doc["provenance"]["model"].get("mla") is not None, case
        return
    loaded, not_expressed = _maxtext(plans[case], tmp_path)
    expected = plan_values(doc)
    assert _compare(loaded, expected, MAXTEXT_KEYS) == []
    c = doc["configuration"]
    assert loaded["tensor_parallel"] == c["tensor_parallel"]
    assert loaded["data_parallel"] == c["data_parallel"]
    fsdp = c["data_parallel"] // loaded["expert_parallel"]
    assert loaded["fsdp"] == (fsdp if c["zero_stage"] == 3 else 1)
    if not any(line.startswith("expert parallel") for line in not_expressed):
        _check_experts(loaded, doc)
    stages, chunks = c["pipeline_parallel"], c["interleave"]
    assert loaded["interleave"] == chunks
    built = [loaded["layers_per_stage_and_chunk"]] * (stages * chunks)
    if built != expected["virtual_stage_layers"]:
        # an uneven split, or a layer count the stages x chunks do not divide
        notes = ("layer split", f"layers {expected['num_layers']} over")
        assert any(line.startswith(notes) for line in not_expressed), not_expressed
    vocab = doc["provenance"]["model"].get("vocab_size")
    if vocab is not None:
        assert vocab <= loaded["vocab_size"] < vocab + 128 * loaded["tensor_parallel"]
    remat = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}
    assert loaded["remat_policy"] == remat[c["recompute"]]
    assert loaded["dtype"] == {"bf16": "bfloat16", "fp32": "float32"}[c["dtype"]]
    _check_maxtext_context(loaded, doc, not_expressed)


def _check_maxtext_context(loaded: dict, doc: dict, not_expressed: list[str]) -> None:
    """The exchange as MaxText's context_parallel_strategy (ring, all_gather,
    ulysses), or all_gather with a not-expressed line; load balancing except
    for Ulysses."""
    cp, comm = _context(doc)
    if cp == 1:
        return
    strategy = {"p2p": "ring", "all_gather": "all_gather", "a2a": "ulysses"}[comm]
    if loaded["context_parallel_strategy"] != strategy:
        assert loaded["context_parallel_strategy"] == "all_gather"
        assert any(line.startswith(f"context_parallel_comm {comm}") for line in not_expressed)
    assert loaded["context_parallel_load_balance"] == (
        loaded["context_parallel_strategy"] != "ulysses"
    )


@pytest.mark.parametrize("case", CP_CASE_NAMES)
def test_maxtext_loads_context_parallel_plans(
    cp_plans: dict[str, Path], case: str, tmp_path: Path
) -> None:
    """ici/dcn_context_parallelism build the mesh's context axis; the strategy
    passes MaxText's validation (ring on TPU with the Tokamax splash kernel,
    on GPUs with hardware gpu; Ulysses on TPU); the model is traced except
    Ulysses', whose kernel refuses CPU devices."""
    doc = json.loads(cp_plans[case].read_text())
    loaded, not_expressed = _maxtext(cp_plans[case], tmp_path)
    assert _compare(loaded, plan_values(doc), MAXTEXT_KEYS) == []
    assert loaded["mesh"]["context"] == doc["configuration"]["context_parallel"]
    assert loaded["data_parallel"] == doc["configuration"]["data_parallel"]
    _check_maxtext_context(loaded, doc, not_expressed)
    if loaded["context_parallel_strategy"] == "ulysses":
        assert "only supported on TPU" in loaded["traced"]
    else:
        assert loaded["traced"] is True


def test_maxtext_current_release_refused_ici_tensor_transpose_parallelism(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """Every export was rejected by current MaxText: the key was removed
    (faaa424d, 2026-07) (regression): the 4 x 64 GPT-3 plan's second axis is
    tensor_sequence with the weights' embed dimension on it."""
    loaded, _ = _maxtext(plans["gpt3"], tmp_path)
    assert loaded["mesh"] == {"tensor": 4, "tensor_sequence": 64}
    assert "tensor_transpose" not in (tmp_path / "maxtext.yml").read_text()


def test_maxtext_usage_names_an_entry_point_that_exists(tmp_path: Path) -> None:
    """The printed usage `python3 -m MaxText.train` no longer existed
    (regression): the module the usage line names is in the installed MaxText."""
    assert _export(PLAN_1D, "maxtext", tmp_path)[0] == 0
    text = (tmp_path / "maxtext.yml").read_text()
    module = re.search(r"python3 -m (\S+) maxtext.yml", text).group(1)
    assert module == "maxtext.trainers.pre_train.train"
    python = _venv("maxtext")
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    assert subprocess.run([str(python), "-c", probe]).returncode == 0


def test_maxtext_uneven_split_is_a_note_and_still_loads(tmp_path: Path) -> None:
    """An uneven split was rejected with no note in the export (regression):
    90 layers on 8 stages x 2 chunks pipeline 80 and run 10 after, noted."""

    def ninety(doc: dict) -> None:
        doc["provenance"]["model"]["num_layers"] = 90
        for stage in doc["pipeline"]["stages"]:
            stage["layers_per_chunk"] = [6, 6] if stage["stage"] < 2 else [5, 6]
            stage["layers"] = sum(stage["layers_per_chunk"])

    loaded, not_expressed = _maxtext(_variant(tmp_path, ninety), tmp_path / "out")
    assert loaded["pipeline_parallel_layers"] == 80 and loaded["num_layers"] == 90
    assert any(line.startswith("layers 90 over 8 stages x 2 chunk(s)") for line in not_expressed)


def test_torchtitan_builds_a_layout_whose_ends_have_chunks_of_their_own(tmp_path: Path):
    """A pinned layout E|t|t|t|t|t|t|L (6 blocks on 4 stages x 2 chunks, the
    embedding and the loss alone in theirs) builds as planned: 0 blocks in
    the first and last virtual stages."""

    def ends_alone(doc: dict) -> None:
        c = doc["configuration"]
        c.update(pipeline_parallel=4, interleave=2, data_parallel=32, num_chips=256)
        c.update(micro_batches=4, global_batch_sequences=32 * c["micro_batch_size"] * 4)
        doc["pipeline"]["num_micro_batches"] = 4
        doc["provenance"]["model"]["num_layers"] = 6
        doc["pipeline"]["schedule"] = "interleaved"
        chunks = [[0, 1], [1, 1], [1, 1], [1, 0]]
        doc["pipeline"]["stages"] = [
            {"stage": s, "layers": sum(n), "layers_per_chunk": n, "recompute": {"full": sum(n)}}
            for s, n in enumerate(chunks)
        ]

    loaded, _ = _torchtitan(_variant(tmp_path, ends_alone), tmp_path / "out")
    assert loaded["virtual_stage_layers"] == [0, 1, 1, 1, 1, 1, 1, 0]
