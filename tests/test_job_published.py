"""The whole-step model against published Megatron-LM measurements on A100
(fixtures/published/README.md cites them). Nothing was fitted to them: the
cluster is the bundled `a100-hgx-<N>n` preset, priced with the bundled
nominal A100 calibration `a100-nominal` (data-sheet rates times stated
efficiencies).

Run `python -m pytest tests/test_job_published.py -s` to see every row;
docs/accuracy.md carries the same table.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml
from planning import pinned, plan_for

from cost_models.transformer_flops import megatron_flops_per_iteration

FIXTURE = Path(__file__).parent / "fixtures" / "published" / "megatron_a100.yaml"
VOCAB, SEQ = 51200, 2048

CALIBRATIONS = ("a100-nominal", "a100-measured")

# Tolerances the docs state (docs/accuracy.md), per calibration: (median,
# largest) |error| as measured, so a change of the model that makes the
# predictions worse fails here. They are records, not the target (a median
# within 10%): docs/accuracy.md says which tables meet it with which
# calibration. `a100-measured` is fitted from public A100 microbenchmarks
# (calibration_data/measured/README.md), none of them these runs.
# `a100-measured`'s GEMMs are the tile model since it was regenerated with
# it (its held-out error on the eight A100 shapes beat the curve's); Table 4
# got worse with it (docs/accuracy.md says why), Table 5 and Table 1 better.
KORTHIKANTI_TOLERANCE = {"a100-nominal": (0.08, 0.17), "a100-measured": (0.065, 0.11)}
# Table 4 (one layer of the 22B model): |error| of forward + backward.
TABLE4_TOLERANCE = {"a100-nominal": (0.07, 0.11), "a100-measured": (0.16, 0.165)}
# Section 6.3 (530B on 2240 GPUs, 8-way data parallelism).
DP8_TOLERANCE = {"a100-nominal": 0.10, "a100-measured": 0.03}
NARAYANAN_TOLERANCE = {"a100-nominal": (0.13, 0.29), "a100-measured": (0.03, 0.105)}


def _model(name, heads, hidden, layers):
    return {
        "name": name,
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "head_dim": hidden // heads,
        "ffn_size": 4 * hidden,
        "vocab_size": VOCAB,
    }


def _predict(
    tmp: Path,
    model: dict,
    training: dict,
    gpus: int,
    calibration: str,
    tp: int,
    check_memory: bool = True,
):
    """The published layout pinned: Megatron 1D tensor parallelism of `tp`
    GPUs, the even layer split Megatron-LM runs, the era's settings."""
    pp = training["pipeline_parallel"]
    training = {
        "sequence_length": SEQ,
        "attention": "unfused",
        "fc_algorithm": "megatron-1d",
        "dropout": True,
        "fp32_gradients": True,
        "tensor_parallel": tp,
        "data_parallel": gpus // (tp * pp),
        "layer_split": "even",
        **training,
    }
    plan = plan_for(tmp, model, pinned(training), f"a100-hgx-{gpus // 8}n", calibration=calibration)
    assert plan.fits or not check_memory
    return plan


def korthikanti_rows(tmp: Path, calibration: str) -> list[tuple[str, float, float]]:
    """(configuration, measured s, predicted s) for every Table 5 cell."""
    fixture = yaml.safe_load(FIXTURE.read_text())
    chunks = fixture["korthikanti2022_interleave"]
    rows = []
    for name, heads, hidden, layers, tp, pp, gpus, batch, mbs, full_s, sel_s in fixture[
        "korthikanti2022_table5"
    ]:
        for mode, measured in (("full", full_s), ("selective", sel_s)):
            training = {
                "global_batch_sequences": batch,
                "pipeline_parallel": pp,
                "micro_batch_size": mbs,
                "interleave": chunks[name],
                "recompute": mode,
                "sequence_parallel": mode == "selective",
                "overlap_tensor_backward": True,  # the paper's section 6.2
            }
            job = _predict(
                tmp, _model(name, heads, hidden, layers), training, gpus, calibration, tp
            )
            label = f"{name} TP{tp} PP{pp} v{chunks[name]} {gpus} GPUs, {mode}"
            rows.append((label, measured, job.step_s))
    return rows


def narayanan_rows(tmp: Path, calibration: str) -> list[tuple[str, float, float]]:
    """(configuration, measured TFLOP/s per GPU, predicted) for Table 1."""
    data = yaml.safe_load(FIXTURE.read_text())["narayanan2021_table1"]
    rows = []
    for name, heads, hidden, layers, tp, pp, gpus, batch, mbs, v, overlap, tflops in data:
        training = {
            "global_batch_sequences": batch,
            "pipeline_parallel": pp,
            "data_parallel": gpus // (tp * pp),
            "micro_batch_size": mbs,
            "interleave": v,
            "recompute": "full",
            "sequence_parallel": False,
            "overlap_data_parallel": overlap,
        }
        job = _predict(tmp, _model(name, heads, hidden, layers), training, gpus, calibration, tp)
        flops = megatron_flops_per_iteration(batch, SEQ, layers, hidden, VOCAB)
        predicted = flops / job.step_s / gpus / 1e12
        dp = gpus // (tp * pp)
        label = f"{name} TP{tp} PP{pp} DP{dp} v{v} mbs{mbs}"
        rows.append((label, float(tflops), predicted))
    return rows


def _report(title: str, unit: str, rows) -> list[float]:
    print(f"\n{title}")
    print(f"{'configuration':<40}{'measured':>10}{'predicted':>11}{'error':>9}")
    errors = []
    for label, measured, predicted in rows:
        err = (predicted - measured) / measured
        errors.append(err)
        print(f"{label:<40}{measured:>9.2f}{unit}{predicted:>10.2f}{unit}{err * 100:>8.1f}%")
    med = statistics.median(abs(e) for e in errors)
    print(f"median |error| {med * 100:.1f}%, largest {max(abs(e) for e in errors) * 100:.1f}%")
    return errors


def _assert_within(errors: list[float], tolerance: tuple[float, float]) -> None:
    """Median and largest |error| within the stated (median, largest)."""
    median, largest = tolerance
    assert statistics.median(abs(e) for e in errors) <= median
    assert max(abs(e) for e in errors) <= largest


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("published")


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_korthikanti_table5_iteration_times(repo_root, tmp_dir, calibration):
    errors = _report(
        f"Korthikanti et al. 2022, Table 5: seconds per iteration ({calibration})",
        "s",
        korthikanti_rows(tmp_dir, calibration),
    )
    _assert_within(errors, KORTHIKANTI_TOLERANCE[calibration])


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_narayanan_table1_tflops_per_gpu(repo_root, tmp_dir, calibration):
    errors = _report(
        f"Narayanan et al. SC'21, Table 1: achieved TFLOP/s per GPU ({calibration})",
        "T",
        narayanan_rows(tmp_dir, calibration),
    )
    _assert_within(errors, NARAYANAN_TOLERANCE[calibration])


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_selective_recomputation_speedup_direction(repo_root, tmp_dir, calibration):
    """Table 5's finding: selective recomputation with sequence parallelism
    is 29-32% faster than full recomputation; the model must see a speed-up
    of the same sign and size (within 10 points) for every model."""
    rows = korthikanti_rows(tmp_dir, calibration)
    for (_, full_m, full_p), (_, sel_m, sel_p) in zip(rows[::2], rows[1::2], strict=True):
        measured, predicted = full_m / sel_m - 1, full_p / sel_p - 1
        assert predicted > 0.15 and abs(predicted - measured) < 0.10


def test_narayanan_1t_row_matches_the_abstract():
    """The fixture's 1T row against the paper's abstract: 502 petaFLOP/s on
    3072 GPUs (the one Table 1 figure printed outside the table)."""
    data = yaml.safe_load(FIXTURE.read_text())["narayanan2021_table1"]
    (row,) = [r for r in data if r[0] == "1T"]
    gpus, tflops = row[6], row[11]
    assert gpus == 3072
    assert tflops * gpus / 1e3 == pytest.approx(502, rel=0.005)


def test_narayanan_rows_match_the_table_transcript():
    """Every Table 1 row of the fixture against a third-party transcription of
    the table (fixtures/published/README.md cites it): the configuration
    columns and the teraFLOP/s agree exactly, and the transcript is
    self-consistent (its percentage of the 312 TFLOP/s peak and its aggregate
    petaFLOP/s follow from its teraFLOP/s and GPU count, up to rounding)."""
    data = yaml.safe_load(FIXTURE.read_text())["narayanan2021_table1"]
    lines = (FIXTURE.parent / "megatron_sc21_table1_transcript.csv").read_text().splitlines()
    transcript = [[cell.strip() for cell in line.split(",")] for line in lines[1:]]
    assert len(transcript) == len(data) == 10
    for ours, theirs in zip(data, transcript, strict=True):
        _, heads, hidden, layers, tp, pp, gpus, batch, *_, tflops = ours
        assert [heads, hidden, layers, tp, pp, gpus, batch, tflops] == [int(c) for c in theirs[1:9]]
        assert int(theirs[9].rstrip("%")) == round(100 * tflops / 312)
        # teraFLOP/s are printed rounded to integers: at most 0.5 / 135 off
        assert float(theirs[10]) == pytest.approx(tflops * gpus / 1e3, rel=0.004)


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_korthikanti_table4_layer_times(repo_root, tmp_dir, calibration):
    """One block of the 22B model, one micro-batch of 4 (TP 8): forward and
    backward milliseconds of Table 4 for each recomputation and sequence
    parallelism setting. The forward and backward are printed separately;
    the tolerance is on their sum (the paper overlaps part of the backward
    all-reduce with the weight gradient GEMM, which the model prices as
    exposed: the split moves between the two, see docs/accuracy.md)."""
    fixture = yaml.safe_load(FIXTURE.read_text())
    model = _model("22B", 64, 6144, 48)
    print(f"\nKorthikanti et al. 2022, Table 4: one 22B layer, TP 8, mbs 4 ({calibration})")
    print(
        f"{'experiment':<26}{'fwd ms':>8}{'pred':>7}{'bwd ms':>8}{'pred':>7}"
        f"{'sum':>7}{'pred':>7}{'error':>8}"
    )
    errors = []
    for label, mode, sp, fwd_ms, bwd_ms in fixture["korthikanti2022_table4"]:
        training = {
            "global_batch_sequences": 4,
            "pipeline_parallel": 1,
            "data_parallel": 1,
            "micro_batch_size": 4,
            "recompute": mode,
            "sequence_parallel": sp,
            "overlap_tensor_backward": True,  # the paper's section 6.2
        }
        # per-layer times: the whole 48-layer model without recomputation
        # does not fit in 80 GB (the paper's Figure 1), a single layer does
        job = _predict(tmp_dir, model, training, 8, calibration, 8, check_memory=False)
        b = job.block
        rec = b.recompute_s[("none", "selective", "full").index(mode)]
        fwd, bwd = b.forward_s * 1e3, (b.backward_s + rec) * 1e3
        err = (fwd + bwd) / (fwd_ms + bwd_ms) - 1
        errors.append(err)
        print(
            f"{label:<26}{fwd_ms:>8.1f}{fwd:>7.2f}{bwd_ms:>8.1f}{bwd:>7.2f}"
            f"{fwd_ms + bwd_ms:>7.1f}{fwd + bwd:>7.2f}{err * 100:>7.1f}%"
        )
    med = statistics.median(abs(e) for e in errors)
    print(f"median |error| {med * 100:.1f}%, largest {max(abs(e) for e in errors) * 100:.1f}%")
    _assert_within(errors, TABLE4_TOLERANCE[calibration])


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_korthikanti_530b_with_data_parallelism(repo_root, tmp_dir, calibration):
    """Section 6.3: the 530B model on 2240 GPUs (8-way data parallelism,
    gradient all-reduce not overlapped), selective recomputation with
    sequence parallelism: 39.15 s per iteration, and slower than the same
    run without data parallelism (37.83 s) by the all-reduce."""
    fixture = yaml.safe_load(FIXTURE.read_text())
    run = fixture["korthikanti2022_530b_dp8"]
    training = {
        "global_batch_sequences": run["global_batch"],
        "pipeline_parallel": 35,
        "data_parallel": run["data_parallel"],
        "micro_batch_size": 1,
        "interleave": fixture["korthikanti2022_interleave"]["530B"],
        "recompute": "selective",
        "sequence_parallel": True,
        "overlap_data_parallel": False,
        "overlap_tensor_backward": True,  # the paper's section 6.2
    }
    job = _predict(tmp_dir, _model("530B", 128, 20480, 105), training, run["gpus"], calibration, 8)
    err = job.step_s / run["seconds"] - 1
    exposed = job.parts["dp_comm_s"]
    print(
        f"\n530B TP8 PP35 DP8 on 2240 GPUs, selective ({calibration}): measured "
        f"{run['seconds']:.2f}s predicted {job.step_s:.2f}s ({err * 100:+.1f}%), "
        f"exposed all-reduce {exposed:.2f}s"
    )
    assert abs(err) <= DP8_TOLERANCE[calibration]
    assert exposed > 0
