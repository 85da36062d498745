"""Write `a100_measured.json`, `h100_measured.json` and
`h100_measured_fa2.json`: calibrations fitted
by `meshtune calibrate` from public measurements
(calibration_data/measured/README.md cites each), with the measured HBM
bandwidth for memory-bound kernels.

Run from the repository root: `python calibration_data/make_measured.py`.

a100-measured:
- NVSwitch links: fitted from a captured nccl-tests all_reduce_perf log of
  one DGX A100 (8 x A100-SXM4-40GB, 1 MiB-1 GiB), with size regimes
  (NCCL changes protocol and channel count with size; one straight line
  misses 1-128 MiB messages by up to 38%). The all-gather and reduce-scatter
  are derived from it as half a ring all-reduce (calibrate says so).
- GEMMs: the model `calibrate` chooses by held-out error from eight
  cuBLASLt shapes measured on an A100-SXM4-80GB (FP16, whose dense peak
  equals BF16's), bounded by the 312 TFLOP/s peak: the tile model (tiles and
  waves over the A100's 108 SMs; 5.6% held out against the efficiency
  curve's 8.3%).
- HBM: 1.70 TB/s, BabelStream Triad on the same A100-SXM4-80GB (83% of the
  2,039 GB/s data-sheet rate); calibrate takes the chip preset's nominal
  rate, so it is set here.
- Not measured, kept from `a100-nominal` with calibrate's warnings: the
  scale-out (NIC) links and the overlap slowdown.

h100-measured:
- GEMMs: bf16 from XLA's H100 (sm_90) GEMM table, fp8 (compute_fp8) from
  Azure's cuBLASLt FP8 table on ND H100 v5; each the model `calibrate`
  chooses by held-out error, bounded by the bf16 and fp8 peaks.
- Attention: FlashAttention-3's forward rate on one H100 at head dim 128
  (pytorch/benchmark's tritonbench table), fitted to a rate saturating in
  the sequence length.
- Scale-out links: nccl-tests all_reduce_perf on 32 x H100 in 4 hosts (8 x
  400 Gb/s InfiniBand each), size regimes, per NIC rail.
- HBM: 2.97 TB/s, BabelStream Triad on ND H100 v5 (H100 80GB HBM3).
- Not measured, kept from `h100-nominal` with calibrate's warnings: the
  NVSwitch links and the overlap slowdown.

h100-measured-fa2: h100-measured with FlashAttention-2's attention (the
flash-attn package, forward and backward, full and causal masks, one
Hopper GPU, head dim 128; pytorch/benchmark's tritonbench table) in place
of FlashAttention-3's, for stacks whose attention is FlashAttention-2
(Transformer Engine with its cuDNN backend off, PyTorch's SDPA of 2024).

Nothing here is fitted to, or chosen by, the published training runs the
tests compare with (tests/fixtures/published/, published_fp8_cp/).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "measured"


@dataclass(frozen=True)
class Recipe:
    """One measured calibration: its inputs, chip, base and HBM rate."""

    name: str
    out: Path
    inputs: tuple[Path, ...]
    chip: str
    base: str
    hbm_bytes_per_s: float
    hbm_note: str


_H100_MEASURED = Recipe(
    name="h100-measured",
    out=HERE / "h100_measured.json",
    inputs=(
        MEASURED / "all_reduce_perf_32xh100_4host.txt",
        MEASURED / "gemm_h100_bf16_xla.csv",
        MEASURED / "gemm_h100_fp8_azure.csv",
        MEASURED / "attention_h100_fa3_tritonbench.csv",
        MEASURED / "attention_backward_h100_fa3_tritonbench.csv",
    ),
    chip="h100-sxm",
    base="h100-nominal",
    # BabelStream Triad, Azure ND H100 v5 (H100 80GB HBM3): 2.97 TB/s
    # (Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md,
    # commit ae0b6a7f47caee92985aafc546faf30e9d4a3ca7, table "HBM Bandwidth").
    hbm_bytes_per_s=2.97e12,
    hbm_note="HBM 2.97 TB/s: BabelStream Triad on an H100 80GB HBM3 (Azure ND H100 v5",
)

RECIPES = (
    Recipe(
        name="a100-measured",
        out=HERE / "a100_measured.json",
        inputs=(
            MEASURED / "all_reduce_perf_dgx_a100_8gpu.txt",
            MEASURED / "gemm_a100_sxm4_80gb_azure.csv",
        ),
        chip="a100-sxm4-80gb",
        base="a100-nominal",
        # BabelStream Triad, Azure ND A100 v4 (8 x A100-SXM4-80GB): 1.70 TB/s
        # (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md,
        # commit 3bb66cacc25632d8ece36bc1d5128c5ea886a60b).
        hbm_bytes_per_s=1.70e12,
        hbm_note="HBM 1.70 TB/s: BabelStream Triad on an A100-SXM4-80GB (Azure ND A100 v4",
    ),
    _H100_MEASURED,
    # the same measurements with FlashAttention-2's attention rows in place
    # of FlashAttention-3's (forward and backward in one file)
    replace(
        _H100_MEASURED,
        name="h100-measured-fa2",
        out=HERE / "h100_measured_fa2.json",
        inputs=(
            *(p for p in _H100_MEASURED.inputs if "attention" not in p.name),
            MEASURED / "attention_h100_fa2_tritonbench.csv",
        ),
    ),
)


def build(recipe: Recipe) -> None:
    """Calibrate the recipe's inputs and write its file."""
    from autotune.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / recipe.out.name
        args = ["calibrate", *(str(p) for p in recipe.inputs), "--chip", recipe.chip]
        args += ["--base", recipe.base, "--collective-model", "regimes", "--out", str(raw)]
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            cli(args, standalone_mode=False)
        doc = json.loads(raw.read_text())
    doc["name"] = recipe.name
    for item in doc["inputs"]:
        item["path"] = str(Path(item["path"]).relative_to(HERE.parent))
    doc["source"] = doc["source"].replace(str(HERE.parent) + os.sep, "")
    doc["compute"]["hbm_bytes_per_s"] = recipe.hbm_bytes_per_s
    if doc.get("compute_fp8") is not None:
        doc["compute_fp8"]["hbm_bytes_per_s"] = recipe.hbm_bytes_per_s
    doc["source"] += (
        f"; {recipe.hbm_note}, calibration_data/measured/README.md), set by "
        "calibration_data/make_measured.py"
    )
    # no path of the machine that built the file (outlier rows name their file)
    text = json.dumps(doc, indent=2).replace(str(HERE.parent) + os.sep, "")
    recipe.out.write_text(text + "\n")
    print(f"wrote {recipe.out.relative_to(HERE.parent)}")


def main() -> None:
    for recipe in RECIPES:
        build(recipe)


if __name__ == "__main__":
    main()
