"""What a calibration holds when the inputs do not measure everything: the
chip (from the logs' device lines, or named), links derived from measured
ones, and compute from the chip preset. Every such value is listed in the
calibration (`derived`, `from_preset`) and warned about in the report.

Derivations (docs/calibrate.md "Coverage"):

- all-gather and reduce-scatter from all-reduce: a ring all-reduce is a
  reduce-scatter followed by an all-gather over the same pieces (nccl-tests
  doc/PERFORMANCE.md), so each is half of it. meshtune writes an all-reduce
  of buffer B as P-1 steps of 2B/P bytes (autotune.calibrate.nccl_tests), so
  an all-gather piece s = B/P is half an all-reduce piece: the derived link
  keeps launch_s and link_bytes_per_s, halves sync_s (a pair of steps
  becomes one) and halves every regime bound. NVLink SHARP (NVLS) and tree
  all-reduces are not rings; the warning says so.
- send-recv from all-gather: one ring step of an all-gather is a
  neighbour send-recv of one piece (P - 1 = 1 hop), so the all-gather link
  is used as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.calibrate.samples import ParsedFile
from autotune.errors import InputError
from autotune.specs.calibration import LinkSpec, RegimeSpec
from autotune.specs.chip import ChipSpec


def detect_chip(
    files: Sequence[ParsedFile], chip_ref: str | None
) -> tuple[ChipSpec | None, str, list[str]]:
    """The chip of the calibration, how it was found, and warnings. A named
    chip wins; otherwise the device lines of the logs must all match one
    preset."""
    from autotune.hardware.chips import load_chip, match_chip, match_chip_family

    warnings: list[str] = []
    devices = sorted({d for f in files for d in f.device_names})
    if chip_ref is not None:
        chip = load_chip(chip_ref, field="--chip")
        found = {match_chip(d) for d in devices} - {None}
        if found and found != {chip.name}:
            warnings.append(
                f"--chip {chip.name} but the logs name {', '.join(devices)} "
                f"(preset {', '.join(sorted(found))}); using {chip.name}"
            )
        return chip, f"named by --chip ({chip_ref})", warnings
    if not devices:
        return None, "no device named in the inputs", warnings
    matched = {d: match_chip(d) for d in devices}
    for device in [d for d, m in matched.items() if m is None]:
        family = match_chip_family(device)
        if len(family) == 1:
            matched[device] = family[0]
            warnings.append(
                f"the device line {device!r} names only the chip's family; took {family[0]} "
                "(pass --chip for another part of the family, e.g. a PCIe card)"
            )
        elif family:
            return (
                None,
                (
                    f"{device!r} names only the chip's family: pass --chip "
                    f"{' or --chip '.join(family)}"
                ),
                warnings,
            )
    names = set(matched.values())
    if None in names or len(names) != 1:
        unknown = [d for d, m in matched.items() if m is None]
        why = (
            f"no chip preset matches {', '.join(repr(d) for d in unknown)}"
            if unknown
            else f"the logs name several chips ({', '.join(sorted(n for n in names if n))})"
        )
        return None, why, warnings
    name = names.pop()
    assert name is not None
    return load_chip(name), f"matched from the device lines ({', '.join(devices)})", warnings


def _halved(link: LinkSpec) -> LinkSpec:
    regimes = None
    if link.regimes:
        regimes = [
            RegimeSpec(
                max_shard_bytes=None if r.max_shard_bytes is None else r.max_shard_bytes / 2,
                launch_s=r.launch_s,
                sync_s=r.sync_s / 2,
                link_bytes_per_s=r.link_bytes_per_s,
            )
            for r in link.regimes
        ]
    return LinkSpec(
        launch_s=link.launch_s,
        sync_s=link.sync_s / 2,
        link_bytes_per_s=link.link_bytes_per_s,
        regimes=regimes,
        fit=None,
    )


def derive_links(
    collectives: dict[str, dict[str, LinkSpec]], axes: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Fill, in place, the planner's pairs that can be derived from measured
    ones; returns (derived entries with how, warnings)."""
    derived: list[str] = []
    warnings: list[str] = []
    for axis in axes:
        reduce_link = collectives.get("all_reduce", {}).get(axis)
        for op in ("all_gather", "reduce_scatter"):
            if reduce_link is not None and axis not in collectives.get(op, {}):
                collectives.setdefault(op, {})[axis] = _halved(reduce_link)
                how = f"{op}.{axis} from all_reduce.{axis} (half a ring all-reduce)"
                derived.append(how)
                warnings.append(
                    f"{how}: derived, not measured; an NVLS or tree all-reduce is not a "
                    f"ring, so measure {op}_perf for a direct value"
                )
        gather = collectives.get("all_gather", {}).get(axis)
        if gather is not None and axis not in collectives.get("send_recv", {}):
            collectives.setdefault("send_recv", {})[axis] = gather.model_copy(update={"fit": None})
            how = f"send_recv.{axis} from all_gather.{axis} (one ring step)"
            derived.append(how)
            warnings.append(f"{how}: derived, not measured; measure sendrecv_perf")
    return derived, warnings


def preset_compute_rate(chip: ChipSpec, dtype: str = "bf16") -> float:
    """The chip's nominal peak for `dtype`, FLOP/s (InputError when the
    preset lists none)."""
    try:
        return chip.peak_flops_per_s(dtype)
    except KeyError as exc:
        raise InputError(
            str(exc.args[0]),
            field="compute",
            fix="add gemm rows (meshtune bench) or pass --chip with a preset listing bf16",
        ) from None


#: the intra-node resource of a chip vendor's nodes (hardware.md section 1):
#: NVIDIA boards (HGX, NVL72) put every GPU on NVSwitch; an AMD MI300X
#: board links each GPU directly to the seven others (xGMI)
INTRA_NODE_KIND = {"NVIDIA": "switched", "AMD": "fully_connected"}


def rails_per_host(ranks: int, num_hosts: int) -> int:
    """NIC rails a ring of `ranks` on `num_hosts` hosts drives at once: its
    chips per host when the hosts hold equal shares, else 1 (see
    :func:`resource_key`)."""
    if num_hosts > 1 and ranks % num_hosts == 0:
        return max(1, ranks // num_hosts)
    return 1


def all_to_all_rail_links(ranks: int, num_hosts: int) -> float:
    """Unit links (NIC rails) an all-to-all log of `ranks` on `num_hosts`
    hosts spans, as meshtune fits it: `H (P - 1) / ((H - 1) P)`.

    Derivation: the fit reads a log as `P - 1` pieces of `S / P` per rank
    (`S` nccl-tests' size), so `t = (P - 1) S / (P bw_fit)`; of a rank's
    `S` bytes, the `(P - P / H) / P = (H - 1) / H` bound for other hosts
    leave on its own NIC rail, all peers at once, so one rail runs at
    `(H - 1) S / (H t) = bw_fit (H - 1) P / (H (P - 1))`. The planner
    prices the expert axis's scale-out level as `H - 1` pieces of `S / H`
    on one rail per chip (job/hardware.py hierarchical_all_to_all_s), which
    gives the log's time back (its intra-node part, a few percent, on
    top)."""
    h, p = num_hosts, ranks
    return h * (p - 1) / ((h - 1) * p)


def all_to_all_piece_scale(fit, key: str | None) -> float:
    """How much larger the planner's scale-out piece is than the log's for
    an all-to-all across hosts: the fit's piece is `S / P`, the planner's
    scale-out level sends `H - 1` pieces of `S / H` (`P / H` times larger;
    all_to_all_rail_links), so regime bounds and the measured range are
    written in its pieces. 1 for everything else. `fit` a
    fit_comm.CommFit."""
    if fit.op.value != "all_to_all" or key != "scale_out" or not fit.num_hosts:
        return 1.0
    return float(rails_per_host(max(fit.ring_sizes), fit.num_hosts))


def resource_key(
    resource: str | None,
    chip: ChipSpec | None,
    ring_sizes: Sequence[int],
    num_hosts: int | None = None,
    op: str = "all_gather",
) -> tuple[str | None, float, str]:
    """The calibration key a log's fit is written under, the number of unit
    links its fitted bandwidth spans (the key holds one unit link), and why.

    A multi-host log measured the scale-out NICs (key `scale_out`, one NIC
    rail per chip). NCCL and RCCL lay a ring of `P` ranks on `H` hosts so
    that it leaves each host once per channel and run one channel per NIC
    rail: the `P / H` chips of a host drive their `P / H` rails at once, so
    the fitted ring rate spans `P / H` rails (derivation: every hop of a
    ring carries the same bytes; the bytes leaving a host are one hop's,
    spread over its rails). Placement gives a group with `a` chips per node
    `a` rails back (hardware/placement.py). A single-host log measured the
    chip's node: `switched` (the per-chip egress into NVSwitch, one unit)
    or `fully_connected` (a ring of P chips on an xGMI board drives its P -
    1 direct links at once, so one link carries 1/(P - 1) of the fitted
    rate; placement gives an axis of k chips k - 1 links back). An
    all-to-all across hosts spans :func:`all_to_all_rail_links` rails
    instead (every rank sends to every other at once, on its own rail).
    Unknown chip or hosts: no key (None), the fit stays on the mesh axes."""
    if resource == "scale_out":
        ranks = max(ring_sizes)
        if op == "all_to_all" and num_hosts and num_hosts > 1:
            links = all_to_all_rail_links(ranks, num_hosts)
            return (
                "scale_out",
                links,
                f"several hosts: {ranks} ranks on {num_hosts} hosts each send "
                f"{num_hosts - 1}/{num_hosts} of their bytes off-host on their own NIC rail "
                f"(fitted rate / {links:.3g} = one rail per chip)",
            )
        rails = rails_per_host(ranks, num_hosts) if num_hosts else 1
        if rails > 1:
            return (
                "scale_out",
                float(rails),
                f"several hosts: {ranks} ranks on {num_hosts} hosts cross hosts on "
                f"{rails} NIC rails at once (fitted rate / {rails} rails = one rail per chip)",
            )
        return "scale_out", 1.0, "several hosts: the scale-out NICs (per chip)"
    if resource != "intra_node":
        return None, 1.0, "hosts not stated: written per mesh axis (row, col)"
    kind = INTRA_NODE_KIND.get(chip.vendor) if chip is not None else None
    if kind is None:
        what = "chip unknown" if chip is None else f"no node kind known for {chip.vendor}"
        return None, 1.0, f"one host, {what}: written per mesh axis (row, col)"
    if kind == "switched":
        return kind, 1.0, f"one host of {chip.name}: NVSwitch (per-chip egress)"
    links = max(ring_sizes) - 1
    return (
        kind,
        float(links),
        (f"one host of {chip.name}: direct links (fitted rate / {links} links = one link)"),
    )
