"""Write `a100_measured.json`: an A100 calibration fitted by `meshtune
calibrate` from public measurements (calibration_data/measured/README.md
cites each), with the measured HBM bandwidth for memory-bound kernels.

Run from the repository root: `python calibration_data/make_measured.py`.

What is measured and what is not:
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

Nothing here is fitted to, or chosen by, the published training runs the
tests compare with (tests/fixtures/published/).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
INPUTS = (
    HERE / "measured" / "all_reduce_perf_dgx_a100_8gpu.txt",
    HERE / "measured" / "gemm_a100_sxm4_80gb_azure.csv",
)
OUT = HERE / "a100_measured.json"
# BabelStream Triad, Azure ND A100 v4 (8 x A100-SXM4-80GB): 1.70 TB/s
# (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md,
# commit 3bb66cacc25632d8ece36bc1d5128c5ea886a60b).
HBM_TRIAD_BYTES_PER_S = 1.70e12


def main() -> None:
    from autotune.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "a100_measured.json"
        args = ["calibrate", *(str(p) for p in INPUTS), "--chip", "a100-sxm4-80gb"]
        args += ["--base", "a100-nominal", "--collective-model", "regimes", "--out", str(raw)]
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            cli(args, standalone_mode=False)
        doc = json.loads(raw.read_text())
    doc["name"] = "a100-measured"
    for item in doc["inputs"]:
        item["path"] = str(Path(item["path"]).relative_to(HERE.parent))
    doc["source"] = doc["source"].replace(str(HERE.parent) + os.sep, "")
    doc["compute"]["hbm_bytes_per_s"] = HBM_TRIAD_BYTES_PER_S
    doc["source"] += (
        "; HBM 1.70 TB/s: BabelStream Triad on an A100-SXM4-80GB (Azure ND A100 v4, "
        "calibration_data/measured/README.md), set by calibration_data/make_measured.py"
    )
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
