"""Ranking: does the planner put the measured-fastest configuration first?

Published sweeps of one model on one cluster under several parallel
configurations (tests/fixtures/published_sweeps/README.md cites each): every
measured configuration is planned pinned, and per sweep the test prints the
rank correlation (Spearman) of predicted and measured throughput, the regret
of choosing by the model (measured throughput of the predicted best against
the measured best) and the median error. Nothing was fitted to them.

The target (issue: regret 2% or less and rank correlation 0.9 or more on
every sweep) is not met; docs/accuracy.md ("Ranking") says by how much and
why. The records below hold each sweep to what it measures now, so a change
that makes ranking worse fails.

Run `python -m pytest tests/test_ranking_published.py -s` for the tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from planning import pinned, plan_for
from scipy.stats import spearmanr

pytestmark = pytest.mark.slow

SWEEPS = Path(__file__).parent / "fixtures" / "published_sweeps"
CALIBRATIONS = ("a100-measured", "a100-nominal")

#: Jean Zay's A100 partition as the BLOOM tuning ran on it: 8 x A100 80GB per
#: node on NVLink (taken as the HGX A100's NVSwitch, 300 GB/s per GPU each way:
#: the tr11 README says only "NVLink 4 inter-gpu connects"), 4 Omni-Path HFIs
#: per node for the data-parallel and pipeline traffic. Their rate comes from
#: BigScience's own all-reduce benchmark on that partition, not from these
#: runs (bigscience-workshop/bigscience experiments/bandwidth/
#: all_reduce_bench-a100-n4.txt, commit 358e3c8f: 32 ranks on 4 nodes, 4 GB,
#: busbw 40.5 Gbit/s = 5.07 GB/s with NCCL's ring crossing each node on one
#: HFI): 4 HFIs x 5.07 GB/s = 20.3 GB/s leave a node. Every GPU sends its own
#: pipeline activations, so the 8 share it: 2.53 GB/s each. The
#: data-parallel rates depend on the layout (data_parallel_gb_per_s); 5 us
#: per message (assumed). Tensor parallelism stays inside a node in every run.
JEAN_ZAY = {
    "name": "jean-zay-a100",
    "topology": "switched",
    "chip": "a100-sxm4-80gb",
    "node": {"chips_per_node": 8, "egress_gb_per_s": 300},
    "scale_out": {"nic_gb_per_s": 25, "rails": 8},
    "data_parallel_gb_per_s": 2.53,
    "pipeline_gb_per_s": 2.53,
    "network_latency_us": 5,
    "block_size": 64,
    "calibration": "a100-nominal",
}

#: bytes per second that leave a Jean Zay node (4 Omni-Path HFIs at the
#: measured 5.07 GB/s each, above), in GB/s
NODE_EGRESS_GB_PER_S = 4 * 5.07


def data_parallel_gb_per_s(tp: int, dp: int, gpus_per_node: int = 8) -> float:
    """Ring rate of each data-parallel group on Jean Zay: a node holds
    `min(dp, 8 / tp)` members of each of its `8 / min(dp, 8 / tp)` rings
    (tensor-parallel ranks innermost, then data), every ring leaves the node
    once, and the rings share the node's HFIs: 20.3 / 8 = 2.53 GB/s at TP 8,
    5.07 at TP 4, 10.1 at TP 2 (derivation from the benchmark above)."""
    members = min(dp, gpus_per_node // tp)
    rings = gpus_per_node // members
    return NODE_EGRESS_GB_PER_S / rings


#: (sweep, calibration) -> (rank correlation at least, regret at most), as
#: measured: records, not the target
RECORDS = {
    ("bloom h13824 L78 96 heads", "a100-measured"): (0.05, 0.08),
    ("bloom h13824 L84 64 heads", "a100-measured"): (-0.05, 0.08),
    ("bloom h14336 L72 64 heads (02-21..24)", "a100-measured"): (0.35, 0.09),
    ("bloom h14336 L72 64 heads (02-25..26)", "a100-measured"): (0.70, 0.015),
    ("mpt-7b FSDP micro-batch", "a100-measured"): (0.95, 0.001),
    ("bloom h13824 L78 96 heads", "a100-nominal"): (0.0, 0.20),
    ("bloom h13824 L84 64 heads", "a100-nominal"): (-0.05, 0.08),
    ("bloom h14336 L72 64 heads (02-21..24)", "a100-nominal"): (-0.10, 0.15),
    ("bloom h14336 L72 64 heads (02-25..26)", "a100-nominal"): (0.55, 0.015),
    ("mpt-7b FSDP micro-batch", "a100-nominal"): (0.95, 0.001),
}

BLOOM = {
    "bloom_prequel_h13824_l78_feb26_27.yaml": "bloom h13824 L78 {} heads",
    "bloom_prequel_h13824_l84_feb21.yaml": "bloom h13824 L84 {} heads",
    "bloom_prequel_h14336_l72_feb21_24.yaml": "bloom h14336 L72 {} heads (02-21..24)",
    "bloom_prequel_h14336_l72_feb25_26.yaml": "bloom h14336 L72 {} heads (02-25..26)",
}
#: fewest configurations of one model a sweep needs to be ranked
MIN_RUNS = 4


def _bloom_runs(tmp: Path, calibration: str):
    """(sweep, configuration, measured sequences/s, predicted) of every
    measured BLOOM run (runs that did not finish and the two the fixture marks
    unreliable left out): GPT with ALiBi (no position table), tied embeddings,
    vocabulary 250880, full recomputation, ZeRO-1 unless the row says
    otherwise, fp16, Megatron's unfused attention, DeepSpeed's 1F1B pipeline
    (no interleaving; activations and their gradients partitioned over the
    tensor-parallel group, each rank sending its 1/t share and the receiving
    stage all-gathering it: microsoft/DeepSpeed deepspeed/runtime/pipe/
    engine.py lines 131-132 at 2151c787, the last commit before 2022-02-20,
    `is_pipe_partitioned = is_model_parallel`, unconditional from the engine's
    first commit 65c2f974 until c2074b34 made it an option in 2023), the
    gradient reduction after the pipeline flush.
    Sweeps hold one model shape (the head count is part of it)."""
    out = []
    for name, label in BLOOM.items():
        for i, r in enumerate(yaml.safe_load((SWEEPS / name).read_text())["runs"]):
            m = r["measured"]
            if m.get("status") != "ok" or not m.get("seconds_per_iteration"):
                continue
            h, layers, heads = r["hidden_size"], r["num_layers"], r["num_heads"]
            dp = r["data_parallel"]
            model = {
                "name": "bloom",
                "num_layers": layers,
                "hidden_size": h,
                "num_heads": heads,
                "head_dim": h // heads,
                "ffn_size": 4 * h,
                "vocab_size": 250880,
                "position_encoding": "rotary",
                "tied_embeddings": True,
            }
            training = {
                "global_batch_sequences": r["global_batch_size"],
                "sequence_length": 2048,
                "micro_batch_size": r["micro_batch_size"],
                "tensor_parallel": r["tensor_parallel"],
                "pipeline_parallel": r["pipeline_parallel"],
                "data_parallel": r["data_parallel"],
                "recompute": "full",
                "zero_stage": r.get("zero_stage", 1),
                "fc_algorithm": "megatron-1d",
                "attention": "unfused",
                "sequence_parallel": False,
                "dtype": "fp16",
                "layer_split": "even",
                "overlap_data_parallel": False,
                "pipeline_scatter_gather": True,
            }
            folder = tmp / f"{name}-{i}"
            folder.mkdir()
            cluster = {
                **JEAN_ZAY,
                "num_chips": r["gpus"],
                "data_parallel_gb_per_s": data_parallel_gb_per_s(r["tensor_parallel"], dp),
            }
            plan = plan_for(folder, model, pinned(training), cluster, calibration=calibration)
            what = (
                f"TP{r['tensor_parallel']} PP{r['pipeline_parallel']} DP{r['data_parallel']} "
                f"mbs{r['micro_batch_size']} gbs{r['global_batch_size']}"
                + (f" ZeRO-{r['zero_stage']}" if "zero_stage" in r else "")
            )
            batch = r["global_batch_size"]
            out.append(
                (label.format(heads), what, batch / m["seconds_per_iteration"], batch / plan.step_s)
            )
    return out


def _mpt_runs(tmp: Path, calibration: str):
    """The MPT-7B micro-batch sweep: FSDP FULL_SHARD (ZeRO-3) over 8 A100
    80GB in one node, flash attention, learned positions, no recomputation,
    two micro-batches per step."""
    runs = yaml.safe_load((SWEEPS / "llmfoundry_mpt7b_a100_80gb_microbatch.yaml").read_text())
    model = {
        "name": "mpt-7b",
        "num_layers": 32,
        "hidden_size": 4096,
        "num_heads": 32,
        "head_dim": 128,
        "ffn_size": 16384,
        "vocab_size": 50368,
        "position_encoding": "learned",
        "tied_embeddings": True,
    }
    out = []
    for i, r in enumerate(runs["runs"]):
        training = {
            "global_batch_sequences": r["global_batch_size"],
            "sequence_length": r["seq_length"],
            "micro_batch_size": r["micro_batch_size"],
            "tensor_parallel": 1,
            "pipeline_parallel": 1,
            "data_parallel": r["gpus"],
            "recompute": "none",
            "zero_stage": 3,
            "fc_algorithm": "megatron-1d",
            "attention": "flash",
        }
        folder = tmp / f"mpt-{i}"
        folder.mkdir()
        plan = plan_for(
            folder, model, pinned(training), f"a100-hgx-{r['gpus'] // 8}n", calibration=calibration
        )
        measured = float(r["measured"]["Throughput (T/s)"]) / r["seq_length"]
        out.append(
            (
                "mpt-7b FSDP micro-batch",
                f"mbs{r['micro_batch_size']}",
                measured,
                r["global_batch_size"] / plan.step_s,
            )
        )
    return out


def repeat_oracle(whats: list[str], measured: np.ndarray) -> np.ndarray:
    """Each run predicted at the mean measured throughput of every run of its
    configuration: what a model that knew each configuration's throughput
    exactly would say. Its rank correlation is the most a model can reach
    when a sweep measured one configuration more than once and the repeats
    differ (run-to-run noise); without repeats it is 1."""
    pairs = list(zip(whats, measured, strict=True))
    means = {w: float(np.mean([x for v, x in pairs if v == w])) for w in whats}
    return np.array([means[w] for w in whats])


def ranking(rows) -> dict[str, tuple[int, float, float, float, float]]:
    """Per sweep: (configurations, Spearman rho, regret, median |error|, the
    repeat oracle's rho)."""
    sweeps: dict[str, list[tuple[str, float, float]]] = {}
    for sweep, what, measured, predicted in rows:
        sweeps.setdefault(sweep, []).append((what, measured, predicted))
    out = {}
    for sweep, runs in sweeps.items():
        if len(runs) < MIN_RUNS:
            continue
        m = np.array([r[1] for r in runs])
        p = np.array([r[2] for r in runs])
        rho = float(spearmanr(m, p).correlation)
        regret = float(1 - m[int(np.argmax(p))] / m.max())
        oracle = float(spearmanr(m, repeat_oracle([r[0] for r in runs], m)).correlation)
        out[sweep] = (len(runs), rho, regret, float(np.median(np.abs(p / m - 1))), oracle)
    return out


def test_repeat_oracle_by_hand():
    """Two runs of configuration a (10 and 14 /s) around b (12 /s): the
    oracle predicts a at 12 for both, tied with b, and its rank correlation
    with the measured ranks (1, 3; 2) is 0.5; without repeats it ranks
    perfectly."""
    m = np.array([10.0, 14.0, 12.0, 20.0])
    oracle = repeat_oracle(["a", "a", "b", "c"], m)
    assert oracle.tolist() == [12.0, 12.0, 12.0, 20.0]
    rho = spearmanr(m, oracle).correlation
    # measured ranks 1, 3, 2, 4; oracle ranks 2, 2, 2, 4 (a three-way tie)
    assert rho == pytest.approx(np.corrcoef([1, 3, 2, 4], [2, 2, 2, 4])[0, 1])
    assert spearmanr(m, repeat_oracle(["a", "b", "c", "d"], m)).correlation == pytest.approx(1)


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_ranking_on_published_sweeps(tmp_path, calibration):
    rows = _bloom_runs(tmp_path, calibration) + _mpt_runs(tmp_path, calibration)
    table = ranking(rows)
    print(f"\nRanking on published sweeps ({calibration})")
    print(f"{'sweep':<42}{'runs':>5}{'rho':>7}{'regret':>8}{'median err':>12}{'oracle rho':>12}")
    for sweep, (n, rho, regret, err, oracle) in table.items():
        print(f"{sweep:<42}{n:>5}{rho:>7.2f}{regret:>8.1%}{err:>12.1%}{oracle:>12.2f}")
    for sweep, what, measured, predicted in rows:
        print(f"  {sweep:<40} {what:<30} measured {measured:8.2f}/s predicted {predicted:8.2f}/s")
    assert set(table) == {s for s, c in RECORDS if c == calibration}
    for sweep, (_, rho, regret, _, _) in table.items():
        rho_min, regret_max = RECORDS[(sweep, calibration)]
        assert rho >= rho_min, sweep
        assert regret <= regret_max, sweep
