"""Accuracy on public measurements the model was not fitted to
(tests/fixtures/public_logs/README.md and public_gemm/README.md cite them).

Collectives: on every full-range log, the cross-validated median error is
at most 5% with each inner size left out, and at most 10% when fitted up to
32 MiB and judged on the larger sizes, except where docs/calibrate.md
("Accuracy") explains the miss: those logs are held to the error measured
there, so a change that makes them worse fails. GEMMs: on the published
H800 table, held-out median error at most 10% and no prediction faster than
the chip's peak. The tests print the tables they judge (pytest -s).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autotune.calibrate.coverage import detect_chip
from autotune.calibrate.fit_compute import fit_gemm
from autotune.calibrate.run import calibrate, read_input
from autotune.cli import main
from autotune.errors import InputError
from autotune.hardware.chips import load_chip
from cost_models import Axis, gemm_flops

LOGS = Path(__file__).parent / "fixtures" / "public_logs"
GEMMS = Path(__file__).parent / "fixtures" / "public_gemm"
FULL_RANGE = [
    "h100_2node_all_reduce_a3mega.txt",
    "mi300x_1node_rccl_all_reduce.txt",
    "mi300x_2node_rccl_all_reduce.txt",
    "mi355x_2node_rccl_all_reduce_perf.txt",
    "nccl_all_gather_perf_gb300_2node.txt",
    "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt",
    "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt",
    "nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt",
    "nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt",
]
EVERY_LOG = [*FULL_RANGE, "a100_sendrecv_note.md"]
#: acceptance (docs/calibrate.md "Accuracy"): medians of held-out relative errors
INTERPOLATION_MEDIAN_MAX = 0.05
EXTRAPOLATION_MEDIAN_MAX = 0.10
GEMM_MEDIAN_MAX = 0.10
#: logs that miss a target, with the median measured (docs/calibrate.md
#: "Accuracy" gives the reason with numbers); they must not get worse than
#: that (plus half a point of slack)
INTERPOLATION_MISSES = {
    # 11 sizes, bandwidth rising over the whole range: the 2-regime model's
    # held-out median (4.5%) is not the 30% better than the line's that the
    # regime count needs, so the line is kept
    "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt": 0.056,
    # timing noise: the two timings of one size differ by a median 7.1%
    "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt": 0.110,
}
PIECE_CUT_MISSES = {
    # the bandwidth still climbs at the top of the log (1 GiB 11% over 512 MiB)
    "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt": 0.148,
    # the bus bandwidth jumps 55% between the 512 MiB and 1 GiB messages
    "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt": 0.266,
}
MESSAGE_CUT_MISSES = {
    # the top of the range below the cut is latency-bound or ends on a protocol switch
    "h100_2node_all_reduce_a3mega.txt": 2.193,
    "mi300x_2node_rccl_all_reduce.txt": 0.423,
    "nccl_all_gather_perf_gb300_2node.txt": 1.274,
    "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt": 1.317,
    # the bandwidth is still climbing steeply at the cut
    "mi355x_2node_rccl_all_reduce_perf.txt": 0.794,
    "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt": 0.248,
    "nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt": 0.337,
    "nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt": 0.258,
}
#: logs on which the automatic choice keeps one straight line (no regimes)
LINE_CHOSEN = {"nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt"}
SLACK = 0.005


@pytest.fixture(scope="module")
def fits():
    return {
        name: calibrate([str(LOGS / name)], axes=(Axis.ROW,)).comm_fits[0] for name in FULL_RANGE
    }


def test_cross_validated_errors_on_public_logs(fits):
    print(
        "\nlog" + " " * 56 + "model       interp med/p90/worst   "
        "piece cut med/worst   message cut med/worst"
    )
    for name, fit in fits.items():
        i_med, i_p90, i_max = fit.cv.interpolation
        e_med, _, e_max = fit.cv.extrapolation
        m_med, _, m_max = fit.cv.message_extrapolation
        model = f"{len(fit.regimes)} regimes" if fit.regimes else "1 line   "
        print(
            f"{name:58s} {model}   {i_med:6.1%} {i_p90:6.1%} {i_max:6.0%}"
            f"      {e_med:6.1%} {e_max:6.1%}        {m_med:6.1%} {m_max:6.1%}"
        )
    for name, fit in fits.items():
        assert fit.cv.extrapolation_cut_bytes == 32 * 2**20, name
        assert fit.cv.message_cut_bytes == 32 * 2**20, name
        assert len(fit.cv.message_errors) > 0, name
        interp_max = INTERPOLATION_MISSES.get(name, INTERPOLATION_MEDIAN_MAX - SLACK) + SLACK
        assert fit.cv.interpolation[0] <= interp_max, name
        piece_max = PIECE_CUT_MISSES.get(name, EXTRAPOLATION_MEDIAN_MAX - SLACK) + SLACK
        assert fit.cv.extrapolation[0] <= piece_max, name
        message_max = MESSAGE_CUT_MISSES.get(name, EXTRAPOLATION_MEDIAN_MAX - SLACK) + SLACK
        assert fit.cv.message_extrapolation[0] <= message_max, name


def test_the_straight_line_is_worse_on_every_public_log(fits):
    """Why regimes: the linear model's held-out median is several times the
    regime model's on each log (the issue's 'biased at both ends'), except
    where the automatic choice keeps the line (LINE_CHOSEN)."""
    for name, fit in fits.items():
        line = calibrate([str(LOGS / name)], axes=(Axis.ROW,), model="linear").comm_fits[0]
        line_med, regimes_med = line.cv.interpolation[0], fit.cv.interpolation[0]
        print(f"{name:58s} line {line_med:6.1%}  chosen {regimes_med:6.1%}")
        if name in LINE_CHOSEN:
            assert fit.model == "linear" and line_med == pytest.approx(regimes_med), name
            continue
        assert fit.model == "regimes", name
        assert line.cv.interpolation[0] > 2 * fit.cv.interpolation[0], name


def test_worst_error_counts_every_point(fits):
    for fit in fits.values():
        assert fit.max_rel_error == pytest.approx(max(abs(e) for e in fit.rel_errors))


@pytest.mark.parametrize("name", EVERY_LOG)
def test_calibrate_with_no_other_flag(repo_root, tmp_path, name):
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(LOGS / name), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    doc = json.loads(out.read_text())
    assert "chip: " in text and "resource calibrated: " in text
    if doc["chip"] is None:
        assert "warning: chip unknown" in text
    for entry in [*doc["derived"], *doc["from_preset"]]:
        assert entry in text  # every value taken from elsewhere is named
    assert "overlap_slowdown: not measured" in text
    assert doc["expected_error"] is not None or name == "a100_sendrecv_note.md"


def test_chips_and_resources_from_the_logs():
    expect = {
        "h100_2node_all_reduce_a3mega.txt": ("h100-sxm", "scale_out"),
        "mi300x_1node_rccl_all_reduce.txt": ("mi300x", "intra_node"),
        "mi300x_2node_rccl_all_reduce.txt": ("mi300x", "scale_out"),
        "mi355x_2node_rccl_all_reduce_perf.txt": (None, "scale_out"),
        "a100_sendrecv_note.md": (None, "intra_node"),
        "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt": (
            "a100-sxm4-40gb",
            "intra_node",
        ),
        "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt": ("b200", "scale_out"),
        "nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt": ("h100-sxm", "scale_out"),
        "nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt": ("h100-sxm", "scale_out"),
    }
    for name, (chip, resource) in expect.items():
        parsed = read_input(str(LOGS / name), (Axis.ROW,))
        found, _, _ = detect_chip([parsed], None)
        assert (found.name if found else None) == chip, name
        assert parsed.resource == resource, name


def test_the_two_layouts_of_the_issue_parse(repo_root, tmp_path):
    """An MPI run named like nccl_all_gather_perf.txt (test name inside a
    longer file name, no test line in the text), and a markdown note with
    `./build/sendrecv_perf ... -g 8`, the header and four rows."""
    text = (LOGS / "nccl_all_gather_perf_gb300_2node.txt").read_text()
    text = "\n".join(ln for ln in text.splitlines() if "all_gather_perf" not in ln)
    named = tmp_path / "nccl_all_gather_perf.txt"
    named.write_text(text)
    parsed = read_input(str(named), (Axis.ROW,))
    assert parsed.collectives[0].op.value == "all_gather" and len(parsed.collectives) == 23
    note = read_input(str(LOGS / "a100_sendrecv_note.md"), (Axis.ROW,))
    assert [s.ring_size for s in note.collectives] == [2] * 4  # send-recv: one hop
    assert "rank count from the command line" in note.description
    assert "8 ranks on 1 host" in note.description


def test_the_layouts_of_the_newer_logs_parse(tmp_path):
    """A log kept without its command line, named only by the file name
    (8 x A100); a wrapper script's command line and launcher chatter before
    the log (16 x B200); an mpirun command continued over lines with MPI
    warnings inside the device list (16 x H100) and right-aligned host
    names (32 x H100). Without the `#  Rank` lines the rank and host counts
    come from `--np 16 -H host:8,host:8`."""
    expect = {
        "nccl_all_reduce_perf_8xA100-SXM4-40GB_1node_galvatron.txt": ("all_reduce", 11, 8, 1),
        "nccl_all_gather_perf_16xB200_2host_gke_a4_dranet.txt": ("all_gather", 24, 16, 2),
        "nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt": ("all_reduce", 32, 16, 2),
        "nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt": ("all_reduce", 32, 32, 4),
    }
    for name, (op, rows, ranks, hosts) in expect.items():
        parsed = read_input(str(LOGS / name), (Axis.ROW,))
        assert {s.op.value for s in parsed.collectives} == {op}, name
        assert len(parsed.collectives) == rows and not parsed.skipped_lines, name
        assert {s.ring_size for s in parsed.collectives} == {ranks}, name
        assert parsed.num_hosts == hosts, name
    unnamed = tmp_path / "a100_8gpu.txt"
    unnamed.write_text((LOGS / next(iter(expect))).read_text())
    with pytest.raises(InputError, match="cannot tell which nccl-tests binary"):
        read_input(str(unnamed), (Axis.ROW,))
    source = LOGS / "nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt"
    no_ranks = tmp_path / "h100_all_reduce_no_rank_lines.txt"
    no_ranks.write_text(
        "\n".join(ln for ln in source.read_text().splitlines() if "#  Rank" not in ln)
    )
    parsed = read_input(str(no_ranks), (Axis.ROW,))
    assert {s.ring_size for s in parsed.collectives} == {16} and parsed.num_hosts == 2
    assert "rank count from the command line (16 processes" in parsed.description


def test_check_reports_the_error_above_a_32_mib_cut(repo_root, tmp_path):
    """Fit on the log cut at 32 MiB (the nccl-tests size column), then
    --check the whole log: the rows above the cut are flagged extrapolated
    and summarised apart."""
    source = LOGS / "mi300x_1node_rccl_all_reduce.txt"
    lines = source.read_text().splitlines()
    kept = [
        ln
        for ln in lines
        if not (ln.split() and ln.split()[0].isdigit() and int(ln.split()[0]) > 32 * 2**20)
    ]
    cut = tmp_path / "mi300x_cut_all_reduce.txt"
    cut.write_text("\n".join(kept) + "\n")
    cal = tmp_path / "cut.json"
    runner = CliRunner()
    assert runner.invoke(main, ["calibrate", str(cut), "--out", str(cal)]).exit_code == 0
    result = runner.invoke(
        main, ["calibrate", "--check", str(cal), str(source), "--axis", "row", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    above = [r for r in doc["rows"] if r["extrapolated"]]
    assert len(above) == 8  # 64 MiB .. 8 GiB
    summary = doc["summary"]["extrapolated"]
    assert summary["rows"] == 8 and summary["worst"] >= summary["median"] > 0
    table = runner.invoke(main, ["calibrate", "--check", str(cal), str(source), "--axis", "row"])
    print(table.output)
    assert "extrapolated" in table.output and "median" in table.output


def test_a_log_cut_while_the_bandwidth_climbs_is_warned_about(repo_root, tmp_path):
    """The 16 x MI355X log cut at a 32 MiB message: its average bandwidth
    still grows 32% per doubling at the top, so the calibration says larger
    pieces will likely run faster than predicted (fit.extrapolation and a
    warning); the full log has settled and is not warned about."""
    source = LOGS / "mi355x_2node_rccl_all_reduce_perf.txt"
    kept = [
        ln
        for ln in source.read_text().splitlines()
        if not (ln.split() and ln.split()[0].isdigit() and int(ln.split()[0]) > 32 * 2**20)
    ]
    cut = tmp_path / "mi355x_cut_all_reduce_perf.txt"
    cut.write_text("\n".join(kept) + "\n")
    runner = CliRunner()
    for log, climbing in ((cut, True), (source, False)):
        out = tmp_path / "cal.json"
        result = runner.invoke(main, ["calibrate", str(log), "--out", str(out)])
        assert result.exit_code == 0, result.output
        fit = json.loads(out.read_text())["collectives"]["all_reduce"]["scale_out"]["fit"]
        text = " ".join(result.output.split())
        assert ("will likely run faster" in fit["extrapolation"]) is climbing
        assert ("the bandwidth was still climbing" in text) is climbing


def test_gemm_table_held_out_and_never_above_peak(repo_root):
    gemms = read_input("tests/fixtures/public_gemm/h800_fp16_tilelang.csv", (Axis.ROW,)).gemms
    chip = load_chip("h100-sxm")
    peak = chip.peak_flops_per_s("fp16")
    fit = fit_gemm(gemms, "fp16", peak, chip.hbm_bytes_per_s)
    curve, constant = np.median(fit.cv_errors), np.median(fit.constant_cv_errors)
    print(f"\nheld-out median error: curve {curve:.1%}, one constant rate {constant:.1%}")
    print("   k   measured TF/s  curve TF/s  constant TF/s")
    model = fit.model()
    for g in gemms:
        flops = float(gemm_flops(g.m, g.n, g.k))
        print(
            f"{g.k:5d} {flops / g.seconds / 1e12:12.0f} "
            f"{flops / float(model.gemm_s(g.m, g.n, g.k)) / 1e12:11.0f} "
            f"{fit.constant_flops_per_s / 1e12:13.0f}"
        )
    assert curve <= GEMM_MEDIAN_MAX and curve < constant
    sizes = np.array([1, 7, 64, 256, 1000, 8192, 65536, 2**20], dtype=float)
    m, n, k = np.meshgrid(sizes, sizes, sizes)
    rate = gemm_flops(m, n, k) / model.gemm_s(m, n, k)
    assert float(rate.max()) <= peak * (1 + 1e-12)


def test_cluster_names_the_chip_for_a_log_without_device_names(repo_root, tmp_path):
    out = tmp_path / "cal.json"
    log = str(LOGS / "a100_sendrecv_note.md")
    result = CliRunner().invoke(
        main, ["calibrate", log, "--cluster", "a100-hgx", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["chip"] is not None and doc["chip"].startswith("a100")
    assert "named by --chip" in " ".join(result.output.split())
    bad = CliRunner().invoke(
        main, ["calibrate", log, "--cluster", "a100-hgx", "--chip", "mi300x", "--out", str(out)]
    )
    assert bad.exit_code == 2 and "but --chip is mi300x" in bad.stderr


#: the multi-node ring check: messages this large are transfer-bound on the
#: NICs (at 256 MiB the nominal figures' latency is under 5% of the time)
RING_SPANS_NODES_FROM_BYTES = 256 * 2**20
RING_SPANS_NODES_MAX = 0.10


def _planned_all_reduce(log: str, cluster: str, calibration) -> list[tuple[float, float, float]]:
    """(message bytes, measured s, predicted s) of a log's all-reduces as the
    planner prices a `P`-chip tensor axis spanning the cluster's nodes: a
    reduce-scatter and an all-gather of `message / P` per chip on the
    axis's placement (NIC rails, placement.scale_out_rails)."""
    from autotune.hardware.calibration import comm_model_for
    from autotune.hardware.cluster import load_cluster
    from autotune.hardware.placement import place_mesh
    from cost_models import CollectiveOp, MeshShape
    from cost_models.collectives import ring_collective_s

    samples = read_input(str(LOGS / log), (Axis.COL,)).collectives
    ranks = samples[0].ring_size
    comm = comm_model_for(calibration, place_mesh(load_cluster(cluster), MeshShape(1, ranks)))
    rs = comm.link(CollectiveOp.REDUCE_SCATTER, Axis.COL)
    ag = comm.link(CollectiveOp.ALL_GATHER, Axis.COL)
    rows = []
    for s in samples:
        piece = s.shard_bytes / 2  # an all-reduce sample's shard is both halves' pieces
        t = float(ring_collective_s(rs, ranks, piece) + ring_collective_s(ag, ranks, piece))
        rows.append((piece * ranks, s.seconds, t))
    return rows


def test_a_ring_spanning_nodes_on_the_nominal_rails(repo_root):
    """32 x H100 on 4 hosts (8 x 400 Gb/s InfiniBand each), priced with the
    data-sheet `h100-nominal` figures (never fitted to this log): a 32-chip
    ring with 8 chips per node drives 8 NIC rails (8 x 0.9 x 50 GB/s), not
    one NIC as before (then every large message was predicted 8x slow). The
    2-host log of the same thread runs faster than any ring can on 8 rails
    (its busbw, 468 GB/s at 8 GiB, is above 8 x 50): NCCL ran a tree or NVLS
    algorithm there, which the planner's ring does not model; it is printed
    for the record and held to what it measures now."""
    from autotune.loading import load_calibration

    nominal, _ = load_calibration("h100-nominal")
    for log, cluster, limit in (
        ("nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt", "h100-hgx-4n", None),
        ("nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt", "h100-hgx-2n", 0.32),
    ):
        rows = [r for r in _planned_all_reduce(log, cluster, nominal)]
        print(f"\n{log} on {cluster}, h100-nominal")
        print("   message    measured   predicted    error")
        for size, measured, predicted in rows:
            print(
                f"{size / 2**20:8.0f} MiB {measured * 1e3:8.3f} ms {predicted * 1e3:8.3f} ms "
                f"{predicted / measured - 1:+8.1%}"
            )
        large = [p / m - 1 for b, m, p in rows if b >= RING_SPANS_NODES_FROM_BYTES]
        assert len(large) >= 6
        if limit is None:
            assert max(abs(e) for e in large) <= RING_SPANS_NODES_MAX
        else:  # a tree / NVLS run: predicted slow, never fast, not worse than now
            assert 0 < min(large) and max(large) <= limit


def test_a_multi_host_fit_is_written_per_rail_and_priced_back(repo_root, tmp_path):
    """A log of 32 ranks on 4 hosts is written as one NIC rail (fitted ring
    rate / 8 chips per host); the planner gives a 32-chip axis on 4 nodes
    its 8 rails back, so the calibration prices the log as fitted. (The
    planner's all-reduce is a reduce-scatter and an all-gather derived from
    the log, each with the all-reduce's whole latency: below 256 MiB that
    latency, counted twice, dominates, so the round trip is judged above.)"""
    from autotune.loading import load_calibration

    log = "nccl_all_reduce_perf_32xH100_4host_nccl-tests-issue309.txt"
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(LOGS / log), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "32 ranks on 4 hosts cross hosts on 8 NIC rails" in " ".join(result.output.split())
    doc = json.loads(out.read_text())
    per_rail = doc["collectives"]["all_reduce"]["scale_out"]["link_bytes_per_s"]
    assert 40e9 < per_rail < 50e9  # a 400 Gb/s NIC moves at most 50 GB/s
    cal, _ = load_calibration(str(out))
    rows = _planned_all_reduce(log, "h100-hgx-4n", cal)
    errors = [abs(p / m - 1) for b, m, p in rows if b >= RING_SPANS_NODES_FROM_BYTES]
    assert np.median(errors) <= INTERPOLATION_MEDIAN_MAX
    # the same calibration checked against its own log (calibrate --check)
    check = CliRunner().invoke(
        main, ["calibrate", str(LOGS / log), "--check", str(out), "--format", "json"]
    )
    assert check.exit_code == 0, check.output
    checked = json.loads(check.output)
    assert checked["summary"]["collective"]["median"] <= INTERPOLATION_MEDIAN_MAX


#: GEMM tables split 70/30 (tests/fixtures/public_gemm/README.md): file, chip
#: preset whose peak is the ceiling, dtype, the held-out median the test
#: holds it to (None: the GEMM_MEDIAN_MAX target)
GEMM_TABLES = [
    ("h100_bf16_xla.csv", "h100-sxm", "bf16", None),
    ("b200_bf16_xla.csv", "b200", "bf16", None),
    # non-monotone rows (docs/accuracy.md "GEMM shapes"): held to what it measures
    ("mi300x_bf16_xla.csv", "mi300x", "bf16", 0.185),
    ("h800_fp8_deepgemm.csv", "h100-sxm", "fp8", None),
]
GEMM_TEST_FRACTION = 0.3


def _split(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed 70/30 split of `n` rows (training, test indices)."""
    order = np.random.default_rng(seed).permutation(n)
    cut = round(n * (1 - GEMM_TEST_FRACTION))
    return np.sort(order[:cut]), np.sort(order[cut:])


def gemm_split_errors(name: str, chip_name: str, dtype: str, tiles: bool = True):
    """Fit on 70% of a public table (the chip's peak as ceiling, its cores
    for the tile model unless `tiles` is False), predict the other 30%:
    (fit, test rows, relative errors, the chip's peak)."""
    gemms = [g for g in read_input(str(GEMMS / name), (Axis.ROW,)).gemms if g.dtype == dtype]
    chip = load_chip(chip_name)
    peak = chip.peak_flops_per_s(dtype)
    train, test = _split(len(gemms))
    fit = fit_gemm(
        [gemms[i] for i in train],
        dtype,
        peak,
        chip.hbm_bytes_per_s,
        num_cores=chip.num_cores if tiles else None,
    )
    model = fit.model()
    rows = [gemms[i] for i in test]
    errors = np.array([float(model.gemm_s(g.m, g.n, g.k)) / g.seconds - 1 for g in rows])
    return fit, rows, errors, peak


@pytest.mark.parametrize(("name", "chip_name", "dtype", "held_to"), GEMM_TABLES)
def test_gemm_tables_split_70_30(repo_root, name, chip_name, dtype, held_to):
    """The shape-aware GEMM model (tiles, waves, a fixed kernel time) fitted
    on 70% of each public table with the chip's peak as ceiling predicts
    the other 30% within GEMM_MEDIAN_MAX median, and never above peak. The
    efficiency curve alone missed the H100 table by 44% held out."""
    fit, rows, errors, peak = gemm_split_errors(name, chip_name, dtype)
    curve = gemm_split_errors(name, chip_name, dtype, tiles=False)[2]
    model = fit.model()
    print(
        f"\n{name}: the efficiency curve on the same split: median |error| "
        f"{np.median(np.abs(curve)):.1%}, largest {np.abs(curve).max():.0%}"
    )
    print(
        f"\n{name} ({chip_name} {dtype}): {fit.kind}, trained on {fit.num_points}, "
        f"tested on {len(rows)}: median |error| {np.median(np.abs(errors)):.1%}, "
        f"largest {np.abs(errors).max():.0%}"
    )
    print("      m      n      k   measured TF/s  predicted TF/s   error")
    for g, e in zip(rows, errors, strict=True):
        rate = float(gemm_flops(g.m, g.n, g.k)) / g.seconds / 1e12
        print(f"{g.m:7d}{g.n:7d}{g.k:7d} {rate:14.0f} {rate / (1 + e):15.0f} {e:+8.1%}")
    assert fit.kind == "tiles"
    assert np.median(np.abs(errors)) <= (held_to or GEMM_MEDIAN_MAX)
    sizes = np.array([1, 7, 64, 100, 256, 1000, 2112, 8192, 65536, 2**20], dtype=float)
    m, n, k = np.meshgrid(sizes, sizes, sizes)
    assert float((gemm_flops(m, n, k) / model.gemm_s(m, n, k)).max()) <= peak * (1 + 1e-12)


def test_a_real_gemm_table_is_written_with_the_tile_model(repo_root, tmp_path):
    """The H100 XLA table was refused as a poor fit with the efficiency
    curve (44% RMS); the tile model describes it, so calibrate writes it
    without --accept-poor-fit and says which model it chose and why."""
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(
        main,
        ["calibrate", str(GEMMS / "h100_bf16_xla.csv"), "--chip", "h100-sxm", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the tile model is written: held-out median error" in text
    compute = json.loads(out.read_text())["compute"]
    assert compute["efficiency_curve"] is None and compute["tile_model"]["num_cores"] == 132
    assert compute["fit"]["model"] == "tiles"
    assert compute["fit"]["cv_median_rel_error"] <= GEMM_MEDIAN_MAX
    assert compute["effective_flops_per_s"] <= 989e12


#: public nccl-tests alltoall_perf logs (tests/fixtures/public_logs/README.md):
#: file, the key calibrate writes, fitted rate over the per-chip rate it writes
ALL_TO_ALL_LOGS = [
    ("nccl_alltoall_perf_8xH100_1node_cluster01.txt", "switched", 1.0),
    # 16 ranks on 2 hosts: 2 (16 - 1) / (1 * 16) rails (coverage.all_to_all_rail_links)
    ("nccl_alltoall_perf_16xH100_2node_cluster00.txt", "scale_out", 30 / 16),
    ("nccl_alltoall_perf_80xH100_10node_cluster01.txt", "scale_out", 10 * 79 / (9 * 80)),
]


@pytest.mark.parametrize(("log", "key", "links"), ALL_TO_ALL_LOGS)
def test_all_to_all_logs_calibrate(repo_root, tmp_path, log, key, links):
    """`calibrate` reads alltoall_perf logs into an all_to_all entry of the
    resource they measured (across hosts: one NIC rail per chip), and each
    inner size left out is predicted within the 5% interpolation target."""
    fit = calibrate([str(LOGS / log)], axes=(Axis.ROW,)).comm_fits[0]
    assert fit.op.value == "all_to_all"
    assert fit.cv.interpolation[0] <= INTERPOLATION_MEDIAN_MAX, fit.cv.interpolation
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(LOGS / log), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (written,) = json.loads(out.read_text())["collectives"]["all_to_all"].items()
    assert written[0] == key
    assert written[1]["link_bytes_per_s"] == pytest.approx(fit.link_bytes_per_s / links)


def test_an_expert_all_to_all_across_ten_nodes_priced_back(repo_root, tmp_path):
    """The planner's expert all-to-all over 80 H100 (8 per node, 10 nodes:
    7 pieces over NVSwitch, then 9 over each GPU's own NIC rail,
    job/hardware.py hierarchical_all_to_all_s) with the calibration of the
    same cluster's 1-node and 10-node alltoall_perf logs gives the 10-node
    log's times back within 5% (the intra-node level, priced on top, is
    1-2% of the time)."""
    from planning import write_plan

    from autotune.hardware.layout import ParallelAxis
    from autotune.job.hardware import hardware_view
    from autotune.loading import load_plan_input
    from cost_models import MeshShape

    logs = [str(LOGS / log) for log, _, _ in ALL_TO_ALL_LOGS if "cluster01" in log]
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", *logs, "--out", str(out)])
    assert result.exit_code == 0, result.output
    training = {"global_batch_sequences": 80, "sequence_length": 2048}
    path = write_plan(tmp_path, "gpt3-175b", training, "h100-hgx-10n", calibration=str(out))
    hw = hardware_view(load_plan_input(path))
    axes = hw.expert_axes(MeshShape(1, 1), 80, 1, 1, 80)
    assert not isinstance(axes, str)
    expert = axes[1]
    assert expert.axis is ParallelAxis.EXPERT and [lv.size for lv in expert.levels] == [8, 10]
    samples = read_input(logs[1], (Axis.ROW,)).collectives
    errors = []
    for s in samples:
        size = s.shard_bytes * s.ring_size  # nccl-tests' size: each rank's whole buffer
        predicted = float(hw.hierarchical_all_to_all_s(expert, size))
        errors.append(predicted / s.seconds - 1)
        print(
            f"{size / 2**20:10.0f} MiB  measured {s.seconds * 1e3:8.3f} ms  "
            f"predicted {predicted * 1e3:8.3f} ms  {errors[-1]:+.1%}"
        )
    assert max(abs(e) for e in errors) <= INTERPOLATION_MEDIAN_MAX


#: held-out median |error| of DeepGEMM's grouped rows from its normal-GEMM
#: table (measured 9.2%; the masked rows at 256-512 tokens per group run
#: 12-28% slower than the tile model gives, docs/accuracy.md)
GROUPED_GEMM_MEDIAN_MAX = 0.10


def test_grouped_gemms_predicted_from_a_normal_gemm_table(repo_root):
    """The tile model fitted to DeepGEMM's normal FP8 GEMMs on H800 (peak
    as ceiling) predicts its grouped GEMMs (never fitted) as one kernel of
    `groups` GEMMs, as the planner prices a mixture of experts' experts
    (job/experts.py grouped_gemm_s); never above peak."""
    chip = load_chip("h100-sxm")
    peak = chip.peak_flops_per_s("fp8")
    normal = read_input(str(GEMMS / "h800_fp8_deepgemm.csv"), (Axis.ROW,)).gemms
    fit = fit_gemm(normal, "fp8", peak, chip.hbm_bytes_per_s, num_cores=chip.num_cores)
    model = fit.model()
    grouped = read_input(str(GEMMS / "h800_fp8_deepgemm_grouped.csv"), (Axis.ROW,)).gemms
    assert len(grouped) == 10 and {g.groups for g in grouped} == {1, 2, 4, 8}
    errors = []
    for g in grouped:
        predicted = float(model.gemm_s(g.m, g.n, g.k, g.groups))
        assert g.flops / predicted <= peak * (1 + 1e-9)
        errors.append(predicted / g.seconds - 1)
        print(
            f"{g.label:38s} measured {g.flops / g.seconds / 1e12:6.0f} TFLOP/s  "
            f"predicted {g.flops / predicted / 1e12:6.0f}  {errors[-1]:+.1%}"
        )
    median = float(np.median(np.abs(errors)))
    print(f"median |error| {median:.1%}")
    assert median <= GROUPED_GEMM_MEDIAN_MAX
