"""The linear ring-collective model (model.md section 4), hand-computed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cost_models import (
    LinkParams,
    LinkRegime,
    pipelined_broadcast_cost,
    ring_collective_cost,
    ring_collective_s,
    send_recv_cost,
)

LINK = LinkParams(launch_s=10e-6, sync_s=2e-6, link_bytes_per_s=1e9)


@pytest.mark.parametrize(
    ("ring_size", "shard_bytes", "launch", "sync", "transfer"),
    [
        # P=5, 1e6 B: 10us + 4*(2us + 1e6/1e9 s) = 10us + 8us + 4ms
        (5, 1e6, 10e-6, 8e-6, 4e-3),
        # P=2, empty shard: launch + one sync only
        (2, 0.0, 10e-6, 2e-6, 0.0),
        # P=1: nothing to send, nothing to pay
        (1, 1e6, 0.0, 0.0, 0.0),
        # P=16, 64 KiB: 15 steps of 2us and 65536/1e9 s
        (16, 65536.0, 10e-6, 30e-6, 15 * 65.536e-6),
    ],
)
def test_ring_collective_hand_values(ring_size, shard_bytes, launch, sync, transfer):
    cost = ring_collective_cost(LINK, ring_size, shard_bytes)
    assert cost.launch_s == pytest.approx(launch)
    assert cost.sync_s == pytest.approx(sync)
    assert cost.transfer_s == pytest.approx(transfer)
    assert cost.total_s == pytest.approx(launch + sync + transfer)


def test_tpu_v4_all_gather_row_value():
    # TPU v4 all-gather on the row axis (model.md section 4), P=4, 1 MiB:
    # 13us + 3*(5us + 1048576/27.472e9 s) = 13 + 3*(5 + 38.16890...) us = 142.5067 us
    link = LinkParams(13e-6, 5e-6, 27.472e9)
    assert ring_collective_cost(link, 4, 1048576).total_s == pytest.approx(142.5067e-6, rel=1e-6)


def test_pipelined_broadcast_hand_value():
    # D=4 packets over P=3 chips: D+P-2 = 5 link stages of (2us + 250 B / 1e9)
    cost = pipelined_broadcast_cost(LINK, 3, 1000.0, 4)
    assert cost.sync_s == pytest.approx(5 * 2e-6)
    assert cost.transfer_s == pytest.approx(5 * 250e-9)
    assert cost.launch_s == pytest.approx(10e-6)


def test_send_recv_hops():
    # 2 hops of 1e3 B: 10us + 2*(2us + 1us)
    assert send_recv_cost(LINK, 1e3, 2).total_s == pytest.approx(16e-6)
    assert send_recv_cost(LINK, 1e3, 0).total_s == 0.0


@given(
    ring=st.integers(min_value=2, max_value=512),
    shard=st.floats(min_value=0, max_value=1e10),
    extra=st.floats(min_value=1, max_value=1e9),
)
def test_ring_collective_monotone(ring, shard, extra):
    t1 = ring_collective_cost(LINK, ring, shard).total_s
    assert ring_collective_cost(LINK, ring, shard + extra).total_s > t1
    assert ring_collective_cost(LINK, ring + 1, shard).total_s > t1
    assert math.isfinite(t1) and t1 >= LINK.launch_s


def test_ring_sizes_vectorised_with_regimes():
    # Pieces up to 1 kB: 5us + (P-1)(1us + b/1e8); above: 10us + (P-1)(2us + b/1e9).
    # P = 1, 2, 5 with 500 B, 500 B, 1e6 B pieces:
    #   P=1: nothing; P=2: 5us + 1us + 5us = 11us; P=5: 10us + 4*(2us + 1ms).
    link = LinkParams(
        10e-6,
        2e-6,
        1e9,
        regimes=(LinkRegime(1e3, 5e-6, 1e-6, 1e8), LinkRegime(math.inf, 10e-6, 2e-6, 1e9)),
    )
    t = ring_collective_s(link, np.array([1, 2, 5]), np.array([500.0, 500.0, 1e6]))
    assert t == pytest.approx([0.0, 11e-6, 10e-6 + 4 * (2e-6 + 1e-3)])
    # each element as the scalar ring size gives it
    for p, b, want in zip((1, 2, 5), (500.0, 500.0, 1e6), t, strict=True):
        assert float(ring_collective_s(link, p, b)) == want
