"""`meshtune export`: golden files for the bundled GPT-3 plan (2D) and a 1D
plan, each target's output checked against the key set of the target's
source at a cited version (tests/fixtures/formats/README.md), the JAX module
run on 8 virtual CPU devices against a plain matmul, and bad input."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.formats.export import TARGETS, export_plan

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "export"
FIXTURES = REPO / "tests" / "fixtures" / "formats"
UPDATE = os.environ.get("MESHTUNE_UPDATE_GOLDEN") == "1"
PLAN_2D = REPO / "tests" / "golden" / "plan_gpt3.json"  # the bundled GPT-3 plan, 4 x 64
PLAN_1D = FIXTURES / "plan_gpt3_1d_tp8.json"  # dp 4 x pp 8 x tp 1 x 8


def _meshtune(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )


def _fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# -- golden files ---------------------------------------------------------------

CASES = [
    ("gpt3", PLAN_2D, "jax"),
    ("gpt3", PLAN_2D, "maxtext"),
    ("gpt3", PLAN_2D, "mindformers"),
    ("gpt3", PLAN_2D, "megatron"),  # refused: 2D
    ("gpt3", PLAN_2D, "torchtitan"),  # refused: 2D
    ("gpt3_1d", PLAN_1D, "megatron"),
    ("gpt3_1d", PLAN_1D, "torchtitan"),
    ("gpt3_1d", PLAN_1D, "mindformers"),
    ("gpt3_1d", PLAN_1D, "maxtext"),
]


@pytest.mark.parametrize(("case", "plan", "target"), CASES, ids=[f"{c}-{t}" for c, _, t in CASES])
def test_export_golden(tmp_path: Path, case: str, plan: Path, target: str) -> None:
    out = tmp_path / "out"
    # a path relative to the repository, as the golden stderr shows it
    proc = _meshtune("export", str(plan.relative_to(REPO)), "--to", target, "--out", str(out))
    folder = GOLDEN / case / target
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if proc.returncode == 0:
            for f in out.iterdir():
                shutil.copy(f, folder / f.name)
        else:
            (folder / "stderr.txt").write_text(proc.stderr)
    if (folder / "stderr.txt").exists():
        assert proc.returncode == 2
        assert proc.stderr == (folder / "stderr.txt").read_text()
        assert not out.exists(), "a refused export writes nothing"
        return
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in folder.iterdir())
    for expected in folder.iterdir():
        assert (out / expected.name).read_text() == expected.read_text(), expected.name
    # every not-expressed choice is on stderr, one line each, and in each file's header
    result = export_plan(str(plan), target)
    lines = [f"meshtune: not expressed in {target}: {line}" for line in result.not_expressed]
    assert proc.stderr.splitlines() == lines
    for f in result.files:
        for line in result.not_expressed:
            assert f"not expressed: {line}" in f.text


def test_refusal_names_the_targets_that_can(tmp_path: Path) -> None:
    proc = _meshtune("export", str(PLAN_2D), "--to", "megatron")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "mesh: is a 2D mesh (4 x 64); Megatron-LM runs 1D tensor parallelism only" in line
    assert "fix: export --to jax (or maxtext)" in line


def test_print_without_out() -> None:
    proc = _meshtune("export", str(PLAN_1D), "--to", "torchtitan")
    assert proc.returncode == 0
    assert proc.stdout.startswith(
        "==> meshtune_torchtitan.py <==\n# meshtune export --to torchtitan"
    )


# -- key sets of the targets' sources ----------------------------------------------


def test_maxtext_keys_in_base_yml() -> None:
    """Against MaxText 0.2.5's base.yml (tests/trainers/ load every example
    with MaxText itself)."""
    known = _fixture("maxtext-base-yml.json")
    for plan in (PLAN_2D, PLAN_1D):
        files = {f.name: f.text for f in export_plan(str(plan), "maxtext").files}
        config = yaml.safe_load(files["maxtext.yml"])
        assert config.pop("base_config") == "base.yml"
        assert "ici_tensor_transpose_parallelism" not in config  # removed in MaxText 0.2.4
        assert set(config) <= set(known["keys"]), set(config) - set(known["keys"])
        assert config["remat_policy"] in known["remat_policy"]
        assert config["dtype"] in known["dtype"]
        mesh = json.loads(plan.read_text())["mesh"]
        tp = config["ici_tensor_parallelism"] * config["ici_tensor_sequence_parallelism"]
        assert tp == mesh["num_rows"] * mesh["num_cols"]
    # the 2D plan runs ffn_up transposed: W is stored [col, row], so its embed
    # (input) dim is on the 64 columns
    config = yaml.safe_load(export_plan(str(PLAN_2D), "maxtext").files[0].text)
    assert (config["ici_tensor_sequence_parallelism"], config["ici_tensor_parallelism"]) == (64, 4)
    rules = dict((name, axes) for name, axes in config["logical_axis_rules"][:5])
    assert rules["mlp"] == ["fsdp_transpose", "tensor", "autoregressive"]
    assert config["vocab_size"] == 50304  # 50257 padded: the tensor axis shards the vocabulary
    flags = export_plan(str(PLAN_2D), "maxtext").files[1].text
    assert "--xla_tpu_enable_windowed_einsum_for_all_gather=true" in flags
    assert "--xla_gpu_threshold_for_windowed_einsum_mib=0" in flags


def _megatron_args(text: str) -> list[str]:
    body = re.search(r"^MEGATRON_ARGS=\(\n(.*?)^\)$", text, re.S | re.M)
    assert body, "no MEGATRON_ARGS array"
    return shlex.split(body.group(1))


@pytest.mark.parametrize("key_set", ["megatron-arguments.json", "megatron-arguments-000c4ac2.json"])
def test_megatron_flags_in_arguments_py(key_set: str) -> None:
    """Against NVIDIA/Megatron-LM's argument parser at d98e8a64 (the export's
    target) and arguments.py @ 000c4ac2 (every flag it writes exists in both)."""
    flags = _fixture(key_set)["flags"]
    files = {f.name: f.text for f in export_plan(str(PLAN_1D), "megatron").files}
    words = _megatron_args(files["megatron_args.sh"])
    i = 0
    seen = {}
    while i < len(words):
        flag = words[i]
        assert flag in flags, flag
        if flags[flag] == "flag":
            seen[flag] = True
            i += 1
        else:
            value = words[i + 1]
            if flags[flag] == "int":
                assert value.isdigit(), (flag, value)
            seen[flag] = value
            i += 2
    plan = json.loads(PLAN_1D.read_text())
    config = plan["configuration"]
    assert seen["--tensor-model-parallel-size"] == "8"
    assert seen["--pipeline-model-parallel-size"] == str(config["pipeline_parallel"])
    # Megatron: global = micro * dp * micro-batches
    micro = int(seen["--micro-batch-size"])
    assert micro * config["data_parallel"] * config["micro_batches"] == int(
        seen["--global-batch-size"]
    )
    assert seen["--tp-comm-overlap-cfg"] == "tp_comm_overlap_cfg.yaml"


def test_userbuffers_yaml_against_initialize_ub() -> None:
    """Against NVIDIA/TransformerEngine initialize_ub @ fecb10bd: GEMM names,
    methods, keys; `pipeline` only on reduce-scatter GEMMs; a non-bulk dgrad
    reduce-scatter forbids its wgrad entry (TE asserts it)."""
    te = _fixture("te-initialize-ub.json")
    names = {n for group in te["methods"].values() for n in group}
    files = {f.name: f.text for f in export_plan(str(PLAN_1D), "megatron").files}
    cfg = yaml.safe_load(files["tp_comm_overlap_cfg.yaml"])
    reduce_scatter = set(te["layers_reduce_scatter_overlap"]) | set(
        te["dgrad_reduce_scatter_overlap"]
    )
    for name, settings in cfg.items():
        assert name in names, name
        assert set(settings) <= set(te["config_keys"])
        assert settings["method"] in te["methods"]
        if settings["method"] == "pipeline":
            assert name in reduce_scatter and settings["num_splits"] >= 1
        if name in te["dgrad_reduce_scatter_overlap"] and settings["method"] != "bulk":
            assert name.replace("dgrad", "wgrad") not in cfg
    # split counts are the plan's S of the matching GEMMs
    plan = json.loads(PLAN_1D.read_text())
    s = {(lay["name"], g["pass"]): g["num_slices"] for lay in plan["layers"] for g in lay["gemms"]}
    assert cfg["proj_fprop"]["num_splits"] == s[("attn_out", "forward")]
    assert cfg["fc2_fprop"]["num_splits"] == s[("ffn_down", "forward")]
    assert cfg["qkv_dgrad"]["num_splits"] == s[("qkv", "backward_data")]
    assert cfg["fc1_dgrad"]["num_splits"] == s[("ffn_up", "backward_data")]


def _module_constants(text: str) -> dict[str, object]:
    """The literal constants at the top of the torchtitan config module
    (every assignment before its first import)."""
    values: dict[str, object] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            break
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def test_torchtitan_module_values_of_the_1d_plan() -> None:
    """Hand-computed from the fixture plan (dp 4 with ZeRO-1, tp 8, pp 8 x 2
    chunks of 6, 8 micro-batches of 2, full recomputation, sliced GEMMs); the
    loader tests (tests/test_trainer_loaders.py) build it with torchtitan."""
    files = {f.name: f.text for f in export_plan(str(PLAN_1D), "torchtitan").files}
    text = files["meshtune_torchtitan.py"]
    compile(text, "meshtune_torchtitan.py", "exec")
    values = _module_constants(text)
    assert values["LAYERS_PER_VIRTUAL_STAGE"] == [6] * 16
    assert values["TRAINING"] == {
        "local_batch_size": 16,  # 8 micro-batches of 2 per replica and step
        "global_batch_size": 64,
        "seq_len": 2048,
        "dtype": "float32",
        "mixed_precision_param": "bfloat16",
        "mixed_precision_reduce": "float32",
        "disable_cuda_graphs": True,
    }
    p = values["PARALLELISM"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (1, 4)
    assert p["fsdp_reshard_after_forward"] == "never"
    assert (p["tensor_parallel_degree"], p["pipeline_parallel_degree"]) == (8, 8)
    assert p["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert p["pipeline_parallel_microbatch_size"] == 2
    assert values["ACTIVATION_CHECKPOINT"] == "full"
    assert values["COMPILE"]["enable_async_tensor_parallel"] is True
    assert (values["NUM_LAYERS"], values["DIM"], values["FFN_HIDDEN"]) == (96, 12288, 49152)


def test_mindformers_values_of_the_1d_plan() -> None:
    """Hand-computed from the fixture plan (dp 4, tp 8, pp 8 x 2 chunks of 6,
    2 sequences per micro-batch, 8 micro-batches, full recomputation, ZeRO-1);
    the loader tests (tests/test_trainer_loaders.py) check what MindFormers
    makes of them."""
    files = {f.name: f.text for f in export_plan(str(PLAN_1D), "mindformers").files}
    config = yaml.safe_load(files["mindformers.yaml"])
    assert config["runner_config"] == {"batch_size": 2, "gradient_accumulation_steps": 1}
    assert config["parallel_config"] == {
        "data_parallel": 4,
        "model_parallel": 8,
        "use_seq_parallel": True,
        "pipeline_stage": 8,
        "micro_batch_num": 8,
    }
    parallel = config["parallel"]
    assert parallel["dataset_strategy"] == [[4, 1]] * 4 + [[4, 1, 1, 1]]
    assert parallel["enable_parallel_optimizer"] is True
    # level1: gradient_accumulation_shard is refused beside any level but level2
    assert parallel["parallel_optimizer_config"]["optimizer_level"] == "level1"
    assert "gradient_accumulation_shard" not in parallel["parallel_optimizer_config"]
    assert parallel["pipeline_config"]["pipeline_interleave"] is True
    assert config["recompute_config"]["recompute"] is True
    assert config["recompute_config"]["select_recompute"] is False
    model = config["model"]["model_config"]
    assert model["pp_interleave_num"] == 2
    assert model["offset"] == [[0] * 8, [0] * 8]
    assert (model["num_hidden_layers"], model["num_attention_heads"]) == (96, 96)
    assert model["intermediate_size"] == 4 * 12288 and model["head_dim"] == 128


def test_mindformers_offsets_with_a_remainder(tmp_path: Path) -> None:
    doc = json.loads(PLAN_1D.read_text())
    # 99 = 16 * 6 + 3 layers: the second chunks of stages 5-7 take 7
    doc["provenance"]["model"]["num_layers"] = 99
    for stage in doc["pipeline"]["stages"]:
        stage["layers_per_chunk"] = [6, 7 if stage["stage"] >= 5 else 6]
        stage["layers"] = sum(stage["layers_per_chunk"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    config = yaml.safe_load(export_plan(str(plan), "mindformers").files[0].text)
    assert config["model"]["model_config"]["offset"] == [[0] * 8, [0, 0, 0, 0, 0, 1, 1, 1]]


def test_megatron_says_whole_activation_sends_are_not_expressed(tmp_path: Path) -> None:
    """A plan priced with whole activations between stages (DeepSpeed's
    pipeline engine) exports to Megatron-LM, which always splits them: the
    difference is a not-expressed line, not silence."""
    doc = json.loads(PLAN_1D.read_text())
    assert doc["configuration"]["pipeline_parallel"] > 1
    for section in (doc["provenance"]["training"], doc["configuration"]):
        section["fc_algorithm"] = "megatron-1d"
        section["sequence_parallel"] = False
    doc["provenance"]["training"]["pipeline_scatter_gather"] = False
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = export_plan(str(plan), "megatron")
    assert any("pipeline_scatter_gather false" in line for line in result.not_expressed)
    assert not any(
        "pipeline_scatter_gather" in line
        for line in export_plan(str(PLAN_1D), "megatron").not_expressed
    )


# -- context parallelism --------------------------------------------------------------

# The Llama-3-8B shape on 32,768-token sequences, every degree pinned (the plan
# only prices them): TP x CP x DP on 8 HGX H100 nodes or a TPU v5p slice.
CP_MODEL = {
    "name": "llama3-8b-shape", "num_layers": 32, "hidden_size": 4096, "num_heads": 32,
    "num_kv_heads": 8, "head_dim": 128, "ffn_size": 14336, "ffn_kind": "swiglu",
    "vocab_size": 128256, "position_encoding": "rotary",
}  # fmt: skip
# case -> (cluster, tensor parallel, context parallel, key/value exchange, ZeRO stage)
CP_CASES = {
    "gpu-p2p": ("h100-hgx-8n", 2, 4, "p2p", 1),
    "gpu-all_gather": ("h100-hgx-8n", 2, 4, "all_gather", 0),
    "gpu-a2a": ("h100-hgx-8n", 2, 4, "a2a", 1),
    "gpu-p2p-across-nodes": ("h100-hgx-8n", 1, 16, "p2p", 1),  # 8 GPUs a node: 2 nodes
    "tpu-p2p": ("tpu-v5p-256", 4, 4, "p2p", 1),
    "tpu-a2a": ("tpu-v5p-256", 2, 4, "a2a", 1),
}


def cp_plan_file(folder: Path, case: str) -> Path:
    """`meshtune plan --out` of one CP_CASES case, written into `folder`."""
    from click.testing import CliRunner

    from autotune.cli import main

    cluster, tp, cp, comm, zero = CP_CASES[case]
    spec = {
        "model": CP_MODEL,
        "training": {
            "global_batch_sequences": 64, "sequence_length": 32768, "tensor_parallel": tp,
            "context_parallel": cp, "context_parallel_comm": comm, "pipeline_parallel": 1,
            "micro_batch_size": 1, "recompute": "full", "zero_stage": zero,
        },
        "cluster": cluster,
    }  # fmt: skip
    source, plan = folder / f"{case}.yaml", folder / f"{case}.json"
    source.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["plan", str(source), "--out", str(plan)])
    assert result.exit_code == 0, result.output
    doc = json.loads(plan.read_text())["configuration"]
    assert (doc["context_parallel"], doc["context_parallel_comm"]) == (cp, comm)
    return plan


@pytest.fixture(scope="module")
def cp_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cp-plans")
    return {case: cp_plan_file(folder, case) for case in CP_CASES}


def _files(plan: Path, target: str) -> dict[str, str]:
    return {f.name: f.text for f in export_plan(str(plan), target).files}


def test_context_parallel_in_every_header(cp_plans: dict[str, Path]) -> None:
    """Every target's header names the context group and counts its chips."""
    for target in TARGETS:
        result = export_plan(str(cp_plans["gpu-p2p"]), target)
        for f in result.files:
            assert "context parallel 4 (p2p), data parallel 8" in f.text, (target, f.name)
            assert ", 64 chips" in f.text, (target, f.name)
        # and a plan without context parallelism says nothing of it
        for f in export_plan(str(PLAN_1D), target).files:
            assert "context parallel" not in f.text, (target, f.name)


@pytest.mark.parametrize("key_set", ["megatron-arguments.json", "megatron-arguments-000c4ac2.json"])
@pytest.mark.parametrize("case", ["gpu-p2p", "gpu-all_gather", "gpu-a2a", "gpu-p2p-across-nodes"])
def test_megatron_context_parallel_flags(
    cp_plans: dict[str, Path], case: str, key_set: str
) -> None:
    """--context-parallel-size and --cp-comm-type, both in the parser's key
    set at d98e8a64 and at 000c4ac2 (megatron/training/arguments.py); the
    plan's p2p, all_gather and a2a are TransformerConfig.cp_comm_type's values.
    Megatron derives data parallel = world / (TP x PP x CP), so the global
    batch is micro x that x micro-batches."""
    flags = _fixture(key_set)["flags"]
    assert (flags["--context-parallel-size"], flags["--cp-comm-type"]) == ("int", "str")
    _, tp, cp, comm, _ = CP_CASES[case]
    result = export_plan(str(cp_plans[case]), "megatron")
    text = {f.name: f.text for f in result.files}["megatron_args.sh"]
    words = _megatron_args(text)
    assert all(w in flags for w in words if w.startswith("--"))
    seen = {w: words[i + 1] for i, w in enumerate(words[:-1]) if flags.get(w) in ("int", "str")}
    assert seen["--context-parallel-size"] == str(cp)
    assert seen["--cp-comm-type"] == comm
    assert seen["--tensor-model-parallel-size"] == str(tp)
    config = json.loads(cp_plans[case].read_text())["configuration"]
    world = config["num_chips"]
    assert world == tp * cp * config["data_parallel"] * config["pipeline_parallel"]
    dp = world // (tp * cp * int(seen["--pipeline-model-parallel-size"]))
    assert dp == config["data_parallel"]
    micro = int(seen["--micro-batch-size"])
    assert micro * dp * config["micro_batches"] == int(seen["--global-batch-size"])
    # validate_args asserts it with tensor or context parallelism (before Blackwell)
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" in text
    assert f"data parallel {dp} = world size / (TP x CP x PP): launch {world} GPUs" in (
        result.assumed
    )


def test_megatron_without_context_parallelism_writes_no_cp_flag() -> None:
    words = _megatron_args(_files(PLAN_1D, "megatron")["megatron_args.sh"])
    assert "--context-parallel-size" not in words and "--cp-comm-type" not in words


@pytest.mark.parametrize("case", ["gpu-p2p", "gpu-all_gather", "gpu-a2a", "gpu-p2p-across-nodes"])
def test_torchtitan_context_parallel_degree(cp_plans: dict[str, Path], case: str) -> None:
    """context_parallel_degree is the plan's, the degrees multiply to the
    world (ParallelDims._validate); only all_gather is torchtitan 0.3.0's
    FlexAttention exchange, p2p and a2a are not-expressed lines."""
    _, _, cp, comm, zero = CP_CASES[case]
    result = export_plan(str(cp_plans[case]), "torchtitan")
    values = _module_constants(result.files[0].text)
    p = values["PARALLELISM"]
    assert p["context_parallel_degree"] == cp
    assert p["context_parallel_load_balancer"] == "headtail"
    config = json.loads(cp_plans[case].read_text())["configuration"]
    degrees = (
        p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
        * p["context_parallel_degree"] * p["tensor_parallel_degree"]
        * p["pipeline_parallel_degree"]
    )  # fmt: skip
    assert degrees == config["num_chips"] == 64
    comm_lines = [n for n in result.not_expressed if n.startswith("context_parallel_comm")]
    assert len(comm_lines) == (comm != "all_gather")
    # FSDP runs over dp_shard x cp whenever context parallelism is on
    assert p["fsdp_reshard_after_forward"] == "never"
    assert any(n.startswith("ZeRO stage 0 with context") for n in result.not_expressed) == (
        zero == 0
    )


def test_torchtitan_without_context_parallelism_stays_at_degree_1() -> None:
    p = _module_constants(_files(PLAN_1D, "torchtitan")["meshtune_torchtitan.py"])["PARALLELISM"]
    assert p["context_parallel_degree"] == 1
    assert "context_parallel_load_balancer" not in p


# case -> (ici_context, dcn_context, strategy, load balance, extra keys)
MAXTEXT_CP = {
    "gpu-p2p": (4, 1, "ring", True, {"hardware": "gpu"}),
    "gpu-all_gather": (4, 1, "all_gather", True, {"hardware": "gpu"}),
    "gpu-a2a": (4, 1, "all_gather", True, {"hardware": "gpu"}),  # Ulysses is TPU-only
    "gpu-p2p-across-nodes": (8, 2, "ring", True, {"hardware": "gpu"}),
    "tpu-p2p": (4, 1, "ring", True, {"attention": "flash", "use_tokamax_splash": True}),
    "tpu-a2a": (4, 1, "ulysses", False, {"attention": "flash", "use_tokamax_splash": True}),
}


@pytest.mark.parametrize("case", list(MAXTEXT_CP))
def test_maxtext_context_parallelism(cp_plans: dict[str, Path], case: str) -> None:
    """ici/dcn_context_parallelism, context_parallel_strategy and
    context_parallel_load_balance against MaxText 0.2.5's base.yml key set
    and the rules of its configs/types.py (tests/trainers/maxtext_check.py
    loads them with MaxText)."""
    known = _fixture("maxtext-base-yml.json")["keys"]
    ici, dcn, strategy, balance, extra = MAXTEXT_CP[case]
    result = export_plan(str(cp_plans[case]), "maxtext")
    config = yaml.safe_load(result.files[0].text)
    assert set(config) - {"base_config"} <= set(known)
    assert (config["ici_context_parallelism"], config["dcn_context_parallelism"]) == (ici, dcn)
    assert config["context_parallel_strategy"] == strategy
    assert config["context_parallel_load_balance"] is balance
    for key, value in extra.items():
        assert config[key] == value, key
    fallback = [n for n in result.not_expressed if n.startswith("context_parallel_comm")]
    assert len(fallback) == (case == "gpu-a2a")
    # every device once: global batch = per-device batch x devices x accumulation
    devices = math.prod(
        v for k, v in config.items() if re.fullmatch(r"(ici|dcn)_\w+_parallelism", k)
    )
    assert devices == json.loads(cp_plans[case].read_text())["configuration"]["num_chips"]
    slices = config.get("num_slices", 1)
    dcn_product = math.prod(v for k, v in config.items() if re.fullmatch(r"dcn_\w+", k))
    assert dcn_product == slices
    accumulation = config.get("gradient_accumulation_steps", 1)
    assert config["per_device_batch_size"] * devices * accumulation == 64


def test_maxtext_without_context_parallelism_writes_no_context_key() -> None:
    config = yaml.safe_load(_files(PLAN_1D, "maxtext")["maxtext.yml"])
    assert not [k for k in config if "context" in k or k == "hardware"]


# case -> parallel_config and model_config keys of the key/value exchange
MINDFORMERS_CP = {
    "gpu-p2p": ({}, {"use_ring_attention": True}),
    "gpu-all_gather": ({}, {}),
    "gpu-a2a": ({"context_parallel_algo": "hybrid_cp", "ulysses_degree_in_cp": 4}, {}),
}


@pytest.mark.parametrize("case", list(MINDFORMERS_CP))
def test_mindformers_context_parallelism(cp_plans: dict[str, Path], case: str) -> None:
    """parallel_config.context_parallel and the exchange: ring attention
    (p2p), MindSpore's gather of whole keys and values (all_gather), the
    Ulysses degree (a2a); tests/trainers/mindformers_check.py loads them."""
    parallel, model = MINDFORMERS_CP[case]
    config = yaml.safe_load(_files(cp_plans[case], "mindformers")["mindformers.yaml"])
    pc = config["parallel_config"]
    assert pc["context_parallel"] == 4 and pc["data_parallel"] == 8
    for key in ("context_parallel_algo", "ulysses_degree_in_cp"):
        assert pc.get(key) == parallel.get(key), key
    mc = config["model"]["model_config"]
    assert mc.get("use_ring_attention") == model.get("use_ring_attention")
    # global batch: batch_size x data_parallel x accumulation (context chips share sequences)
    runner = config["runner_config"]
    assert runner["batch_size"] * pc["data_parallel"] * runner["gradient_accumulation_steps"] == 64


def test_mindformers_without_context_parallelism_leaves_the_templates_1() -> None:
    config = yaml.safe_load(_files(PLAN_1D, "mindformers")["mindformers.yaml"])
    assert "context_parallel" not in config["parallel_config"]
    assert "use_ring_attention" not in config["model"]["model_config"]


def test_jax_export_says_context_parallelism_is_the_users(cp_plans: dict[str, Path]) -> None:
    result = export_plan(str(cp_plans["gpu-p2p"]), "jax")
    (line,) = [n for n in result.not_expressed if n.startswith("context parallel 4")]
    assert "1/4 of every sequence" in line


# -- the JAX module runs -------------------------------------------------------------


@pytest.mark.parametrize("dataflow", ["cost", "always-w"])
def test_jax_module_runs_on_8_cpu_devices(tmp_path: Path, dataflow: str) -> None:
    pytest.importorskip("jax")
    plan = tmp_path / "plan.json"
    proc = _meshtune(
        "plan", str(FIXTURES / "plan_small_2x4.yaml"), "--dataflow", dataflow, "--out", str(plan)
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(plan.read_text())
    gemms = [g for lay in doc["layers"] for g in lay["gemms"]]
    assert any(g["num_slices"] > 1 for g in gemms)
    proc = _meshtune("export", str(plan), "--to", "jax", "--out", str(tmp_path / "jax"))
    assert proc.returncode == 0, proc.stderr
    module = tmp_path / "jax" / "meshslice_plan.py"
    script = (
        # the module asks for its devices before JAX loads, so import it first
        "import json, runpy; ns = runpy.run_path(sys.argv[1]); import jax; "
        "specs = {k: list(v.spec) for k, v in ns['shardings']('qkv').items()}; "
        "print(json.dumps({'devices': len(jax.devices()), 'errors': ns['check'](), "
        "'specs': specs}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run(
        [sys.executable, "-c", "import sys; " + script, str(module)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["devices"] >= 8
    assert set(result["errors"]) == {lay["name"] for lay in doc["layers"]}
    assert max(result["errors"].values()) < 1e-4, result
    qkv = next(lay for lay in doc["layers"] if lay["name"] == "qkv")
    for t in qkv["tensors"]:
        assert result["specs"][t["name"]] == t["partition_spec"]
    # and as a script: exit 0 and one line per layer
    script_run = subprocess.run(
        [sys.executable, str(module)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert script_run.returncode == 0, script_run.stderr
    assert len(script_run.stdout.splitlines()) == len(doc["layers"])


def test_jax_module_partition_specs_match_the_plan() -> None:
    pytest.importorskip("jax")
    text = export_plan(str(PLAN_2D), "jax").files[0].text
    plan = json.loads(PLAN_2D.read_text())
    for layer in plan["layers"]:
        for t in layer["tensors"]:
            spec = ", ".join(json.dumps(a) for a in t["partition_spec"])
            assert f'"{t["name"]}": ({spec})' in text
    assert "MESH_SHAPE = (4, 64)" in text and "BLOCK_SIZE = 8" in text


# -- bad input ------------------------------------------------------------------------

BAD = [
    ("notjson.json", "{oops", "is not valid JSON"),
    ("array.json", "[]", "must be a JSON object, but it is a list"),
    ("other.json", json.dumps({"schema": "meshtune.compare/1"}),
     "schema: got 'meshtune.compare/1'; is not a meshtune.plan/3 document"),
    ("old.json", json.dumps({"schema": "meshtune.plan/1"}),
     "schema: got 'meshtune.plan/1'; is a document of an older meshtune; export reads "
     "meshtune.plan/3"),
    ("v2.json", json.dumps({"schema": "meshtune.plan/2"}),
     "schema: got 'meshtune.plan/2'; is a document of an older meshtune; export reads "
     "meshtune.plan/3, which holds the whole plan (searched or pinned); fix: re-run `meshtune "
     "plan PLAN.yaml --out PLAN.json`"),
    ("search.json", json.dumps({"schema": "meshtune.job-search/1"}),
     "schema: got 'meshtune.job-search/1'; is a document of an older meshtune"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_plan_files_exit_2(tmp_path: Path, name: str, text: str, expected: str) -> None:
    (tmp_path / name).write_text(text)
    proc = _meshtune("export", str(tmp_path / name), "--to", "jax", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert expected in line and name in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key", ["mesh", "layers", "provenance", "configuration", "pipeline"])
def test_missing_key_exits_2(tmp_path: Path, key: str) -> None:
    doc = json.loads(PLAN_2D.read_text())
    del doc[key]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    proc = _meshtune("export", str(tmp_path / "plan.json"), "--to", "maxtext")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert f"plan.json: {key}: is required" in line


def test_missing_nested_model_key_exits_2(tmp_path: Path) -> None:
    doc = json.loads(PLAN_2D.read_text())
    del doc["provenance"]["model"]["hidden_size"]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    proc = _meshtune("export", str(tmp_path / "plan.json"), "--to", "maxtext")
    assert proc.returncode == 2
    assert "provenance.model.hidden_size: is required" in proc.stderr


def test_targets_registered() -> None:
    from autotune.cli import SUBCOMMANDS

    assert SUBCOMMANDS["export"] == "autotune.cli.export:export"
    assert set(TARGETS) == {"jax", "maxtext", "megatron", "torchtitan", "mindformers"}


def test_jax_export_lists_planned_transposes(tmp_path: Path) -> None:
    doc = json.loads(PLAN_2D.read_text())
    doc["fc"]["transposes"] = [{"where": "ffn_down -> residual", "rows": 262144, "cols": 12288}]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = export_plan(str(plan), "jax")
    (line,) = [n for n in result.not_expressed if n.startswith("transpose at")]
    assert "ffn_down -> residual (262144 x 12288" in line
    assert f"not expressed: {line}" in result.files[0].text


def test_hugging_face_model_through_plan_and_export(tmp_path: Path) -> None:
    config = {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "tie_word_embeddings": False,
    }  # fmt: skip
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(config))
    plan = tmp_path / "plan.json"
    proc = _meshtune(
        "plan", "examples/gpt3.yaml", "--model", str(tmp_path / "llama" / "config.json"),
        "--out", str(plan),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    settings = yaml.safe_load(export_plan(str(plan), "maxtext").files[0].text)
    assert settings["base_num_kv_heads"] == 8 and settings["base_mlp_dim"] == 14336
    assert settings["mlp_activations"] == ["silu", "linear"]
    assert settings["logits_via_embedding"] is False


FP8_RECIPES = {
    "delayed": "delayed",
    "current": "tensorwise",
    "mxfp8": "mxfp8",
    "blockwise": "blockwise",
}


def fp8_plan_file(folder: Path, recipe: str, param_gather: bool = False) -> Path:
    """`meshtune plan --out` of the Llama-3-8B shape on 2 B200 nodes with an FP8 recipe."""
    from click.testing import CliRunner

    from autotune.cli import main

    spec = {
        "model": CP_MODEL,
        "training": {
            "global_batch_sequences": 64, "sequence_length": 8192, "tensor_parallel": 2,
            "context_parallel": 1, "pipeline_parallel": 1, "micro_batch_size": 1,
            "recompute": "selective", "zero_stage": 1, "fc_algorithm": "megatron-1d",
            "fp8": recipe, "fp8_param_gather": param_gather,
        },
        "cluster": "b200-hgx-2n",
    }  # fmt: skip
    source, plan = folder / f"fp8-{recipe}.yaml", folder / f"fp8-{recipe}.json"
    source.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["plan", str(source), "--out", str(plan)])
    assert result.exit_code == 0, result.output
    assert json.loads(plan.read_text())["configuration"]["fp8"] == recipe
    return plan


@pytest.mark.parametrize("recipe", sorted(FP8_RECIPES))
def test_fp8_recipe_in_every_export(tmp_path: Path, recipe: str) -> None:
    plan = fp8_plan_file(tmp_path, recipe, param_gather=recipe == "delayed")
    megatron = "\n".join(_files(plan, "megatron").values())
    assert "--fp8-format hybrid" in megatron
    assert f"--fp8-recipe {FP8_RECIPES[recipe]}" in megatron
    assert ("--fp8-param-gather" in megatron) == (recipe == "delayed")
    maxtext = "\n".join(_files(plan, "maxtext").values())
    if recipe == "delayed":
        assert 'quantization: "fp8"' in maxtext
    else:
        assert "quantization:" not in maxtext and f"not expressed: fp8 {recipe}" in maxtext
    for target in ("torchtitan", "mindformers"):
        text = "\n".join(_files(plan, target).values())
        assert f"not expressed: fp8 {recipe}" in text, target


def test_no_fp8_writes_no_fp8_flags(tmp_path: Path) -> None:
    plan = fp8_plan_file(tmp_path, "none")
    assert "--fp8" not in "\n".join(_files(plan, "megatron").values())
    assert "quantization" not in "\n".join(_files(plan, "maxtext").values())
