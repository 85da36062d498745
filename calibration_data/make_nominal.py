"""Write the nominal calibrations (`*_nominal.json`): data-sheet link and
compute figures times a stated efficiency, latencies from public
measurements, every number with its source in the file's `source` text.

Run from the repository root: `python calibration_data/make_nominal.py`.
Nothing here is fitted; a calibration from your own nccl-tests logs and
GEMM benchmarks (`meshtune calibrate`) replaces these.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS = ("all_gather", "reduce_scatter", "send_recv")

# NCCL in one NVSwitch node: nccl-tests all_gather on 8 H100 shows a flat
# ~35 us floor up to about 1 MiB and reaches ~80% of the 450 GB/s per
# direction only at GiB sizes (hardware.md section 2); read as
# launch + 7 * sync = 35 us with 1 us per ring step.
NVLINK_EFFICIENCY = 0.80
NVLINK_LAUNCH_S = 28e-6
NVLINK_SYNC_S = 1e-6
# NCCL across nodes on 400 Gb/s rails: ~90% of line rate at large sizes,
# a higher floor (network proxy, a few us of IB latency per ring step).
NIC_EFFICIENCY = 0.90
NIC_LAUNCH_S = 40e-6
NIC_SYNC_S = 5e-6
# Large dense bf16 GEMMs on NVIDIA datacenter GPUs run at about 80% of the
# dense peak (seed 003: 1024x4096x4096 fp16 in ~43 us on one H100, 81%).
NVIDIA_GEMM_EFFICIENCY = 0.80
# Compute slowed by concurrent NCCL kernels (SM and memory contention):
# Galvatron's overlap coefficient and Calculon's processor_usage put it at
# 1.1-1.3; the low end, as a collective matmul kernel keeps most SMs busy.
GPU_OVERLAP_SLOWDOWN = 1.1
# TPU ICI: the MeshSlice authors' TPU v4 col-axis fit reaches 79.75 of the
# 2 x 45 GB/s of a wrapped dimension (89%); their 13 us / 5 us latencies are
# the only published TPU collective latencies, reused for v5p/v5e/v6e.
ICI_EFFICIENCY = 0.85
ICI_LATENCY = {
    "all_gather": (13e-6, 5e-6),
    "reduce_scatter": (26e-6, 5e-6),
    "send_recv": (13e-6, 50e-6),
}
TPU_GEMM_EFFICIENCY = 0.90
# TPU multi-slice: chips of different slices talk over their hosts' NICs
# (the data-center network). Per-chip rate = the host's NIC bandwidth over
# its chips: JAX scaling book "How to think about TPUs" (jax-ml/scaling-book
# tpus.md @ 04d8de58: "DCN bandwidth is typically around 2.5e10 bytes /
# second per host"; v5p hosts 2x2x1 = 4 chips) and Google Cloud's TPU v6e
# page (NICs per host: v5e 2 x 100 Gb/s, v6e 4 x 200 Gb/s; 8 chips a host).
# Efficiency and latencies as the GPUs' NICs (assumed, not measured on TPU).

LATENCY_NOTE_GPU = (
    "Latencies: NCCL's small-message floor of ~35 us on 8 NVSwitch-connected H100s "
    f"(public nccl-tests runs, hardware.md section 2) split as launch {NVLINK_LAUNCH_S * 1e6:g} us "
    f"+ {NVLINK_SYNC_S * 1e6:g} us per ring step; across nodes launch {NIC_LAUNCH_S * 1e6:g} us, "
    f"{NIC_SYNC_S * 1e6:g} us per step (assumed). Overlap slowdown {GPU_OVERLAP_SLOWDOWN} "
    "(Galvatron overlap coefficient / Calculon processor_usage: 1.1-1.3)."
)


def _links(
    switched_bps: float | None,
    fc_link_bps: float | None,
    nic_bps: float,
    fabric_eff: float,
    lat: tuple[float, float],
) -> dict:
    out = {}
    for op in OPS:
        entry = {}
        if switched_bps is not None:
            entry["switched"] = {
                "launch_s": lat[0],
                "sync_s": lat[1],
                "link_bytes_per_s": switched_bps * fabric_eff,
            }
        if fc_link_bps is not None:
            entry["fully_connected"] = {
                "launch_s": lat[0],
                "sync_s": lat[1],
                "link_bytes_per_s": fc_link_bps * fabric_eff,
            }
        entry["scale_out"] = {
            "launch_s": NIC_LAUNCH_S,
            "sync_s": NIC_SYNC_S,
            "link_bytes_per_s": nic_bps * NIC_EFFICIENCY,
        }
        out[op] = entry
    return out


def _tpu_links(link_bps: float, dcn_bps: float) -> dict:
    return {
        op: {
            "torus": {
                "launch_s": ICI_LATENCY[op][0],
                "sync_s": ICI_LATENCY[op][1],
                "link_bytes_per_s": link_bps * ICI_EFFICIENCY,
            },
            "dcn": {
                "launch_s": NIC_LAUNCH_S,
                "sync_s": NIC_SYNC_S,
                "link_bytes_per_s": dcn_bps * NIC_EFFICIENCY,
            },
        }
        for op in OPS
    }


def _doc(
    name: str, source: str, collectives: dict, peak_flops: float, eff: float, slowdown: float
) -> dict:
    return {
        "schema": "meshtune.calibration/1",
        "name": name,
        "source": source,
        "tool_version": None,
        "collectives": collectives,
        "compute": {
            "dtype": "bf16",
            "effective_flops_per_s": peak_flops * eff,
            "efficiency_curve": None,
            "fit": None,
        },
        "overlap_slowdown": slowdown,
        "figures": "nominal",
        "inputs": [],
    }


def _gpu(
    name: str,
    chip: str,
    egress_gbps: float | None,
    fc_link_gbps: float | None,
    nic_gbps: float,
    peak_tflops: float,
    fabric_eff: float,
    gemm_eff: float,
    extra: str,
) -> dict:
    fabric = (
        f"NVSwitch egress {egress_gbps:g} GB/s per direction x {fabric_eff}"
        if egress_gbps
        else f"xGMI {fc_link_gbps:g} GB/s per link per direction x {fabric_eff}"
    )
    source = (
        f"Nominal ({chip} data sheet x stated efficiency; nothing fitted). {fabric}; NIC "
        f"{nic_gbps:g} GB/s per GPU x {NIC_EFFICIENCY}; compute {peak_tflops:g} TFLOP/s bf16 dense "
        f"peak x {gemm_eff}. {extra} " + LATENCY_NOTE_GPU
    )
    links = _links(
        egress_gbps * 1e9 if egress_gbps else None,
        fc_link_gbps * 1e9 if fc_link_gbps else None,
        nic_gbps * 1e9,
        fabric_eff,
        (NVLINK_LAUNCH_S, NVLINK_SYNC_S),
    )
    return _doc(name, source, links, peak_tflops * 1e12, gemm_eff, GPU_OVERLAP_SLOWDOWN)


def _tpu(
    name: str, chip: str, link_gbps: float, peak_tflops: float, dcn_gbps: float, dcn_note: str
) -> dict:
    source = (
        f"Nominal ({chip}: JAX scaling book TPU tables x stated efficiency; nothing fitted). ICI "
        f"{link_gbps:g} GB/s per link per direction x {ICI_EFFICIENCY} (the MeshSlice authors' "
        f"TPU v4 col-axis fit reaches 89% of 2 x 45 GB/s); compute {peak_tflops:g} TFLOP/s bf16 x "
        f"{TPU_GEMM_EFFICIENCY}. WARNING: launch and sync latencies are TPU v4's (the MeshSlice "
        "authors' autotuner: all-gather 13/5 us, reduce-scatter 26/5 us, send-recv 13/50 us), "
        "not measured on this chip. Overlap slowdown 1.0 (the paper's TPU assumption). "
        f"Data-center network between slices: {dcn_gbps:g} GB/s per chip ({dcn_note}) x "
        f"{NIC_EFFICIENCY}, launch {NIC_LAUNCH_S * 1e6:g} us and {NIC_SYNC_S * 1e6:g} us per "
        "ring step (assumed as for GPU NICs, not measured)."
    )
    return _doc(
        name,
        source,
        _tpu_links(link_gbps * 1e9, dcn_gbps * 1e9),
        peak_tflops * 1e12,
        TPU_GEMM_EFFICIENCY,
        1.0,
    )


CALIBRATIONS = {
    "a100_nominal.json": _gpu(
        "a100-nominal",
        "NVIDIA A100 SXM4",
        300,
        None,
        25,
        312,
        NVLINK_EFFICIENCY,
        NVIDIA_GEMM_EFFICIENCY,
        "NIC: ConnectX-6 HDR 200 Gb/s. The one bundled A100 calibration: 0.8 x 312 = 249.6 "
        "TFLOP/s for every GEMM sits below the 267.9 TFLOP/s maximum achievable bf16 matmul "
        "rate measured on an A100 SXM (stas00/ml-engineering, compute/accelerator/README.md), "
        "as a mix of training GEMM shapes should; a calibration at that ceiling with the "
        "data-sheet link rates predicted every published Megatron-LM run in "
        "docs/accuracy.md worse, so it is not bundled.",
    ),
    "h100_nominal.json": _gpu(
        "h100-nominal",
        "NVIDIA H100 SXM",
        450,
        None,
        50,
        989,
        NVLINK_EFFICIENCY,
        NVIDIA_GEMM_EFFICIENCY,
        "NIC: ConnectX-7 400 Gb/s. Also used for H200 (same NVLink 4 and peak).",
    ),
    "b200_nominal.json": _gpu(
        "b200-nominal",
        "NVIDIA B200",
        900,
        None,
        50,
        2250,
        NVLINK_EFFICIENCY,
        NVIDIA_GEMM_EFFICIENCY,
        "NIC: ConnectX-7 400 Gb/s. Also used for GB200 NVL72 (same NVLink 5 "
        "per GPU; the rate stays below the GB200 peak of 2500).",
    ),
    "mi300x_nominal.json": _gpu(
        "mi300x-nominal",
        "AMD MI300X",
        None,
        64,
        50,
        1307.4,
        0.75,
        0.5,
        "xGMI: about 48 of 64 GB/s per link usable (hardware.md "
        "section 1). Compute: public MI300X bf16 GEMM benchmarks reach "
        "roughly half the dense peak (assumed 0.5). RCCL latencies "
        "assumed equal to NCCL's.",
    ),
    "tpu_v5p_nominal.json": _tpu(
        "tpu-v5p-nominal",
        "TPU v5p",
        90,
        459,
        6.25,
        "JAX scaling book: ~2.5e10 B/s per host of 4 chips",
    ),
    "tpu_v5e_nominal.json": _tpu(
        "tpu-v5e-nominal",
        "TPU v5e",
        45,
        197,
        3.125,
        "Google Cloud TPU v6e page: 2 x 100 Gb/s NICs per v5e host of 8 chips",
    ),
    "tpu_v6e_nominal.json": _tpu(
        "tpu-v6e-nominal",
        "TPU v6e",
        90,
        918,
        12.5,
        "Google Cloud TPU v6e page: 4 x 200 Gb/s NICs per host of 8 chips",
    ),
}


def main() -> None:
    """Write every nominal calibration next to this script."""
    for filename, doc in CALIBRATIONS.items():
        (HERE / filename).write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
