"""The 1D ring link model: one ring through all chips of a 2D torus (seed 000
section 5.1, figure 10), shared by 1D tensor parallelism and FSDP."""

from __future__ import annotations

from cost_models.types import Axis, CollectiveOp, CommModel, LinkParams

TORUS_LINKS_PER_CHIP = 4
"""A 2D torus chip has four links: two on its mesh row ring, two on its
mesh column ring. A 2D GEMM drives both rings at once."""

RING_LINKS_PER_CHIP = 2
"""A single ring through all chips enters and leaves each chip once, so it
drives two of the four links (seed 000 section 5.1, figure 10)."""


def ring_link(comm: CommModel, op: CollectiveOp) -> LinkParams:
    """Link parameters of `op` on one ring through all chips of the torus.

    Derivation: a ring through all `Nr x Nc` chips of a torus (a snake
    through the mesh rows, closed along a column) uses one link into and
    one out of every chip, two of its four links, and makes hops on both
    mesh axes (every mesh row contributes a row-axis hop). A ring collective
    advances in lock step, so each step lasts as long as its slowest hop::

        launch_s         = max(launch_s over row, col)
        sync_s           = max(sync_s over row, col)
        link_bytes_per_s = min(link_bytes_per_s over row, col)

    Axes the calibration lacks are skipped; at least one must be present.
    With size regimes (cost_models.types.LinkRegime) the axis with the lower
    large-message bandwidth is used as it is.
    The calibration's per-axis rings already run on two links each (a row
    ring or a column ring), so the 1D ring gets one axis's worth of links
    while a 2D algorithm drives both axes concurrently: half the links.
    """
    links = [comm.link(op, ax) for ax in (Axis.ROW, Axis.COL) if comm.has(op, ax)]
    if not links:
        comm.link(op, Axis.ROW)  # raises the calibration-gap KeyError
    if any(lk.regimes for lk in links):
        # size regimes do not combine field by field: take the axis whose
        # large-message bandwidth is lowest, whole (its slowest hop bounds the ring)
        return min(links, key=lambda lk: lk.link_bytes_per_s)
    return LinkParams(
        launch_s=max(lk.launch_s for lk in links),
        sync_s=max(lk.sync_s for lk in links),
        link_bytes_per_s=min(lk.link_bytes_per_s for lk in links),
    )


def ring_comm_model(comm: CommModel) -> CommModel:
    """A CommModel whose both axes carry :func:`ring_link` for every
    operation the calibration covers: the link model of a 1D ring of all
    chips, usable with any 2D formula on a `1 x N` or `N x 1` mesh."""
    ops = {op for op, _ in comm.params}
    params = {}
    for op in ops:
        link = ring_link(comm, op)
        params[(op, Axis.ROW)] = link
        params[(op, Axis.COL)] = link
    return CommModel(params)
