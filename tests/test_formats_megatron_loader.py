"""Megatron-LM export: regression tests named after what its own argument
validation rejected or set wrongly (NVIDIA/Megatron-LM at the cited commit
d98e8a64: `megatron/training/arguments.py` validate_args and
`megatron/core/transformer/pipeline_parallel_layer_layout.py`), and the key
sets: the argument parser's at d98e8a64 (`tests/trainers/megatron_check.py
flags`) and 000c4ac2's, extracted by
tests/fixtures/formats/make_megatron_arguments.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from autotune.formats.export import export_plan
from autotune.loading import load_model_spec
from autotune.specs.model import PositionEncoding

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "formats"
PLAN_1D = FIXTURES / "plan_gpt3_1d_tp8.json"


def _export(tmp_path: Path, doc: dict) -> tuple[dict[str, str], tuple[str, ...]]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    result = export_plan(str(path), "megatron")
    return {f.name: f.text for f in result.files}, tuple(result.not_expressed)


def _args(text: str) -> dict[str, str | None]:
    body = re.search(r"^MEGATRON_ARGS=\(\n(.*?)^\)$", text, re.S | re.M)
    assert body
    out: dict[str, str | None] = {}
    for line in body.group(1).splitlines():
        flag, _, value = line.strip().partition(" ")
        out[flag] = value or None
    return out


def _with_split(per_chunk: list[list[int]]) -> dict:
    doc = json.loads(PLAN_1D.read_text())
    for stage, chunks in zip(doc["pipeline"]["stages"], per_chunk, strict=True):
        stage["layers_per_chunk"] = chunks
        stage["layers"] = sum(chunks)
    return doc


def test_megatron_validate_args_needs_cuda_device_max_connections_with_tp(tmp_path):
    files, _ = _export(tmp_path, json.loads(PLAN_1D.read_text()))
    script = files["megatron_args.sh"]
    assert re.search(r"^export CUDA_DEVICE_MAX_CONNECTIONS=1$", script, re.M)
    # set before the arguments are used
    assert script.index("CUDA_DEVICE_MAX_CONNECTIONS") < script.index("MEGATRON_ARGS=(")


def test_megatron_uneven_pipeline_split_fails_validation_without_the_layout(tmp_path):
    # 96 layers on 8 ranks x 2 chunks, first rank 10, last 14: Megatron's even
    # split would build 6 per chunk; the layout gives every chunk its count
    split = [[5, 5]] + [[6, 6]] * 6 + [[7, 7]]
    files, dropped = _export(tmp_path, _with_split(split))
    args = _args(files["megatron_args.sh"])
    layout = "Et*5|" + "t*6|" * 6 + "t*7|t*5|" + "t*6|" * 6 + "t*7L"
    assert args["--pipeline-model-parallel-layout"] == f"'{layout}'"
    # validate_args refuses the virtual-stage flag beside a layout
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    assert not any("layer split" in line for line in dropped)


def test_megatron_32_layers_on_3_stages_get_a_layout_megatron_accepts(tmp_path):
    """The reported case: 32 layers on 3 stages failed validate_args (32 is
    not divisible by 3) with neither flags nor a note (regression)."""
    doc = json.loads(PLAN_1D.read_text())
    doc["configuration"].update(pipeline_parallel=3, interleave=1)
    doc["provenance"]["model"]["num_layers"] = 32
    doc["pipeline"]["stages"] = [
        {"stage": s, "layers": n, "layers_per_chunk": [n], "recompute": {"full": n}}
        for s, n in enumerate([10, 11, 11])
    ]
    files, dropped = _export(tmp_path, doc)
    args = _args(files["megatron_args.sh"])
    assert args["--pipeline-model-parallel-layout"] == "'Et*10|t*11|t*11L'"
    assert args["--num-layers"] == "32"
    assert not any(line.startswith("layer split") for line in dropped)


@pytest.mark.parametrize(("zero", "strategy"), [(2, "optim_grads"), (3, "optim_grads_params")])
def test_megatron_zero_2_and_3_run_as_megatron_fsdp_without_pipeline_stages(
    tmp_path, zero, strategy
):
    """ZeRO-2 / 3 became "not expressed" (the distributed optimizer shards
    the optimizer state only); without pipeline stages they are
    Megatron-FSDP's optim_grads / optim_grads_params, with the fsdp_dtensor
    checkpoints validate_args requires and CUDA_DEVICE_MAX_CONNECTIONS unset
    (it asserts the variable is not 1 under Megatron-FSDP)."""
    doc = json.loads(PLAN_1D.read_text())
    layers = doc["provenance"]["model"]["num_layers"]
    doc["configuration"].update(pipeline_parallel=1, interleave=1, zero_stage=zero)
    doc["pipeline"]["stages"] = [
        {"stage": 0, "layers": layers, "layers_per_chunk": [layers], "recompute": {"full": layers}}
    ]
    files, dropped = _export(tmp_path, doc)
    script = files["megatron_args.sh"]
    args = _args(script)
    assert "--use-megatron-fsdp" in args and "--use-distributed-optimizer" in args
    assert args["--data-parallel-sharding-strategy"] == strategy
    assert args["--ckpt-format"] == "fsdp_dtensor"
    assert re.search(r"^unset CUDA_DEVICE_MAX_CONNECTIONS$", script, re.M)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" not in script
    assert not any(line.startswith("ZeRO stage") for line in dropped)
    # with pipeline stages Megatron-FSDP is not an option: ZeRO-1, noted
    piped = json.loads(PLAN_1D.read_text())
    piped["configuration"]["zero_stage"] = zero
    files, dropped = _export(tmp_path, piped)
    args = _args(files["megatron_args.sh"])
    assert "--use-megatron-fsdp" not in args and "--use-distributed-optimizer" in args
    assert any(line.startswith(f"ZeRO stage {zero} with pipeline parallelism") for line in dropped)
    assert re.search(r"^export CUDA_DEVICE_MAX_CONNECTIONS=1$", files["megatron_args.sh"], re.M)


def test_megatron_overlaps_the_data_parallel_collectives_as_priced(tmp_path):
    """The plan prices gradient reductions and weight gathers overlapped
    (overlap_data_parallel, the default); Megatron-LM overlaps them only
    with --overlap-grad-reduce and --overlap-param-gather (the latter needs
    the distributed optimizer), and the export wrote neither (regression)."""
    doc = json.loads(PLAN_1D.read_text())
    assert doc["configuration"]["zero_stage"] == 1 and doc["configuration"]["data_parallel"] > 1
    args = _args(_export(tmp_path, doc)[0]["megatron_args.sh"])
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" in args
    no_zero = copy.deepcopy(doc)
    no_zero["configuration"]["zero_stage"] = 0
    args = _args(_export(tmp_path, no_zero)[0]["megatron_args.sh"])
    assert "--overlap-grad-reduce" in args and "--overlap-param-gather" not in args
    blocking = copy.deepcopy(doc)
    blocking["provenance"]["training"]["overlap_data_parallel"] = False  # as the file gave it
    args = _args(_export(tmp_path, blocking)[0]["megatron_args.sh"])
    assert "--overlap-grad-reduce" not in args and "--overlap-param-gather" not in args


def test_megatron_layout_places_the_mtp_layers_before_the_loss(tmp_path):
    """The DeepSeek-V3 example's balanced split failed validate_layer_layout
    ("Number of mtp layers in layout must match mtp_num_layers"): a layout
    must carry an `m` per multi-token-prediction layer, in the last virtual
    stage after its blocks, where the plan prices them (regression)."""
    doc = _with_split([[5, 5]] + [[6, 6]] * 6 + [[7, 7]])
    doc["provenance"]["model"]["mtp_layers"] = 2
    args = _args(_export(tmp_path, doc)[0]["megatron_args.sh"])
    layout = args["--pipeline-model-parallel-layout"].strip("'")
    assert layout.endswith("|t*7mmL") and layout.count("m") == 2
    assert args["--mtp-num-layers"] == "2"


def test_megatron_layout_orders_chunks_as_virtual_stages(tmp_path):
    # a middle rank differs and chunks within a rank differ: chunk j of rank
    # s is virtual stage j * pp + s
    split = [[6, 6], [5, 6]] + [[6, 6]] * 5 + [[6, 7]]
    files, _ = _export(tmp_path, _with_split(split))
    layout = _args(files["megatron_args.sh"])["--pipeline-model-parallel-layout"].strip("'")
    stages = layout.split("|")
    assert len(stages) == 16
    assert stages[0] == "Et*6" and stages[1] == "t*5" and stages[15] == "t*7L"
    assert sum(s.count("t") and int(s.strip("EL").removeprefix("t*")) for s in stages) == 96


def test_megatron_equal_ranks_with_unequal_chunks_get_the_layout(tmp_path):
    # every rank 12 layers, but the chunks 5 + 7: Megatron's even split would
    # build 6 + 6 without a word
    split = [[5, 7]] * 8
    args = _args(_export(tmp_path, _with_split(split))[0]["megatron_args.sh"])
    assert "--pipeline-model-parallel-layout" in args


def test_megatron_even_split_writes_no_split_flags(tmp_path):
    args = _args(_export(tmp_path, json.loads(PLAN_1D.read_text()))[0]["megatron_args.sh"])
    assert "--pipeline-model-parallel-layout" not in args
    assert args["--num-virtual-stages-per-pipeline-rank"] == "2"


def test_megatron_rotary_model_gets_position_embedding_type_rope(tmp_path):
    doc = json.loads(PLAN_1D.read_text())
    assert "--position-embedding-type" not in _args(_export(tmp_path, doc)[0]["megatron_args.sh"])
    rotary = copy.deepcopy(doc)
    rotary["provenance"]["model"]["position_encoding"] = "rotary"
    args = _args(_export(tmp_path, rotary)[0]["megatron_args.sh"])
    assert args["--position-embedding-type"] == "rope"


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [("llama", PositionEncoding.ROTARY), ("qwen3", PositionEncoding.ROTARY),
     ("gpt2", PositionEncoding.LEARNED)],
)  # fmt: skip
def test_hf_reader_maps_a_llama_config_to_rotary(tmp_path, model_type, expected):
    config = {
        "model_type": model_type,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "num_key_value_heads": 8,
        "vocab_size": 1000,
        "n_layer": 2,
        "n_embd": 512,
        "n_head": 8,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert load_model_spec(path).position_encoding is expected


def test_userbuffers_dgrad_pipeline_needs_tp_comm_overlap_rs_dgrad(tmp_path):
    files, _ = _export(tmp_path, json.loads(PLAN_1D.read_text()))
    cfg = files["tp_comm_overlap_cfg.yaml"]
    split_dgrad = re.search(r"^(qkv|fc1)_dgrad:\n  method: pipeline$", cfg, re.M)
    assert split_dgrad, cfg
    assert "--tp-comm-overlap-rs-dgrad" in _args(files["megatron_args.sh"])


def test_megatron_key_set_is_extracted_from_the_cited_commit():
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        from make_megatron_arguments import COMMIT, flags_of
    finally:
        sys.path.remove(str(FIXTURES))
    doc = json.loads((FIXTURES / "megatron-arguments-000c4ac2.json").read_text())
    assert COMMIT in doc["source"]
    assert len(doc["flags"]) > 500  # the whole file, not a hand-picked subset
    sample = (
        "def f(group):\n"
        "    group.add_argument('--a-flag', action='store_true')\n"
        "    group.add_argument('--size', '--alias-size', type=int, default=1)\n"
        "    group.add_argument('--name', type=str)\n"
        "    group.add_argument('--ratio', type=float)\n"
    )
    assert flags_of(sample) == {
        "--a-flag": "flag",
        "--alias-size": "int",
        "--name": "str",
        "--ratio": "float",
        "--size": "int",
    }
