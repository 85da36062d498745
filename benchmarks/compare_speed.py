"""How long `meshtune compare` takes for GPT-3 and Megatron-NLG over 16..256
chips (target: a few seconds). Prints the wall time of each sweep."""

from __future__ import annotations

import time
from pathlib import Path

from autotune.compare.comparison import compare
from autotune.loading import load_plan_input

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """Time both sweeps, in process (imports excluded) and end to end."""
    total = 0.0
    for name in ("gpt3", "megatron-nlg"):
        inp = load_plan_input(ROOT / "examples" / f"{name}.yaml").plan_input()
        start = time.perf_counter()
        result = compare(inp)
        elapsed = time.perf_counter() - start
        total += elapsed
        chips = ",".join(str(p.num_chips) for p in result.points)
        print(f"compare {name:<13} chips {chips}: {elapsed:.3f} s")
    print(f"both models: {total:.3f} s")


if __name__ == "__main__":
    main()
