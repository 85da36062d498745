"""Predicted peak memory against the peak allocated memory Megatron-LM's own
regression tests measure (tests/fixtures/measured_memory/README.md cites
the commit and says what the numbers are).

Each golden file of a dense GPT test case (and of a MoE one, the second
test) records
`torch.cuda.max_memory_allocated()` of the last rank (the last pipeline
stage) over its first iterations. meshtune plans the same configuration,
pinned, and its last stage's weights, gradients, optimizer state,
activations and buffers are compared with it; the framework workspace and
the allocator reserve (`workspace_gib`, `memory_reserve_fraction`) are not
allocated tensors and are set to zero here (the plan states them beside the
total). Nothing here was fitted to these numbers.

Run `python -m pytest tests/test_memory_measured.py -s` to see every row;
docs/accuracy.md ("Memory") keeps the table's summary.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from pathlib import Path

import yaml
from planning import pinned, plan_for

FIXTURE = Path(__file__).parent / "fixtures" / "measured_memory" / "megatron_functional_dense.yaml"
CLUSTERS = Path(__file__).parents[1] / "autotune" / "presets" / "clusters"
#: the target (issue: median error within 10%) and the record of the largest
MEDIAN_MAX = 0.10
#: the MoE cases' record (docs/accuracy.md "Memory"): median and largest
#: |error| (4.9%, 23%), so a change that makes them worse fails
MOE_RECORD = (0.06, 0.24)
#: machine in the golden file name -> cluster preset whose chip it is; a
#: GB200 test node holds 4 GPUs (the recipes' GPUS_PER_NODE), priced with
#: the b200 chip (the memory model does not use the interconnect)
MACHINES = {
    "h100": ("h100-hgx.yaml", 8),
    "a100": ("a100-hgx.yaml", 8),
    "gb200": ("b200-hgx.yaml", 4),
}


def out_of_scope(entry: dict) -> str | None:
    """Why meshtune cannot price this test case's memory as it ran, or None."""
    m, p, pr = entry["model"], entry["parallel"], entry["precision"]
    f, name = entry["memory_relevant_flags"], entry["name"]
    b = entry["batch"]
    if not p["world_size"]:
        return "GPU count unknown (no recipe row at this commit)"
    if entry.get("identical_golden_series_in"):
        return "golden series copied from another test case"
    if p["context_parallel_size"] != 1:
        return "context parallelism (not modelled)"
    if pr["fp8_format"] or not pr["bf16"]:
        return "not bf16 (fp8 or fp16 recipe)"
    if f["fine_grained_activation_offloading"] or f["cuda_graph_impl"]:
        return "activation offloading or CUDA graphs"
    if p["use_megatron_fsdp"] or p["use_torch_fsdp2"]:
        return "FSDP"
    if _uneven(entry) and megatron_layout(entry) is None:
        return "uneven pipeline split"
    moe = m.get("moe")
    if f.get("optimizer") not in (None, "adam"):
        return f"optimizer {f['optimizer']} (its state is not Adam's)"
    if moe and moe["moe_router_load_balancing_type"] == "sinkhorn":
        return "sinkhorn router (not modelled)"
    if "distill" in name:
        return "knowledge distillation (a teacher model is in memory too)"
    if not (m.get("padded_vocab_size") or m.get("padded_vocab_size_if_gpt2_50257")):
        return "vocabulary unknown"
    pp = p["pipeline_model_parallel_size"]
    micro = b["global_batch_size"] // (b["micro_batch_size"] * p["data_parallel"])
    if _interleave(entry) > 1 and micro % pp:
        return "interleaving with micro-batches not a multiple of the stages (refused)"
    return None


def _uneven(entry: dict) -> bool:
    p = entry["parallel"]
    return bool(
        p["pipeline_model_parallel_layout"]
        or p["decoder_first_pipeline_num_layers"]
        or p["decoder_last_pipeline_num_layers"]
        or p["account_for_embedding_in_pipeline_split"]
        or p["account_for_loss_in_pipeline_split"]
    )


def megatron_layout(entry: dict) -> str | None:
    """The test case's uneven split as Megatron-LM's layout string (pinned
    as `training.pipeline_layout`), or None for an even split or one this
    does not translate. Megatron-LM's rules (d98e8a64
    `megatron/core/transformer/transformer_config.py`, the
    `--decoder-first/last-pipeline-num-layers` and
    `--account-for-embedding/loss-in-pipeline-split` help):

    - first and last stage sizes: the other blocks split evenly over the
      middle stages (no interleaving);
    - embedding and loss counted as one block each: the blocks and the two
      ends split evenly over every virtual stage, the embedding alone at the
      start of the first, the loss at the end of the last.
    """
    p, m = entry["parallel"], entry["model"]
    if p["pipeline_model_parallel_layout"]:
        return str(p["pipeline_model_parallel_layout"])
    layers, pp, v = m["num_layers"], p["pipeline_model_parallel_size"], _interleave(entry)
    first, last = p["decoder_first_pipeline_num_layers"], p["decoder_last_pipeline_num_layers"]
    if (first or last) and v == 1 and pp > 2:
        first, last = first or 0, last or 0
        middle, rest = divmod(layers - first - last, pp - 2)
        if rest:
            return None
        counts = [first] + [middle] * (pp - 2) + [last]
    elif p["account_for_embedding_in_pipeline_split"] or p["account_for_loss_in_pipeline_split"]:
        emb = int(bool(p["account_for_embedding_in_pipeline_split"]))
        loss = int(bool(p["account_for_loss_in_pipeline_split"]))
        per, rest = divmod(layers + emb + loss, pp * v)
        if rest:
            return None
        counts = [per] * (pp * v)
        counts[0] -= emb
        counts[-1] -= loss
    else:
        return None
    stages = ["t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] += "L"
    return "|".join(stages)


def _moe_fields(m: dict) -> dict:
    """A MoE test model's `moe`, `mla` and `mtp_layers` spec fields (none
    for a dense one): Megatron-LM's `--moe-ffn-hidden-size` (default the
    FFN's), `--moe-layer-freq` as leading dense blocks, its shared experts,
    MLA's ranks and head widths."""
    moe = m.get("moe")
    if not moe:
        return {}
    freq = moe.get("moe_layer_freq")
    first_dense = 0
    if freq:
        found = re.fullmatch(r"\(\[0\]\*(\d+)\+\[1\]\*(\d+)\)", str(freq))
        assert found, freq
        first_dense = int(found.group(1))
    out: dict = {
        "moe": {
            "num_experts": moe["num_experts"],
            "experts_per_token": moe["moe_router_topk"],
            "expert_ffn_size": moe["moe_ffn_hidden_size"] or m["ffn_hidden_size"],
            "shared_expert_ffn_size": moe.get("moe_shared_expert_intermediate_size") or 0,
            "first_dense_layers": first_dense,
        }
    }
    mla = m.get("mla")
    if mla:
        out["mla"] = {
            "q_lora_rank": mla["q_lora_rank"],
            "kv_lora_rank": mla["kv_lora_rank"],
            "qk_nope_head_dim": mla["qk_head_dim"],
            "qk_rope_head_dim": mla["qk_pos_emb_head_dim"],
            "v_head_dim": mla["v_head_dim"],
        }
        out["head_dim"] = mla["qk_head_dim"] + mla["qk_pos_emb_head_dim"]
        out["num_kv_heads"] = m["num_attention_heads"]
    if m.get("mtp_num_layers"):
        out["mtp_layers"] = m["mtp_num_layers"]
    return out


def _expert_training(entry: dict) -> dict:
    """A MoE test case's expert degrees, dispatcher and overlap."""
    moe = entry["model"].get("moe")
    if not moe:
        return {}
    p = entry["parallel"]
    return {
        "expert_parallel": p["expert_model_parallel_size"],
        "expert_tensor_parallel": p["expert_tensor_parallel_size"],
        # Megatron-LM's default dispatcher is allgather (transformer_config.py
        # line 891 at d98e8a64); flex is the deepep backend
        "expert_dispatcher": {"flex": "deepep", "alltoall": "alltoall"}.get(
            moe["moe_token_dispatcher_type"], "allgather"
        ),
        "overlap_expert_comm": bool(moe.get("overlap_moe_expert_parallel_comm")),
    }


def _interleave(entry: dict) -> int:
    """Virtual stages per pipeline rank."""
    m, p = entry["model"], entry["parallel"]
    if p["num_virtual_stages_per_pipeline_rank"]:
        return int(p["num_virtual_stages_per_pipeline_rank"])
    if p["num_layers_per_virtual_pipeline_stage"]:
        per_rank = m["num_layers"] // p["pipeline_model_parallel_size"]
        return per_rank // int(p["num_layers_per_virtual_pipeline_stage"])
    return 1


def _cluster(entry: dict) -> dict:
    """The bundled node preset of the test's machine, sized to its GPUs."""
    preset, per_node = MACHINES[entry["machine"]]
    spec = yaml.safe_load((CLUSTERS / preset).read_text())
    world = int(entry["parallel"]["world_size"])
    spec["num_chips"] = world
    spec["node"]["chips_per_node"] = min(per_node, world)
    spec["scale_out"]["rails"] = min(per_node, world)
    return spec


def predict(tmp: Path, entry: dict) -> dict[str, float]:
    """The last pipeline stage's memory by part, bytes, for the test case's
    configuration pinned (Megatron-LM's 1D tensor parallelism, its even
    split or its uneven one as a layout, fp32 main gradients, the
    distributed optimizer as ZeRO-1)."""
    m, p, b, r, f = (
        entry["model"],
        entry["parallel"],
        entry["batch"],
        entry["recompute"],
        entry["memory_relevant_flags"],
    )
    heads = m["num_attention_heads"]
    model = {
        "name": entry["name"][:60],
        "num_layers": m["num_layers"],
        "hidden_size": m["hidden_size"],
        "num_heads": heads,
        "num_kv_heads": m["num_query_groups"] or heads,
        "head_dim": m["kv_channels"] or m["hidden_size"] // heads,
        "ffn_size": m["ffn_hidden_size"],
        "ffn_kind": "swiglu" if m["swiglu"] else "gelu",
        "vocab_size": m.get("padded_vocab_size") or m["padded_vocab_size_if_gpt2_50257"],
        "position_encoding": "rotary" if m["position_embedding_type"] == "rope" else "learned",
        "tied_embeddings": not m["untie_embeddings_and_output_weights"],
        **_moe_fields(m),
    }
    dp = int(p["data_parallel"])
    training = {
        "global_batch_sequences": b["global_batch_size"],
        "sequence_length": m["seq_length"],
        "micro_batch_size": b["micro_batch_size"],
        "tensor_parallel": p["tensor_model_parallel_size"],
        "pipeline_parallel": p["pipeline_model_parallel_size"],
        "data_parallel": dp,
        "interleave": _interleave(entry),
        "recompute": {"full": "full", "selective": "selective"}.get(
            r["recompute_granularity"], "none"
        ),
        "zero_stage": 1 if p["use_distributed_optimizer"] and dp > 1 else 0,
        "fc_algorithm": "megatron-1d",
        "sequence_parallel": bool(p["sequence_parallel"]),
        "attention": "unfused" if f["attention_backend"] == "unfused" else "flash",
        "dropout": (f["hidden_dropout"] or 0) > 0,
        "fp32_gradients": True,
        "layer_split": "even",
        **({"pipeline_layout": megatron_layout(entry)} if _uneven(entry) else {}),
        **_expert_training(entry),
        "workspace_gib": 0.0,
        "memory_reserve_fraction": 0.0,
    }
    plan = plan_for(tmp, model, pinned(training), _cluster(entry))
    st, last = plan.stages, int(training["pipeline_parallel"]) - 1
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activation_bytes")
    out = {k: float(getattr(st, k)[last]) for k in (*parts, "buffer_bytes", "total_bytes")}
    return out


def measured_rows(
    tmp: Path, fixture: Path = FIXTURE
) -> tuple[list[tuple[dict, dict[str, float], float]], Counter]:
    """(entry, predicted parts, relative error) for every test case of
    `fixture` in scope, and the count of each reason a case is out of
    scope."""
    entries = yaml.safe_load(fixture.read_text())["entries"]
    rows, skipped = [], Counter()
    for i, entry in enumerate(entries):
        why = out_of_scope(entry)
        if why:
            skipped[why] += 1
            continue
        folder = tmp / f"case{i}"
        folder.mkdir()
        predicted = predict(folder, entry)
        measured = entry["measured"]["mem_max_allocated_bytes"]
        rows.append((entry, predicted, predicted["total_bytes"] / measured - 1))
    return rows, skipped


def print_rows(rows: list[tuple[dict, dict[str, float], float]]) -> None:
    gib = 2.0**30
    print(
        f"\n{'test case':<58}{'GPU':>6}{'TP':>3}{'PP':>3}{'DP':>3}{'mbs':>4}"
        f"{'measured':>10}{'predicted':>10}{'error':>8}   weights/grads/optim/act/buffers GiB"
    )
    for entry, pred, err in sorted(rows, key=lambda r: r[2]):
        p = entry["parallel"]
        parts = "/".join(
            f"{pred[k] / gib:.2f}"
            for k in (
                "weights_bytes",
                "gradients_bytes",
                "optimizer_bytes",
                "activation_bytes",
                "buffer_bytes",
            )
        )
        print(
            f"{entry['name'][:57]:<58}{entry['machine']:>6}{p['tensor_model_parallel_size']:>3}"
            f"{p['pipeline_model_parallel_size']:>3}{p['data_parallel']:>3}"
            f"{entry['batch']['micro_batch_size']:>4}"
            f"{entry['measured']['mem_max_allocated_bytes'] / gib:>9.2f}G"
            f"{pred['total_bytes'] / gib:>9.2f}G{err:>+8.1%}   {parts}"
        )
    errors = [abs(e) for _, _, e in rows]
    print(
        f"{len(rows)} test cases: median |error| {statistics.median(errors):.1%}, largest "
        f"{max(errors):.0%}, {sum(e <= MEDIAN_MAX for e in errors)} within {MEDIAN_MAX:.0%}"
    )


def test_peak_memory_against_megatron_regression_tests(tmp_path):
    rows, skipped = measured_rows(tmp_path)
    print_rows(rows)
    print("out of scope:", dict(skipped))
    errors = [abs(e) for _, _, e in rows]
    median = statistics.median(errors)
    assert len(rows) >= 80
    assert median <= MEDIAN_MAX
    # the two 7B cases (53-57 GiB) are the large-model check: within 5%
    large = [abs(e) for entry, _, e in rows if entry["model"]["hidden_size"] >= 4096]
    assert large and max(large) <= 0.05


MOE_FIXTURE = FIXTURE.with_name("megatron_functional_moe.yaml")


def test_moe_peak_memory_against_megatron_regression_tests(tmp_path):
    """The MoE test cases in scope (the alltoall, allgather and flex
    dispatchers, Adam, bf16): the routed experts' weights, gradients and optimizer state over
    EP x ETP and the expert-data group, the dispatched tokens' activations
    and buffers (at the real-routing default imbalance: the tests route
    with learned routers), MLA and multi-token prediction."""
    rows, skipped = measured_rows(tmp_path, MOE_FIXTURE)
    print_rows(rows)
    print("out of scope:", dict(skipped))
    errors = [abs(e) for _, _, e in rows]
    assert len(rows) == 11
    assert statistics.median(errors) <= MOE_RECORD[0] and max(errors) <= MOE_RECORD[1]
