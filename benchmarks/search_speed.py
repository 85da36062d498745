"""Wall time and peak memory of `meshtune plan` with every degree searched
(enumeration, memory bound, FC planning of every mesh and micro-batch, the
step model with its bounds, the pipeline ILP for the configurations that
could win), wall and CPU seconds, each case in its own process:

- GPT-3 175B on 1024 A100 (128 HGX nodes), batch 1536 x 2048;
- a Llama-3-405B shape on 16384 H100 (2048 HGX nodes), batch 2048 x 8192
  (16M tokens, the Llama 3 paper's largest batch);
- GPT-3 175B on a 1024-chip TPU v5p slice (8x8x16), batch 1536 x 2048;
- GPT-3 175B on four 256-chip TPU v5p slices (examples/gpt3-tpu-v5p-auto.yaml);
- DeepSeek-V3 (examples/deepseek-v3/config.json) in FP8 on 1024 H100, batch
  1024 x 4096, expert parallelism searched too (issue: mixtures of experts,
  target under 60 s);
- Mixtral 8x7B (examples/mixtral-8x7b/config.json) on 32 H100.

Every parallel degree is searched, default constraints. Targets on an idle
2-core machine (issue: one plan): under 1 s, under 10 s and under 5 s for the
first three, peak memory under 1 GiB each. `wall` is the planning in the
process; `process` adds Python's start-up and imports (`meshtune plan` as a
user runs it, with `--format json`).

Run: python benchmarks/search_speed.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

GPT3 = "gpt3-175b"
CASES = {
    "gpt3-175b-1024xA100": {
        "model": {**{"name": "gpt3-175b", "num_layers": 96, "hidden_size": 12288},
                  "num_heads": 96, "head_dim": 128, "ffn_size": 49152, "vocab_size": 51200},
        "cluster": "a100-hgx-128n",
        "batch": 1536,
        "sequence": 2048,
        "target_s": 1.0,
    },
    "llama3-405b-16384xH100": {
        "model": {
            "name": "llama3-405b-like",
            "num_layers": 126,
            "hidden_size": 16384,
            "num_heads": 128,
            "head_dim": 128,
            "num_kv_heads": 8,
            "ffn_size": 53248,
            "ffn_kind": "swiglu",
            "vocab_size": 128256,
            "position_encoding": "rotary",
        },
        "cluster": "h100-hgx-2048n",
        "batch": 2048,
        "sequence": 8192,
        "target_s": 10.0,
    },
    "gpt3-175b-1024xTPUv5p": {
        "model": GPT3,
        "cluster": "tpu-v5p-1024",
        "batch": 1536,
        "sequence": 2048,
        "target_s": 5.0,
    },
    "gpt3-175b-4x256xTPUv5p": {
        "model": GPT3,
        "cluster": "tpu-v5p-256-4s",
        "batch": 1536,
        "sequence": 2048,
        "target_s": 5.0,
    },
    "deepseek-v3-1024xH100": {
        "model": str(REPO / "examples" / "deepseek-v3" / "config.json"),
        "cluster": "h100-hgx-128n",
        "calibration": "h100-measured",
        "fp8": "blockwise",
        "batch": 1024,
        "sequence": 4096,
        "target_s": 60.0,
    },
    "mixtral-8x7b-32xH100": {
        "model": str(REPO / "examples" / "mixtral-8x7b" / "config.json"),
        "cluster": "h100-hgx-4n",
        "batch": 256,
        "sequence": 4096,
        "target_s": 60.0,
    },
}  # fmt: skip


def _plan_file(folder: Path, name: str) -> Path:
    import yaml

    case = CASES[name]
    data = {
        "model": case["model"],
        "training": {
            "global_batch_sequences": case["batch"],
            "sequence_length": case["sequence"],
        },
        "cluster": case["cluster"],
    }
    if "fp8" in case:
        data["training"]["fp8"] = case["fp8"]
    if "calibration" in case:
        data["calibration"] = case["calibration"]
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_case(name: str) -> dict:
    """One plan in this process: seconds, counts and peak RSS."""
    sys.path.insert(0, str(REPO))
    from autotune.job.plan import make_plan
    from autotune.loading import load_plan_input

    with tempfile.TemporaryDirectory() as tmp:
        inp = load_plan_input(_plan_file(Path(tmp), name))
        t0, c0 = time.perf_counter(), time.process_time()
        plan = make_plan(inp)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = plan.outcome
    return {
        "case": name,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "candidates": s.num_candidates,
        "priced": s.num_priced,
        "balanced": s.num_balanced,
        "proved": s.proved,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30,
        "chosen": plan.config,
        "recompute": plan.recompute,
        "step_s": plan.step_s,
    }


def process_seconds(name: str) -> float:
    """`meshtune plan FILE --format json` end to end, one run."""
    exe = Path(sys.executable).with_name("meshtune")
    command = (
        [str(exe)]
        if exe.exists()
        else [sys.executable, "-c", "from autotune.cli import main; main()"]
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = _plan_file(Path(tmp), name)
        t0 = time.perf_counter()
        subprocess.run(
            [*command, "plan", str(path), "--format", "json"], cwd=REPO, check=True,
            capture_output=True,
        )  # fmt: skip
        return time.perf_counter() - t0


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2])))
        return
    only = sys.argv[1:] or list(CASES)
    print(
        f"{'case':24} {'wall':>7} {'cpu':>7} {'process':>8} {'target':>7} {'peak RSS':>9} "
        f"{'cands':>6} {'priced':>6} {'ILP':>4}  chosen"
    )
    for name in only:
        case = CASES[name]
        res = subprocess.run(
            [sys.executable, __file__, "--case", name],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        )
        r = json.loads(res.stdout.strip().splitlines()[-1])
        c = r["chosen"]
        print(
            f"{name:24} {r['seconds']:6.2f}s {r['cpu_seconds']:6.2f}s "
            f"{process_seconds(name):7.2f}s {case['target_s']:6.0f}s "
            f"{r['peak_rss_gib']:7.2f}GiB "
            f"{r['candidates']:6d} {r['priced']:6d} {r['balanced']:4d}  "
            f"TP {c['rows']}x{c['cols']} CP {c.get('cp', 1)} PP {c['pp']} DP {c['dp']} "
            f"EP {c.get('ep', 1)} "
            f"mbs {c['mbs']} v {c['v']} "
            f"{r['recompute']} ZeRO {c['zero']}: {r['step_s']:.2f} s"
            + ("" if r["proved"] else " (best not proved within the solve budget)")
        )


if __name__ == "__main__":
    main()
