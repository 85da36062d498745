"""Wall time of planning GPT-3 and Megatron-NLG at 16 to 4096 chips
(weak scaling: batch = chips / 2 sequences of 2048 tokens), and of the
`meshtune plan` command end to end. Target: well under a second per plan.

Run: python benchmarks/plan_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from autotune.loading import load_calibration, load_cluster_spec, load_model_spec
from autotune.plan.search import plan
from autotune.specs import PlanInput, SearchSpec, TrainingSpec

REPO = Path(__file__).resolve().parent.parent
CHIPS = (16, 64, 256, 1024, 4096)
MODELS = ("gpt3-175b", "megatron-nlg-530b")


def plan_input(model: str, chips: int) -> PlanInput:
    cluster, _ = load_cluster_spec("tpu-v4-256")
    calibration, _ = load_calibration("tpu-v4")
    return PlanInput(
        model=load_model_spec(model),
        training=TrainingSpec(global_batch_sequences=max(chips // 2, 1), sequence_length=2048),
        cluster=cluster.model_copy(update={"num_chips": chips}),
        calibration=calibration,
        search=SearchSpec(),
    )


def main() -> None:
    print(f"{'model':<20}{'chips':>6}{'meshes':>8}{'best mesh':>11}{'plan time (median of 5)':>26}")
    worst = 0.0
    for model in MODELS:
        for chips in CHIPS:
            inp = plan_input(model, chips)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                result = plan(inp)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            worst = max(worst, med)
            print(
                f"{model:<20}{chips:>6}{len(result.candidates):>8}{result.mesh!s:>11}"
                f"{med * 1e3:>22.1f} ms"
            )
    print(f"slowest plan: {worst * 1e3:.1f} ms (target: well under 1000 ms)")

    exe = Path(sys.executable).with_name("meshtune")
    for args in (["--version"], ["plan", "examples/gpt3.yaml", "--format", "json"]):
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([str(exe), *args], cwd=REPO, check=True, capture_output=True)
            runs.append(time.perf_counter() - t0)
        print(
            f"`meshtune {' '.join(args)}` wall time (median of 3): "
            f"{statistics.median(runs) * 1e3:.0f} ms"
        )


if __name__ == "__main__":
    main()
