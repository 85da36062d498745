"""Wall time and peak memory of a full joint search (enumeration, memory
pruning, closed-form pricing, pipeline ILP for the finalists), wall and
CPU seconds:

- GPT-3 175B on 1024 A100 (128 HGX nodes), batch 1536 x 2048;
- a Llama-3-405B shape on 16384 H100 (2048 HGX nodes), batch 2048 x 8192
  (16M tokens, the Llama 3 paper's largest batch).

Every parallel degree is on `auto`, default constraints. Each case runs in
its own process so its peak resident memory is its own. Targets on a 2-core
machine: under 10 s and under 60 s, peak memory under 2 GiB.

Run: python benchmarks/search_speed.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CASES = {
    "gpt3-175b-1024xA100": {
        "model": dict(
            name="gpt3-175b",
            num_layers=96,
            hidden_size=12288,
            num_heads=96,
            head_dim=128,
            ffn_size=49152,
            vocab_size=51200,
        ),
        "cluster": "a100-hgx-128n",
        "batch": 1536,
        "sequence": 2048,
        "target_s": 10.0,
    },
    "llama3-405b-16384xH100": {
        "model": dict(
            name="llama3-405b-like",
            num_layers=126,
            hidden_size=16384,
            num_heads=128,
            head_dim=128,
            num_kv_heads=8,
            ffn_size=53248,
            ffn_kind="swiglu",
            vocab_size=128256,
        ),
        "cluster": "h100-hgx-2048n",
        "batch": 2048,
        "sequence": 8192,
        "target_s": 60.0,
    },
}


def run_case(name: str) -> dict:
    """One search in this process: seconds, counts and peak RSS."""
    sys.path.insert(0, str(REPO))
    from autotune.job.cluster_view import load_search_hardware
    from autotune.job.search import search
    from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
    from autotune.specs.model import ModelSpec

    case = CASES[name]
    model = ModelSpec(**case["model"])
    hw = load_search_hardware(case["cluster"], "bf16")
    train = AutoTrainingSpec(global_batch_sequences=case["batch"], sequence_length=case["sequence"])
    t0, c0 = time.perf_counter(), time.process_time()
    out = search(model, hw, train, SearchConstraints())
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    best = out.ranked[0]
    return {
        "case": name,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "candidates": out.num_candidates,
        "pruned": out.num_pruned_by_memory_bound,
        "priced": out.num_priced,
        "balanced": out.num_balanced,
        "proved": out.proved,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30,
        "chosen": best.config,
        "step_s": best.step_s,
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(run_case(sys.argv[2])))
        return
    print(
        f"{'case':24} {'wall':>8} {'cpu':>8} {'target':>7} {'peak RSS':>9} {'cands':>6} "
        f"{'priced':>6} {'ILP':>4}  chosen"
    )
    for name, case in CASES.items():
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
            f"{name:24} {r['seconds']:7.2f}s {r['cpu_seconds']:7.2f}s {case['target_s']:6.0f}s "
            f"{r['peak_rss_gib']:7.2f}GiB "
            f"{r['candidates']:6d} {r['priced']:6d} {r['balanced']:4d}  "
            f"TP {c['rows']}x{c['cols']} PP {c['pp']} DP {c['dp']} mbs {c['mbs']} v {c['v']} "
            f"{c['recompute']} ZeRO {c['zero']}: {r['step_s']:.2f} s"
            + ("" if r["proved"] else " (best not proved within the solve budget)")
        )


if __name__ == "__main__":
    main()
