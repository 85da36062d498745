"""The whole-step model against published mixture-of-experts pre-training
runs on DGX H100 (fixtures/published_moe/README.md cites every row: eight
from Megatron-Bridge's performance archive, two from the Megatron-Core MoE
report, arXiv:2603.07685).
Nothing was fitted to them: the clusters are the bundled `h100-hgx-<N>n`
presets priced with the bundled `h100-measured` calibration (fitted from
public H100 microbenchmarks, calibration_data/measured/README.md).

Each run is planned with what its source states pinned (tensor, pipeline,
context, data and expert parallelism, micro-batch, virtual stages,
precision; the dispatcher, the expert all-to-all overlap and DeepSeek-V3's
multi-token prediction from the Megatron-Bridge recipe of its release or
from the report's appendix) and
the rest (recomputation, ZeRO stage) left to the planner,
with Megatron-LM's 1D tensor parallelism and its even layer split. The
source force-balances the
tokens over the experts, so every model sets `expert_imbalance: 1`.

Target (issue: forced-balance rows): median |error| at most 15%.

Run `python -m pytest tests/test_published_moe.py -s` to see every row;
docs/accuracy.md carries the same table.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml
from planning import plan_for

from autotune.loading import load_model_spec

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "published_moe" / "rows.yaml"
CALIBRATION = "h100-measured"
STEP_TARGET = 0.15
# The record of the current figures, so a change that makes them worse
# fails (docs/accuracy.md): the target is NOT met (median 29.7%, largest
# 51.1%). Every row is predicted fast. The three Qwen3-235B rows (expert
# groups over 4 nodes, the runs' dispatcher and all-to-all overlap priced)
# are within 6-19% (SPANNING_RECORD); the two DeepSeek-V3 rows, which fit
# with MLA's up-projections recomputed and their layouts pinned as their
# recipes do (the report's with its MTP block standalone), are 30-31% fast
# (DEEPSEEK_RECORD); the fine-grained models' rows (Qwen3-30B-A3B,
# gpt-oss-120b) are 22-51% fast: the Qwen3-30B rows wait on the host for
# their 8-16 local experts' kernels, gpt-oss's BF16 experts do not, its
# windowed blocks are priced as windowed, and what else they lack is not
# known. The expert all-to-all itself is within 0.1-16% of the report's
# measured dispatches (test_moe_dispatch.py): since DeepEP and HybridEP
# are priced as the token-based, relayed exchanges they are, the rows that
# run them moved 0.3-8 points faster (median 24.7% before).
STEP_RECORD = (0.30, 0.52)
SPANNING_RECORD = 0.19
DEEPSEEK_RECORD = 0.32

pytestmark = pytest.mark.slow


def _model(key: str, models: dict, mtp_layers: int = 0) -> dict:
    m = models[key]
    if isinstance(m, str):
        spec = load_model_spec(REPO / m).model_dump(mode="json")
    else:
        spec = {
            **m,
            "name": key,
            "ffn_kind": "swiglu",
            "position_encoding": "rotary",
        }
    spec["moe"] = {**spec["moe"], "expert_imbalance": 1.0}
    spec.pop("mtp_layers", None)
    if mtp_layers:  # the row's recipe builds them (README.md "Recipes")
        spec["mtp_layers"] = mtp_layers
    return spec


#: each printed precision as the FP8 recipe it names (README.md)
_FP8 = {"BF16": "none", "FP8": "current", "FP8-CS": "current", "FP8 (not printed)": "current",
        "FP8-BLK": "blockwise"}  # fmt: skip


def _training(row: dict) -> tuple[dict, float]:
    """The plan file's training section and the measured step seconds."""
    dp = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    measured_s = row["gbs"] * row["seq"] / (row["tokens_per_s_per_gpu"] * row["gpus"])
    training = {
        "global_batch_sequences": row["gbs"],
        "sequence_length": row["seq"],
        "dtype": "bf16",
        "fp8": _FP8[row["precision"]],
        "tensor_parallel": row["tp"],
        "tensor_mesh": "1d",
        "fc_algorithm": "megatron-1d",
        "context_parallel": row["cp"],
        "pipeline_parallel": row["pp"],
        "data_parallel": dp,
        "expert_parallel": row["ep"],
        # the release's recipe (README.md "Recipes"): the dispatcher and
        # Megatron-LM's expert all-to-all overlap
        "expert_dispatcher": row["dispatcher"],
        "overlap_expert_comm": row["overlap"],
        "interleave": row["vp"] or 1,
        "micro_batch_size": row["mbs"],
        # no row prints a layer split: Megatron-LM's default, even over the
        # stages (and chunks), not the balancer's cut, unless the release's
        # recipe pins a layout (README.md "Recipes")
        "layer_split": "even",
    }
    if row.get("layout"):
        training["pipeline_layout"] = row["layout"]
    if row.get("overlap_grad_reduce") is False:
        # the recipe reduces the gradients after the backward
        training["overlap_data_parallel"] = False
    return training, measured_s


def test_dgx_h100_moe_rows(tmp_path: Path) -> None:
    data = yaml.safe_load(FIXTURE.read_text())
    errors, spanning = [], []
    print(
        "\nrow                   GPUs  TPxPPxDP (EP)   mbs  measured   predicted  error   a2a share"
    )
    for row in data["rows"]:
        training, measured_s = _training(row)
        cluster = f"h100-hgx-{row['gpus'] // 8}n"
        plan = plan_for(
            tmp_path, _model(row["model"], data["models"], row.get("mtp_layers", 0)),
            training, cluster,
            calibration=CALIBRATION,
        )  # fmt: skip
        err = plan.step_s / measured_s - 1.0
        errors.append(abs(err))
        if row["model"] == "qwen3_235b_a22b":
            spanning.append(abs(err))
        if row["model"] == "deepseek_v3":
            assert plan.fits, "the run fitted in 80 GB"
            assert abs(err) <= DEEPSEEK_RECORD
        layout = f"{row['tp']}x{row['pp']}x{training['data_parallel']} ({row['ep']})"
        a2a = plan.parts["ep_comm_s"] / plan.step_s
        print(
            f"{row['id']:<21} {row['gpus']:>5}  {layout:<14} {row['mbs']:>3}  "
            f"{measured_s:8.3f} s  {plan.step_s:8.3f} s  {err:+6.1%}  {a2a:6.1%}  "
            f"fits {plan.fits}"
        )
    median = statistics.median(errors)
    met = "met" if median <= STEP_TARGET else "NOT met"
    print(
        f"median |error| {median:.1%}, largest {max(errors):.1%} over {len(errors)} rows "
        f"(target {STEP_TARGET:.0%}: {met})"
    )
    assert median <= STEP_RECORD[0]
    assert max(errors) <= STEP_RECORD[1]
    assert len(spanning) == 3 and max(spanning) <= SPANNING_RECORD
