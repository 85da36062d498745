"""Hugging Face config.json as a model spec: mapping, refusals, and round
trips through configs written by `transformers` itself, whose own parameter
count (models built on PyTorch's meta device: shapes only, no memory) the
spec must match within 0.5%."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from planning import transformers_and_torch

from autotune.errors import InputError
from autotune.hf_config import parameter_count
from autotune.loading import load_model_spec, load_plan_input
from autotune.specs.model import FfnKind

REPO = Path(__file__).resolve().parent.parent


def _meshtune(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


LLAMA_3_8B = {
    # meta-llama/Meta-Llama-3-8B config.json (model card: 8.03B parameters)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def test_llama_fields_by_hand(tmp_path: Path) -> None:
    spec = load_model_spec(_write(tmp_path / "llama-3-8b" / "config.json", LLAMA_3_8B))
    assert spec.name == "llama-3-8b"
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.kv_heads) == (32, 4096, 32, 8)
    assert (spec.head_dim, spec.ffn_size, spec.ffn_kind) == (128, 14336, FfnKind.SWIGLU)
    assert (spec.vocab_size, spec.tied_embeddings) == (128256, False)
    # 32 * (4096*(32+16)*128 + 4096*4096 + 3*4096*14336) + 2*128256*4096
    assert (
        parameter_count(spec)
        == 32 * (4096 * 48 * 128 + 4096 * 4096 + 3 * 4096 * 14336) + 2 * 128256 * 4096
    )


def test_gpt2_defaults_by_hand(tmp_path: Path) -> None:
    data = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
    spec = load_model_spec(_write(tmp_path / "gpt2.json", data))
    # GPT2Block: inner width n_inner, or 4 * n_embd when null; heads n_embd / n_head
    assert (spec.ffn_size, spec.head_dim, spec.ffn_kind) == (3072, 64, FfnKind.GELU)
    # GPT2Config's class default ties the embeddings
    assert spec.tied_embeddings is True
    assert spec.name == "gpt2"


def test_architectures_without_model_type(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA_3_8B.items() if k != "model_type"}
    assert load_model_spec(_write(tmp_path / "config.json", data)).kv_heads == 8


def test_plan_file_model_path_is_relative_to_plan(tmp_path: Path) -> None:
    _write(tmp_path / "models" / "llama" / "config.json", LLAMA_3_8B)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: models/llama/config.json\n"
        "training: {global_batch_sequences: 64, sequence_length: 2048}\n"
    )
    inp = load_plan_input(plan)
    assert inp.model.name == "llama" and inp.model.ffn_size == 14336


def test_spec_without_tied_field_dumps_as_before() -> None:
    spec = load_model_spec("gpt3-175b")
    assert "tied_embeddings" not in spec.model_dump(mode="json")


BAD = [
    ("notjson.json", "{not json", "is not valid JSON"),
    ("list.json", "[1, 2]", "must be a JSON object, but it is a list"),
    ("moe.json", json.dumps({**LLAMA_3_8B, "model_type": "mixtral", "num_local_experts": 8}),
     "num_experts_per_tok: is required"),
    ("topk.json", json.dumps({**LLAMA_3_8B, "model_type": "mixtral", "num_local_experts": 8,
                              "num_experts_per_tok": 9}),
     "experts_per_token (9) exceeds num_experts (8)"),
    ("olmoe.json", json.dumps({**LLAMA_3_8B, "model_type": "olmoe", "num_experts": 64}),
     "num_experts: got 64; marks a mixture of experts in a 'olmoe' config"),
    ("dbrx.json", json.dumps({"model_type": "dbrx", "d_model": 6144}),
     "model_type: got 'dbrx'; is a mixture-of-experts family whose layout meshtune does not"),
    ("sparse.json", json.dumps({**LLAMA_3_8B, "model_type": "qwen3_moe", "num_experts": 128,
                                "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                                "mlp_only_layers": [3]}),
     "mlp_only_layers: got [3]; is mapped only as the leading blocks"),
    ("mla.json", json.dumps({**LLAMA_3_8B, "kv_lora_rank": 512}),
     "kv_lora_rank: got 512; multi-head latent attention is read only"),
    ("falcon.json", json.dumps({"model_type": "falcon", "hidden_size": 4544}),
     "model_type: got 'falcon'; is not an architecture meshtune maps"),
    ("untyped.json", json.dumps({"hidden_size": 4096}), "model_type: is required"),
    ("missing.json", json.dumps({k: v for k, v in LLAMA_3_8B.items() if k != "vocab_size"}),
     "vocab_size: is required"),
    ("badvalue.json", json.dumps({**LLAMA_3_8B, "num_hidden_layers": "32"}),
     "num_hidden_layers: got '32'; must be a whole number from 1 to 100000"),
    ("heads.json", json.dumps({**LLAMA_3_8B, "num_key_value_heads": 5}),
     "must be a multiple of num_kv_heads"),
    ("qwenwindow.json", json.dumps({**LLAMA_3_8B, "model_type": "qwen3", "sliding_window": 4096,
                                    "use_sliding_window": True, "max_window_layers": 28}),
     "use_sliding_window: got true; windows only the blocks from max_window_layers on"),
    ("mixedwindow.json", json.dumps({**LLAMA_3_8B, "model_type": "mistral", "sliding_window": 4096,
                                     "layer_types": ["full_attention"] * 2
                                     + ["sliding_attention"] * 30}),
     "layer_types: got 'full attention at blocks 1, 2'; mixes sliding and full attention"),
    ("shortwindow.json", json.dumps({**LLAMA_3_8B, "model_type": "gemma2", "sliding_window": 4096,
                                     "layer_types": ["full_attention"] * 3}),
     "layer_types: got ['full_attention', 'full_attention', 'full_attention']; must list one"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_configs_exit_2_with_one_line(tmp_path: Path, name: str, text: str, expected: str):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError) as err:
        load_model_spec(tmp_path / name)
    assert expected in err.value.one_line()
    proc = _meshtune("plan", "examples/gpt3.yaml", "--model", str(tmp_path / name))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and name in lines[0]


def test_missing_config_file_exits_2() -> None:
    proc = _meshtune("plan", "examples/gpt3.yaml", "--model", "no/such/config.json")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "meshtune: error: --model: got 'no/such/config.json'; no such file; "
        "fix: check the config.json path"
    )


# -- round trips through transformers ----------------------------------------

# Published dimensions (each model's hub config.json) given to the
# transformers config class of its family; the class writes the file.
ROUND_TRIPS = {
    "llama-3-8b": ("LlamaConfig", {k: v for k, v in LLAMA_3_8B.items() if "_" in k}),
    "mistral-7b": ("MistralConfig", dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_hidden_layers=32, num_key_value_heads=8, vocab_size=32000)),
    "qwen2-7b": ("Qwen2Config", dict(
        hidden_size=3584, intermediate_size=18944, num_attention_heads=28,
        num_hidden_layers=28, num_key_value_heads=4, vocab_size=152064,
        tie_word_embeddings=False)),
    "qwen3-8b": ("Qwen3Config", dict(
        hidden_size=4096, intermediate_size=12288, num_attention_heads=32, head_dim=128,
        num_hidden_layers=36, num_key_value_heads=8, vocab_size=151936,
        tie_word_embeddings=False)),
    "gemma-7b": ("GemmaConfig", dict(
        hidden_size=3072, intermediate_size=24576, num_attention_heads=16, head_dim=256,
        num_hidden_layers=28, num_key_value_heads=16, vocab_size=256000)),
    "pythia-1.4b": ("GPTNeoXConfig", dict(
        hidden_size=2048, intermediate_size=8192, num_attention_heads=16,
        num_hidden_layers=24, vocab_size=50304)),
    "gpt2-medium": ("GPT2Config", dict(n_embd=1024, n_head=16, n_layer=24, vocab_size=50257)),
}  # fmt: skip


_library = transformers_and_torch


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_transformers_config_round_trip(tmp_path: Path, name: str) -> None:
    transformers, torch = _library()
    cls_name, kwargs = ROUND_TRIPS[name]
    config = getattr(transformers, cls_name)(**kwargs)
    folder = tmp_path / name
    config.save_pretrained(folder)
    spec = load_model_spec(folder / "config.json")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    library = model.num_parameters()
    ours = parameter_count(spec)
    assert abs(ours - library) / library < 0.005, (name, ours, library)
    assert spec.name == name
    assert spec.tied_embeddings == config.tie_word_embeddings


def test_transformers_config_plans(tmp_path: Path) -> None:
    transformers, _ = _library()
    transformers.Qwen3Config(**ROUND_TRIPS["qwen3-8b"][1]).save_pretrained(tmp_path / "q")
    proc = _meshtune(
        "plan", "examples/gpt3.yaml", "--model", str(tmp_path / "q" / "config.json"),
        "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)["provenance"]["model"]
    assert model["head_dim"] == 128 and model["num_kv_heads"] == 8
    assert model["ffn_kind"] == "swiglu" and model["tied_embeddings"] is False


def test_compare_takes_a_config_json(tmp_path: Path) -> None:
    path = _write(tmp_path / "llama-3-8b" / "config.json", LLAMA_3_8B)
    proc = _meshtune(
        "compare", "examples/gpt3.yaml", "--model", str(path), "--chips", "16", "--format", "json"
    )
    assert proc.returncode == 0, proc.stderr
    assert "llama-3-8b" in proc.stdout
