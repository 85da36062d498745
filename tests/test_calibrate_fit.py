"""Collective and GEMM fits: round trips from known parameters, the
identifiability rules, and the efficiency curve against one constant rate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.calibrate.fit_comm import fit_collective, ring_model_s
from autotune.calibrate.fit_compute import constant_rate_flops_per_s, fit_gemm
from autotune.calibrate.samples import CollectiveSample, GemmSample
from cost_models import Axis, CollectiveOp

RINGS = (2, 4, 8)
SHARDS = tuple(float(2**e) for e in range(13, 30))  # 8 KiB .. 512 MiB, as in seed 000


def _samples(
    launch,
    sync,
    bw,
    *,
    rings=RINGS,
    shards=SHARDS,
    reps=2,
    noise=0.0,
    outliers=0.0,
    seed=0,
    op=CollectiveOp.ALL_GATHER,
):
    rng = np.random.default_rng(seed)
    out = []
    for p in rings:
        for shard in shards:
            for _ in range(reps):
                t = float(ring_model_s(launch, sync, 1.0 / bw, p, shard))
                t *= 1.0 + noise * rng.standard_normal()
                if rng.random() < outliers:
                    t *= rng.uniform(1.5, 4.0)
                out.append(CollectiveSample(op, Axis.ROW, p, shard, t, "synthetic.csv", len(out)))
    return out


@pytest.mark.parametrize(
    ("t_s", "launch", "sync", "bw", "p", "shard"),
    [
        # 13us + 1*(5us + 27.472 MB / 27.472 GB/s = 1 ms) = 1.018 ms
        (1.018e-3, 13e-6, 5e-6, 27.472e9, 2, 27.472e6),
        # 26us + 3*(5us + 0) = 41 us (zero-byte shard: latency only)
        (41e-6, 26e-6, 5e-6, 37.506e9, 4, 0.0),
        # 0 + 7*(0 + 1 GB / 100 GB/s = 10 ms) = 70 ms
        (70e-3, 0.0, 0.0, 100e9, 8, 1e9),
    ],
)
def test_ring_model_hand_computed(t_s, launch, sync, bw, p, shard):
    assert ring_model_s(launch, sync, 1.0 / bw, p, shard) == pytest.approx(t_s, rel=1e-12)


ROUND_TRIP_RINGS = (2, 4, 8, 16)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(
    ("launch", "sync", "bw"),
    # the TPU v4 all-gather row/col and reduce-scatter col links (model.md section 4)
    [(13e-6, 5e-6, 27.472e9), (13e-6, 5e-6, 79.751e9), (26e-6, 5e-6, 63.167e9)],
)
def test_round_trip_noise_and_outliers(seed, launch, sync, bw):
    """5% noise and 5% gross outliers (x1.5 to x4), rings of 2..16 chips,
    8 KiB..512 MiB shards, 3 repeats: every parameter back within 5%."""
    rows = _samples(
        launch, sync, bw, rings=ROUND_TRIP_RINGS, reps=3, noise=0.05, outliers=0.05, seed=seed
    )
    fit = fit_collective(rows)
    assert fit.identifiable == ("launch_s", "sync_s", "link_bytes_per_s")
    assert fit.launch_s == pytest.approx(launch, rel=0.05)
    assert fit.sync_s == pytest.approx(sync, rel=0.05)
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=0.05)
    assert fit.num_outliers >= 1
    assert fit.launch_s_stderr is not None and fit.launch_s_stderr < 0.05 * launch


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_round_trip_send_recv_with_enough_repeats(seed):
    """TPU v4 send-recv (launch 13 us, sync 50 us): launch is a fifth of one
    sync, so 5% noise on times of 63 us and more needs more repeats to pin
    it; with 20 repeats per point (nccl-tests' own default iteration count)
    every parameter comes back within 5% despite 5% gross outliers."""
    launch, sync, bw = 13e-6, 50e-6, 35.224e9
    rows = _samples(
        launch, sync, bw, rings=ROUND_TRIP_RINGS, reps=20, noise=0.05, outliers=0.05, seed=seed
    )
    fit = fit_collective(rows)
    assert fit.identifiable == ("launch_s", "sync_s", "link_bytes_per_s")
    assert fit.launch_s == pytest.approx(launch, rel=0.05)
    assert fit.sync_s == pytest.approx(sync, rel=0.05)
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=0.05)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_send_recv_data_reports_its_uncertainty(seed):
    """With only 3 repeats the same launch is known to roughly +-10%: the
    fit must say so through its stderr rather than claim precision."""
    launch, sync, bw = 13e-6, 50e-6, 35.224e9
    rows = _samples(
        launch, sync, bw, rings=ROUND_TRIP_RINGS, reps=3, noise=0.05, outliers=0.05, seed=seed
    )
    fit = fit_collective(rows)
    assert fit.sync_s == pytest.approx(sync, rel=0.05)
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=0.05)
    assert fit.launch_s_stderr > 0.03 * launch
    assert abs(fit.launch_s - launch) < 3.5 * fit.launch_s_stderr


def test_single_ring_keeps_the_identifiable_combination():
    """One ring size: only launch + (P-1)*sync is determined, and is kept."""
    launch, sync, bw, p = 13e-6, 5e-6, 27.472e9, 4
    fit = fit_collective(
        _samples(launch, sync, bw, rings=(p,), reps=3, noise=0.05, outliers=0.05, seed=3)
    )
    assert fit.usable
    assert fit.combined_latency_s == pytest.approx(launch + (p - 1) * sync, rel=0.05)
    assert fit.launch_s == fit.combined_latency_s and fit.sync_s == 0.0
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=0.05)
    assert "launch_s + 3*sync_s" in fit.identifiable and "sync_s" not in fit.identifiable
    assert "only launch_s + (P-1)*sync_s" in fit.note


def test_single_shard_size_cannot_give_a_bandwidth():
    fit = fit_collective(_samples(13e-6, 5e-6, 27e9, shards=(1e6,), reps=2))
    assert not fit.usable
    assert "cannot be separated" in fit.note
    assert fit.link_bytes_per_s is None


@settings(max_examples=30, deadline=None)
@given(
    launch=st.floats(1e-6, 1e-4),
    sync=st.floats(1e-7, 1e-4),
    bw=st.floats(1e9, 1e12),
)
def test_exact_data_is_recovered_exactly(launch, sync, bw):
    """Noise-free data from any non-negative parameters fits exactly (and
    stays one straight line)."""
    fit = fit_collective(_samples(launch, sync, bw, reps=1))
    assert fit.model == "linear"
    assert fit.rms_rel_error < 1e-6
    assert fit.launch_s == pytest.approx(launch, rel=1e-3, abs=1e-9)
    assert fit.sync_s == pytest.approx(sync, rel=1e-3, abs=1e-9)
    assert fit.link_bytes_per_s == pytest.approx(bw, rel=1e-4)


# -- GEMMs -------------------------------------------------------------------


def _tiled_gpu_gemm_s(m: int, n: int, k: int) -> float:
    """A 'measured' GEMM time from a model deliberately different from the
    fitted curve: 128x128 output tiles spread in waves over 108 cores, each
    tile streaming k in chunks of 64 at 0.9 TFLOP/s per core, plus a 6 us
    launch (tile and wave quantisation, not smooth saturation)."""
    tiles = -(-m // 128) * -(-n // 128)
    waves = -(-tiles // 108)
    k_steps = -(-k // 64)
    tile_s = k_steps * 2 * 128 * 128 * 64 / 0.9e12 + 0.4e-6
    return 6e-6 + waves * tile_s


def test_efficiency_curve_predicts_held_out_gemms_better_than_one_rate(capsys):
    dims = (32, 96, 256, 768, 2048, 6144, 12288)
    rng = np.random.default_rng(7)
    table = [
        GemmSample(m, n, k, "bf16", _tiled_gpu_gemm_s(m, n, k), "table", i)
        for i, (m, n, k) in enumerate((m, n, k) for m in dims for n in dims for k in dims)
    ]
    order = rng.permutation(len(table))
    train = [table[i] for i in order[: len(table) // 2]]
    test = [table[i] for i in order[len(table) // 2 :]]
    fit = fit_gemm(train)
    model = fit.model()
    rate = constant_rate_flops_per_s(train)
    measured = np.array([s.seconds for s in test])
    curve = np.array([float(model.gemm_s(s.m, s.n, s.k)) for s in test])
    const = np.array([2.0 * s.m * s.n * s.k / rate for s in test])
    curve_err = float(np.sqrt(np.mean((curve / measured - 1) ** 2)))
    const_err = float(np.sqrt(np.mean((const / measured - 1) ** 2)))
    curve_log = float(np.sqrt(np.mean(np.log(curve / measured) ** 2)))
    const_log = float(np.sqrt(np.mean(np.log(const / measured) ** 2)))
    with capsys.disabled():
        print(
            f"\nheld-out GEMMs ({len(test)}): efficiency curve RMS rel error {curve_err:.1%} "
            f"(log {curve_log:.3f}), one constant rate {const_err:.1%} (log {const_log:.3f})"
        )
    assert curve_log < 0.5 * const_log
    assert curve_err < const_err


def test_gemm_round_trip_recovers_rate_and_halves():
    from cost_models import ComputeModel

    truth = ComputeModel(266e12, 1.0, 128.0, 128.0, 256.0)
    rng = np.random.default_rng(11)
    dims = (64, 256, 1024, 4096, 12288)
    rows = []
    for m in dims:
        for n in dims:
            for k in dims:
                t = float(truth.gemm_s(m, n, k)) * (1 + 0.05 * rng.standard_normal())
                if rng.random() < 0.05:
                    t *= 2.5
                rows.append(GemmSample(m, n, k, "bf16", t, "x", len(rows)))
    fit = fit_gemm(rows)
    assert fit.effective_flops_per_s == pytest.approx(266e12, rel=0.05)
    assert fit.halves == pytest.approx((128.0, 128.0, 256.0), rel=0.05)


def test_gemm_single_size_dimension_is_absorbed():
    rows = [
        GemmSample(4096, n, 4096, "fp16", 2.0 * 4096 * n * 4096 / 1e14 * (1 + 64 / n), "x", i)
        for i, n in enumerate((64, 256, 1024, 4096))
    ]
    rows.append(GemmSample(4096, 4096, 4096, "fp32", 1.0, "x", 9))
    fit = fit_gemm(rows)
    assert fit.dtype == "fp16" and fit.other_dtypes == ("fp32",)
    assert fit.halves[0] == 0.0 and fit.halves[2] == 0.0
    assert fit.halves[1] == pytest.approx(64.0, rel=1e-3)
    assert "one size of m, k" in fit.note


def _grouped_table() -> list[GemmSample]:
    """GEMMs and grouped GEMMs timed by a known tile model (132 cores, a
    4 us launch, 64-element k overhead, 800 TFLOP/s): the grouped rows'
    tiles share the waves of one kernel."""
    from cost_models import ComputeModel
    from cost_models.compute import TileModel

    truth = ComputeModel(
        8e14,
        1.0,
        0.0,
        0.0,
        0.0,
        hbm_bytes_per_s=3.35e12,
        tile=TileModel(num_cores=132, launch_s=4e-6, k_overhead=64.0),
    )
    rows, line = [], 2
    for m in (256, 1024, 4096):
        for n in (512, 2048, 8192):
            for k in (512, 2048, 8192):
                rows.append(GemmSample(m, n, k, "bf16", float(truth.gemm_s(m, n, k)), "t", line))
                line += 1
    for groups in (4, 16, 64):
        for m in (64, 384, 2048):
            for n, k in ((1536, 2048), (2048, 768)):
                t = float(truth.gemm_s(m, n, k, groups))
                rows.append(GemmSample(m, n, k, "bf16", t, "t", line, groups))
                line += 1
    return rows


def test_grouped_gemm_rows_are_fitted_as_one_kernel_of_groups():
    """A grouped GEMM row is `groups` GEMMs in one kernel: the fit counts
    their FLOPs and lets their tiles share waves, so held-out grouped rows
    are predicted from the others; read as single GEMMs they would be off
    by up to the group count."""
    rows = _grouped_table()
    grouped = [s for s in rows if s.groups > 1]
    assert grouped[0].flops == 2.0 * 64 * 1536 * 2048 * 4
    assert grouped[0].label == "gemm 64x1536x2048 x4 groups bf16"
    held = grouped[::3]
    train = [s for s in rows if s not in held]
    fit = fit_gemm(train, peak_flops_per_s=9.89e14, hbm_bytes_per_s=3.35e12, num_cores=132)
    assert fit.kind == "tiles"
    model = fit.model()
    errors = [abs(float(model.gemm_s(s.m, s.n, s.k, s.groups)) / s.seconds - 1.0) for s in held]
    assert max(errors) < 0.05
    single = [abs(float(model.gemm_s(s.m, s.n, s.k)) / s.seconds - 1.0) for s in held]
    assert max(single) > 0.5
