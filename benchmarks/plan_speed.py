"""Wall time of planning GPT-3 and Megatron-NLG at 16 to 4096 chips
(weak scaling: batch = chips / 2 sequences of 2048 tokens), of the whole
training step (FC plan + job model) of every bundled example and of the
largest published Megatron-LM runs (1T on 3072 GPUs, 64 stages, 512
micro-batches), and of the `meshtune plan` command end to end. Target: well
under a second per plan.

Run: python benchmarks/plan_speed.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from autotune.job.plan import make_plan
from autotune.loading import (
    load_calibration,
    load_cluster_spec,
    load_model_spec,
    load_plan_input,
)
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
    whole_step()

    exe = Path(sys.executable).with_name("meshtune")
    # without an installed entry point, time the same CLI through the interpreter
    command = (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "from autotune.cli import main; main()"]
    )
    for args in (["--version"], ["plan", "examples/gpt3.yaml", "--format", "json"]):
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([*command, *args], cwd=REPO, check=True, capture_output=True)
            runs.append(time.perf_counter() - t0)
        print(
            f"`meshtune {' '.join(args)}` wall time (median of 3): "
            f"{statistics.median(runs) * 1e3:.0f} ms"
        )


JOB_EXAMPLES = (
    "examples/gpt3.yaml",
    "examples/llama3-70b.yaml",
    "examples/megatron-nlg.yaml",
    "examples/megatron-gpt-175b-a100.yaml",
)


def _published_1t(tmp: Path) -> str:
    """Narayanan et al. SC'21's 1T run: TP 8, PP 64, DP 6, 512 micro-batches."""
    import yaml

    data = {
        "model": {
            "name": "gpt-1t",
            "num_layers": 128,
            "hidden_size": 25600,
            "num_heads": 160,
            "head_dim": 160,
            "ffn_size": 102400,
            "vocab_size": 51200,
        },
        "training": {
            "global_batch_sequences": 3072,
            "sequence_length": 2048,
            "pipeline_parallel": 64,
            "data_parallel": 6,
            "tensor_parallel": 8,
            "micro_batch_size": 1,
            "interleave": 1,
            "recompute": "full",
            "zero_stage": 0,
            "layer_split": "even",
            "fc_algorithm": "megatron-1d",
            "attention": "unfused",
        },
        "cluster": "a100-hgx-384n",
    }
    path = tmp / "gpt-1t.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def whole_step() -> None:
    """FC plan plus the whole-step model, one configuration at a time."""
    import os
    import tempfile

    os.chdir(REPO)
    with tempfile.TemporaryDirectory() as tmp:
        files = [*JOB_EXAMPLES, _published_1t(Path(tmp))]
        print(f"\n{'whole plan, pinned degrees':<44}{'step':>10}{'wall time (median of 5)':>26}")
        worst = 0.0
        for file in files:
            inp = load_plan_input(file, None, None)
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                job = make_plan(inp, suggest_better=False)
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            worst = max(worst, med)
            name = Path(file).name if file in JOB_EXAMPLES else "Narayanan 1T, 3072 GPUs"
            print(f"{name:<44}{job.step_s:>9.2f}s{med * 1e3:>23.1f} ms")
        print(f"slowest whole-step plan: {worst * 1e3:.1f} ms (target: well under 1000 ms)")


if __name__ == "__main__":
    main()
