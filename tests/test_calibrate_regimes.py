"""Size regimes and the roofline: hand-computed formula tables, properties,
the regime fit on synthetic curves, derivations, and the parser's rank
count from command lines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.calibrate.coverage import derive_links
from autotune.calibrate.fit_compute import fit_gemm
from autotune.calibrate.nccl_tests import _file_test_name, _launch_from_command
from autotune.calibrate.regimes import choose_regime_count, fit_regimes, with_top_regime
from autotune.calibrate.samples import GemmSample
from autotune.errors import InputError
from autotune.specs.calibration import LinkSpec, RegimeSpec
from cost_models import (
    ComputeModel,
    LinkParams,
    LinkRegime,
    gemm_flops,
    ring_collective_terms,
    roofline_gemm_s,
    send_recv_cost,
)

TWO = LinkParams(
    launch_s=20e-6,
    sync_s=2e-6,
    link_bytes_per_s=1e10,
    regimes=(
        LinkRegime(1000.0, 10e-6, 1e-6, 1e9),
        LinkRegime(math.inf, 20e-6, 2e-6, 1e10),
    ),
)


@pytest.mark.parametrize(
    ("shard", "launch", "sync", "transfer"),
    [
        # P = 4: three steps; regime 0 up to 1000 B (bound included), regime 1 above
        (500.0, 10e-6, 3e-6, 3 * 500 / 1e9),
        (1000.0, 10e-6, 3e-6, 3 * 1000 / 1e9),
        (2000.0, 20e-6, 6e-6, 3 * 2000 / 1e10),
    ],
)
def test_ring_terms_use_the_regime_of_the_piece(shard, launch, sync, transfer):
    got = ring_collective_terms(TWO, 4, shard)
    assert [float(x) for x in got] == pytest.approx([launch, sync, transfer])


def test_ring_terms_vectorised_over_regimes():
    launch, sync, transfer = ring_collective_terms(TWO, 3, np.array([10.0, 5000.0]))
    assert launch.tolist() == pytest.approx([10e-6, 20e-6])
    assert sync.tolist() == pytest.approx([2e-6, 4e-6])
    assert transfer.tolist() == pytest.approx([2 * 10 / 1e9, 2 * 5000 / 1e10])


@given(
    launch=st.floats(0, 1e-3),
    sync=st.floats(0, 1e-4),
    bw=st.floats(1e6, 1e12),
    ring=st.integers(1, 64),
    shard=st.floats(0, 1e9),
)
@settings(max_examples=50, deadline=None)
def test_without_regimes_the_line_is_unchanged(launch, sync, bw, ring, shard):
    link = LinkParams(launch, sync, bw)
    got = [float(x) for x in ring_collective_terms(link, ring, shard)]
    if ring <= 1:
        assert got == [0.0, 0.0, 0.0]
    else:
        assert got == [launch, (ring - 1) * sync, (ring - 1) * shard / bw]


def test_send_recv_uses_the_message_regime():
    cost = send_recv_cost(TWO, 5000.0)
    assert (cost.launch_s, cost.sync_s, cost.transfer_s) == pytest.approx(
        (20e-6, 2e-6, 5000 / 1e10)
    )
    assert TWO.at(10.0) == LinkParams(10e-6, 1e-6, 1e9)


def test_regime_bounds_must_increase_and_end_unbounded():
    with pytest.raises(AssertionError):
        LinkParams(0, 0, 1, regimes=(LinkRegime(1e3, 0, 0, 1), LinkRegime(10.0, 0, 0, 1)))
    with pytest.raises(ValueError, match="only the last regime"):
        LinkSpec(
            launch_s=0,
            sync_s=0,
            link_bytes_per_s=1e9,
            regimes=[RegimeSpec(max_shard_bytes=None, launch_s=0, sync_s=0, link_bytes_per_s=1e9)]
            * 2,
        )


def test_roofline_hand_computed():
    # 1024^3 GEMM: 2.147e9 FLOP at 1e15 FLOP/s = 2.147 us; 3 * 1024^2 * 2 B at 1e12 B/s = 6.29 us
    got = float(roofline_gemm_s(1024, 1024, 1024, 1e15, 1e12, 2.0))
    assert got == pytest.approx(3 * 1024**2 * 2 / 1e12)
    assert float(roofline_gemm_s(1024, 1024, 1024, 1e15, None, 2.0)) == pytest.approx(
        2 * 1024**3 / 1e15
    )


@given(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 10**6))
@settings(max_examples=100, deadline=None)
def test_a_ceiling_means_never_faster_than_peak(m, n, k):
    model = ComputeModel(2e15, 1.0, 10.0, 10.0, 10.0, ceiling_flops_per_s=1e15)
    assert float(gemm_flops(m, n, k)) / float(model.gemm_s(m, n, k)) <= 1e15 * (1 + 1e-12)


def test_beyond_the_measured_shapes_the_efficiency_stays_flat():
    model = ComputeModel(1e15, 1.0, 100.0, 100.0, 100.0, max_dims=(1000.0, 1000.0, 1000.0))
    assert float(model.efficiency(5000, 5000, 5000)) == float(model.efficiency(1000, 1000, 1000))
    assert float(model.efficiency(10, 10, 10)) < float(model.efficiency(1000, 1000, 1000))


def _two_regime_curve():
    shard = np.array([2.0**i for i in range(6, 28)])
    ring = np.full_like(shard, 8.0)
    small = shard <= 2**16
    t = np.where(small, 10e-6 + 7 * shard / 2e9, 30e-6 + 7 * shard / 4e10)
    return ring, shard, t


def test_regime_fit_recovers_a_two_regime_curve():
    ring, shard, t = _two_regime_curve()
    fit = fit_regimes(ring, shard, t, 2)
    assert fit is not None and len(fit.bounds) == 1
    assert 2**16 < fit.bounds[0] < 2**17
    (l0, s0, inv0), (l1, s1, inv1) = fit.coefs
    assert (l0, s0, 1 / inv0) == pytest.approx((10e-6, 0.0, 2e9), rel=1e-6, abs=1e-12)
    assert (l1, s1, 1 / inv1) == pytest.approx((30e-6, 0.0, 4e10), rel=1e-6, abs=1e-12)
    assert choose_regime_count(ring, shard, t)[0] >= 2


def test_a_noisy_straight_line_keeps_one_regime():
    rng = np.random.default_rng(7)
    shard = np.repeat([2.0**i for i in range(10, 28)], 3)
    ring = np.full_like(shard, 4.0)
    t = (12e-6 + 3 * shard / 3e10) * (1 + 0.05 * rng.standard_normal(shard.size))
    assert choose_regime_count(ring, shard, t)[0] == 1


def _ramp_curve(plateau_shard: float, power: float):
    """8 chips, pieces 1 KiB .. 256 MiB; the bandwidth climbs as
    piece**power up to 3e11 B/s at `plateau_shard`, flat above."""
    shard = 2.0 ** np.arange(10, 29)
    ring = np.full_like(shard, 8.0)
    bw = 3e11 * np.minimum(1.0, shard / plateau_shard) ** power
    return ring, shard, 20e-6 + 7 * shard / bw


def test_a_settled_top_extrapolates_with_the_marginal_rate():
    """8 chips, 2.5e11 B/s up to 128 MiB pieces, 3e11 B/s from there (the
    average bandwidth grows 9% over the last doubling): the regime beyond
    the measured range is the line through the two largest points, not the
    slower line through three, so a 1 GiB piece is predicted exactly:
    t(128 MiB) + 7 * (1 GiB - 128 MiB) / 3e11."""
    shard = 2.0 ** np.arange(10, 29)
    ring = np.full_like(shard, 8.0)
    knee = 2.0**27
    t_knee = 20e-6 + 7 * knee / 2.5e11
    t = np.where(shard <= knee, 20e-6 + 7 * shard / 2.5e11, t_knee + 7 * (shard - knee) / 3e11)
    fit = with_top_regime(fit_regimes(ring, shard, t, 3), ring, shard, t)
    assert fit.bounds[-1] == 2.0**28
    assert "marginal rate" in fit.extrapolation and "+9%" in fit.extrapolation
    assert not fit.still_climbing
    beyond = fit.predict(np.array([8.0]), np.array([2.0**30]))[0]
    assert beyond == pytest.approx(t_knee + 7 * (2**30 - knee) / 3e11, rel=1e-9)


def test_a_still_climbing_top_keeps_the_slower_line_and_says_so():
    """Bandwidth still rising as piece**0.5 at the largest size (the average
    bandwidth grows ~40% per doubling): the marginal rate of the last two
    sizes is not trusted; the line through the three largest predicts a
    piece beyond them slower than the curve (conservative), and the basis
    says larger pieces will likely run faster."""
    ring, shard, t = _ramp_curve(2.0**34, 0.5)
    fit = with_top_regime(fit_regimes(ring, shard, t, 3), ring, shard, t)
    assert "line through the 3 largest sizes" in fit.extrapolation
    assert "will likely run faster" in fit.extrapolation
    assert fit.still_climbing
    piece = 2.0**30
    truth = 20e-6 + 7 * piece / (3e11 * (piece / 2.0**34) ** 0.5)
    assert fit.predict(np.array([8.0]), np.array([piece]))[0] > truth


def test_all_gather_derived_from_all_reduce_is_half_of_it():
    reduce_link = LinkSpec(
        launch_s=30e-6,
        sync_s=8e-6,
        link_bytes_per_s=1e11,
        regimes=[
            RegimeSpec(max_shard_bytes=4096.0, launch_s=20e-6, sync_s=4e-6, link_bytes_per_s=1e9),
            RegimeSpec(max_shard_bytes=None, launch_s=30e-6, sync_s=8e-6, link_bytes_per_s=1e11),
        ],
    )
    links = {"all_reduce": {"row": reduce_link}}
    derived, warnings = derive_links(links, ["row"])
    gather = links["all_gather"]["row"]
    assert (gather.launch_s, gather.sync_s, gather.link_bytes_per_s) == (30e-6, 4e-6, 1e11)
    assert gather.regimes[0].max_shard_bytes == 2048.0 and gather.regimes[0].sync_s == 2e-6
    assert links["send_recv"]["row"].link_bytes_per_s == 1e11
    assert len(derived) == 3 and all("derived, not measured" in w for w in warnings)


@pytest.mark.parametrize(
    ("name", "test"),
    [
        ("nccl_all_gather_perf.txt", "all_gather"),
        ("reduce_scatter_perf_mpi.log", "reduce_scatter"),
        ("rccl_all_reduce_8gpu.log", "all_reduce"),
        ("run-alltoall_perf-2nodes.txt", "alltoall"),
        ("sendrecv.md", "sendrecv"),
        ("results.txt", None),
    ],
)
def test_test_name_anywhere_in_a_file_name(name, test):
    assert _file_test_name(name) == test


@pytest.mark.parametrize(
    ("command", "ranks", "hosts"),
    [
        ("./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8", 8, 1),
        ("./build/all_reduce_perf -t 2 -g 4 -b 8 -e 1G", 8, 1),
        ("mpirun -np 16 -H a:8,b:8 ./build/all_gather_perf -b 8 -e 8G -g 1", 16, 2),
        ("mpirun -n 32 -npernode 8 /opt/all_reduce_perf_mpi -b 8 -e 1G -n 50", 32, 4),
        ("srun --ntasks=16 --nodes=2 all_reduce_perf_mpi -b 512M -e 8G -g 1", 16, 2),
        ("torchrun --nproc_per_node 8 --nnodes 2 all_gather_perf -b 8", 16, 2),
        ("srun -N 4 -n 32 all_gather_perf_mpi -b 8 -e 1G", 32, 4),
        ("mpirun -np 16 -N 8 ./all_reduce_perf -b 8 -e 8G -g 1", 16, 2),
    ],
)
def test_rank_count_from_the_command_line(command, ranks, hosts):
    launch = _launch_from_command(command, None)
    assert launch is not None and (launch.ranks, launch.hosts) == (ranks, hosts)


def test_a_launcher_without_a_process_count_states_no_rank_count():
    assert _launch_from_command("mpirun --hostfile h ./all_reduce_perf -g 1", None) is None


def test_a_gemm_faster_than_peak_is_rejected():
    rows = [GemmSample(4096, 4096, k, "bf16", 2 * 4096 * 4096 * k / 5e14, "g.csv", i + 2)
            for i, k in enumerate((512, 1024, 2048, 4096))]  # fmt: skip
    fit_gemm(rows, "bf16", 1e15)  # half the peak: fine
    with pytest.raises(InputError, match=r"g\.csv:2: .*above the chip's bf16 peak 400 TFLOP/s"):
        fit_gemm(rows, "bf16", 4e14)


def test_an_unbounded_rate_above_peak_is_held_at_peak_and_said():
    # efficiency climbs with k towards 2x peak, measured only where it is below peak
    peak = 1e15
    rows = [
        GemmSample(8192, 8192, k, "bf16", 2 * 8192**2 * k / (2 * peak * k / (k + 4096)), "g", i)
        for i, k in enumerate((64, 128, 256, 512, 1024, 2048))
    ]
    fit = fit_gemm(rows, "bf16", peak, None)
    assert fit.effective_flops_per_s <= peak * (1 + 1e-9)
    assert "above the chip's peak and was rejected" in (fit.note or "")


def test_two_ring_sizes_separate_launch_from_sync_in_every_regime():
    sizes = np.array([2.0**i for i in range(8, 26)])
    shard = np.concatenate([sizes, sizes])
    ring = np.concatenate([np.full_like(sizes, 4.0), np.full_like(sizes, 8.0)])
    small = shard <= 2**15
    launch = np.where(small, 8e-6, 25e-6)
    sync = np.where(small, 1e-6, 3e-6)
    bw = np.where(small, 5e9, 6e10)
    t = launch + (ring - 1) * (sync + shard / bw)
    fit = fit_regimes(ring, shard, t, 2)
    assert fit is not None
    (l0, s0, inv0), (l1, s1, inv1) = fit.coefs
    assert (l0, s0, 1 / inv0) == pytest.approx((8e-6, 1e-6, 5e9), rel=1e-6)
    assert (l1, s1, 1 / inv1) == pytest.approx((25e-6, 3e-6, 6e10), rel=1e-6)


def test_check_flags_and_summarises(tmp_path, repo_root):
    from click.testing import CliRunner

    from autotune.cli import main

    runner = CliRunner()
    missing = runner.invoke(main, ["calibrate", "--check", "nope.json", "x.csv"])
    assert missing.exit_code == 2 and "nope.json" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    both = runner.invoke(
        main,
        ["calibrate", "--check", "tpu-v4", "--out", "x.json", "calibration_data/example_bench.csv"],
    )
    assert both.exit_code == 2 and "--check reads a calibration and writes nothing" in both.stderr
    neither = runner.invoke(main, ["calibrate", "calibration_data/example_bench.csv"])
    assert neither.exit_code == 2 and "needs --out" in neither.stderr
    ok = runner.invoke(
        main,
        [
            "calibrate",
            "--check",
            "tpu-v4",
            "calibration_data/example_bench.csv",
            "--format",
            "json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    import json

    doc = json.loads(ok.stdout)
    # the example CSV was generated from the tpu-v4 links (5% noise, 5% outliers) and a
    # 266e12 FLOP/s curve the preset lacks: collectives close, GEMMs off for thin shapes
    assert doc["summary"]["collective"]["median"] < 0.06
    assert doc["summary"]["all"]["rows"] == len(
        [r for r in doc["rows"] if r["rel_error"] is not None]
    )
