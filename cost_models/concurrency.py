"""Collectives that run at the same time: traffic on one resource adds,
traffic on separate resources overlaps (hardware.md section 1)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from cost_models.types import Axis, CommModel


def resource_key(comm: CommModel, axis: Axis) -> str:
    """The resource traffic on `axis` runs on: the named resource, or the
    axis's own links when the model names none."""
    if comm.resources is not None and comm.resources.get(axis) is not None:
        return comm.resources[axis]
    return f"{axis.value} links"


def concurrent_s(calls: Sequence[tuple[Axis, ArrayLike, ArrayLike]], comm: CommModel) -> np.ndarray:
    """Seconds until every one of several concurrently issued collectives
    has finished.

    Each call is `(axis, latency_s, transfer_s)`: its latency (launch plus
    ring synchronisation) and its bytes over the axis's bandwidth. Calls are
    grouped by the resource under their axis (:func:`resource_key`); a group
    on one resource takes::

        t_group = max( max_i(latency_i + transfer_i),  min_i(latency_i) + sum_i(transfer_i) )

    (no collective finishes before it would alone; the shared bandwidth must
    carry every group member's bytes once the first has started), and the
    calls finish at the slowest group::

        t = max over groups of t_group

    so two collectives on separate links (torus rows and columns, xGMI peer
    sets, NVLink beside the NIC) overlap, while two in one NVSwitch domain
    pay row plus column bytes (hardware.md section 1). With one call per
    resource this is the slowest call, the seed 000 model. Vectorised over
    the arrays; an empty list takes no time.
    """
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for axis, latency, transfer in calls:
        groups.setdefault(resource_key(comm, axis), []).append(
            (np.asarray(latency, dtype=float), np.asarray(transfer, dtype=float))
        )
    total = np.asarray(0.0)
    for members in groups.values():
        alone = members[0][0] + members[0][1]
        first = members[0][0]
        carried = members[0][1]
        for latency, transfer in members[1:]:
            alone = np.maximum(alone, latency + transfer)
            first = np.minimum(first, latency)
            carried = carried + transfer
        total = np.maximum(total, np.maximum(alone, first + carried))
    return total


def overlapped_pair_saving_s(
    data_comm_s: float,
    data_compute_s: float,
    weight_comm_s: float,
    weight_compute_s: float,
    overlap_slowdown: float,
) -> float:
    """Seconds saved in a column-parallel layer's backward when each GEMM's
    collective runs beside the other GEMM (Megatron-LM's asynchronous
    tensor-parallel all-reduce; Korthikanti et al. 2022 section 6.2).

    Blocking, the two GEMMs and their collectives take
    `c_d + x_d + c_w + x_w` (`c` communication, `x` compute, `d` the
    input-gradient GEMM, `w` the weight-gradient GEMM). Overlapped, the
    input gradient's all-reduce (reduce-scatter) `c_d` runs beside the
    weight-gradient GEMM and the input's re-gather `c_w` beside the
    input-gradient GEMM; compute beside a collective is slowed by
    `overlap_slowdown` (`s`, the calibration's), so each pair takes
    `max(c, s x)`. Saving = `sum over pairs (c + x - max(c, s x))`,
    clipped at 0 (a pair never takes longer than blocking). Seconds.
    """
    saving = 0.0
    for comm, compute in ((data_comm_s, weight_compute_s), (weight_comm_s, data_compute_s)):
        saving += max(comm + compute - max(comm, overlap_slowdown * compute), 0.0)
    return saving
