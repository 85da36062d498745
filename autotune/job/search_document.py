"""The search's result as a JSON document (`meshtune.job-search/1`).

Everything the text report shows is here: the input summary, the chosen
configuration with its step time, throughput, MFU, memory, time components
and balanced stages, the top alternatives with what each loses to, the
faster configurations that memory excluded, and the search's own figures
(candidates, pruned, priced, balanced, proved, tie-break rule).
"""

from __future__ import annotations

import json
from typing import Any

from autotune.job.pricing import COMPONENTS, model_flops_per_step
from autotune.job.search import TIE_BREAK_RULE, TIE_RELATIVE, Evaluated, SearchOutcome
from autotune.specs.job_search import JobSearchInput

SCHEMA = "meshtune.job-search/1"
GIB = 2**30

COMPONENT_LABELS = {
    "compute_s": "compute",
    "tp_comm_s": "exposed tensor-parallel communication",
    "recompute_s": "recomputation",
    "pp_comm_s": "pipeline transfers",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "exposed data-parallel communication",
    "optimizer_s": "optimizer step",
}


def loses_to(alt: Evaluated, winner: Evaluated) -> tuple[str, float]:
    """The component in which `alt` exceeds the winner most, and by how many
    seconds (the reason it is slower)."""
    diffs = {k: alt.components[k] - winner.components[k] for k in COMPONENTS}
    worst = max(COMPONENTS, key=lambda k: (diffs[k], -COMPONENTS.index(k)))
    return COMPONENT_LABELS[worst], diffs[worst]


def _config(inp: JobSearchInput, e: Evaluated) -> dict[str, Any]:
    cfg = e.config
    batch = inp.training.global_batch_sequences
    return {
        "tensor_mesh": [cfg["rows"], cfg["cols"]],
        "tensor_parallel": int(cfg["rows"]) * int(cfg["cols"]),
        "pipeline_parallel": cfg["pp"],
        "data_parallel": cfg["dp"],
        "micro_batch_size": cfg["mbs"],
        "num_micro_batches": batch // (int(cfg["dp"]) * int(cfg["mbs"])),
        "interleave": cfg["v"],
        "recompute": cfg["recompute"],
        "zero_stage": cfg["zero"],
    }


def _entry(inp: JobSearchInput, e: Evaluated, num_chips: int, peak: float) -> dict[str, Any]:
    tokens = inp.training.global_batch_sequences * inp.training.sequence_length
    flops = model_flops_per_step(inp.model, inp.training)
    out: dict[str, Any] = {
        "configuration": _config(inp, e),
        "step_time_s": e.step_s,
        "closed_form_step_time_s": e.closed_form_step_s,
        "tokens_per_s": tokens / e.step_s,
        "mfu": flops / (e.step_s * num_chips * peak),
        "peak_memory_gib": e.peak_bytes / GIB,
        "time_s": {k.removesuffix("_s"): v for k, v in e.components.items()},
    }
    if e.balanced is not None:
        b = e.balanced
        out["balanced"] = {
            "layers_per_stage": b.layers_per_stage,
            "recompute_per_stage": b.recompute_per_stage,
            "stage_peak_memory_gib": [x / GIB for x in b.stage_peak_bytes],
            "even_split_step_time_s": b.even_split_step_s,
            "bubble_fraction": b.bubble_fraction,
        }
    return out


def document(inp: JobSearchInput, outcome: SearchOutcome, num_chips: int, peak: float) -> dict:
    """The JSON-ready document (see module docstring)."""
    if not outcome.ranked:
        raise ValueError("no configuration fits; the caller reports infeasibility")
    winner = outcome.ranked[0]
    top_n = inp.constraints.top_n
    # Configurations as fast as the winner (e.g. a ZeRO stage whose extra
    # traffic hides completely) are listed apart, not as alternatives.
    ties = [e for e in outcome.ranked[1:] if e.step_s <= winner.step_s * (1 + TIE_RELATIVE)]
    rest = outcome.ranked[1 + len(ties) :]
    alternatives = []
    for alt in rest[:top_n]:
        entry = _entry(inp, alt, num_chips, peak)
        reason, seconds = loses_to(alt, winner)
        entry["slower_by_s"] = alt.step_s - winner.step_s
        entry["loses_to"] = reason
        entry["loses_s"] = seconds
        alternatives.append(entry)
    excluded = []
    for e in outcome.memory_excluded:
        entry = _entry(inp, e, num_chips, peak)
        entry["memory_needed_gib"] = e.peak_bytes / GIB
        entry["loses_to"] = "memory"
        excluded.append(entry)
    return {
        "schema": SCHEMA,
        "input": {
            "model": inp.model.name,
            "cluster": inp.cluster.name,
            "num_chips": num_chips,
            "global_batch_sequences": inp.training.global_batch_sequences,
            "sequence_length": inp.training.sequence_length,
            "dtype": inp.training.dtype.value,
        },
        "chosen": _entry(inp, winner, num_chips, peak),
        "tied_with_chosen": [
            {**_config(inp, e), "peak_memory_gib": e.peak_bytes / GIB} for e in ties[:top_n]
        ],
        "alternatives": alternatives,
        "faster_but_out_of_memory": excluded,
        "usable_memory_gib": outcome.usable_bytes / GIB,
        "search": {
            "candidates": outcome.num_candidates,
            "pruned_by_memory_bound": outcome.num_pruned_by_memory_bound,
            "priced": outcome.num_priced,
            "fit_closed_form": outcome.num_fit_closed_form,
            "balanced_by_ilp": outcome.num_balanced,
            "ilp_unproved": outcome.num_balancer_unproved,
            "proved_best": outcome.proved,
            "elapsed_s": outcome.elapsed_s,
            "tie_break": TIE_BREAK_RULE,
        },
    }


def to_json(doc: dict) -> str:
    """Stable JSON text (sorted keys are not used: the order is the report's)."""
    return json.dumps(doc, indent=2) + "\n"
