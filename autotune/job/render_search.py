"""The search report as plain text: chosen configuration, why it wins, the
alternatives and what each loses to."""

from __future__ import annotations

from typing import Any


def _cfg(c: dict[str, Any]) -> str:
    mesh = c["tensor_mesh"]
    return (
        f"TP {mesh[0]}x{mesh[1]}  PP {c['pipeline_parallel']}  DP {c['data_parallel']}  "
        f"mbs {c['micro_batch_size']} (x{c['num_micro_batches']})  v {c['interleave']}  "
        f"recompute {c['recompute']}  ZeRO {c['zero_stage']}"
    )


def render_text(doc: dict) -> str:
    """The report of a `meshtune.job-search/1` document."""
    inp, chosen, s = doc["input"], doc["chosen"], doc["search"]
    lines = [
        f"{inp['model']} on {inp['cluster']} ({inp['num_chips']} chips), "
        f"batch {inp['global_batch_sequences']} x {inp['sequence_length']} tokens, {inp['dtype']}",
        "",
        "chosen:  " + _cfg(chosen["configuration"]),
        f"  step {chosen['step_time_s']:.3f} s   {chosen['tokens_per_s']:,.0f} tokens/s   "
        f"MFU {chosen['mfu']:.1%}   peak memory {chosen['peak_memory_gib']:.1f} GiB "
        f"of {doc['usable_memory_gib']:.1f} usable",
        "  time: " + ", ".join(f"{k} {v:.3f} s" for k, v in chosen["time_s"].items() if v > 0),
    ]
    bal = chosen.get("balanced")
    if bal:
        lines.append(f"  layers per stage (per chunk): {bal['layers_per_stage']}")
        lines.append(f"  recomputation per stage: {bal['recompute_per_stage']}")
        if bal["even_split_step_time_s"] is not None:
            lines.append(
                f"  balanced {chosen['step_time_s']:.3f} s against "
                f"{bal['even_split_step_time_s']:.3f} s for the even split"
            )
    if doc["tied_with_chosen"]:
        lines.append("  equally fast (the tie-break rule chose above):")
        for cfg in doc["tied_with_chosen"]:
            lines.append(f"    {_cfg(cfg)}, {cfg['peak_memory_gib']:.1f} GiB")
    lines += ["", f"alternatives (top {len(doc['alternatives'])}):"]
    for alt in doc["alternatives"]:
        lines.append(
            f"  {_cfg(alt['configuration'])}\n"
            f"    step {alt['step_time_s']:.3f} s (+{alt['slower_by_s']:.3f} s), "
            f"{alt['peak_memory_gib']:.1f} GiB; loses to {alt['loses_to']} "
            f"(+{alt['loses_s']:.3f} s)"
        )
    if doc["faster_but_out_of_memory"]:
        lines += ["", "faster by the model but out of memory:"]
        for e in doc["faster_but_out_of_memory"]:
            lines.append(
                f"  {_cfg(e['configuration'])}: {e['step_time_s']:.3f} s, needs "
                f"{e['memory_needed_gib']:.1f} GiB"
            )
    lines += [
        "",
        f"search: {s['candidates']} candidates, {s['pruned_by_memory_bound']} pruned by the memory "
        f"bound, {s['priced']} priced, {s['fit_closed_form']} fit, {s['balanced_by_ilp']} balanced "
        f"by the pipeline ILP ({s['ilp_unproved']} not proved within the time limit, left at the "
        f"even split); {'proved best' if s['proved_best'] else 'not proved best'} "
        f"under the model; {s['elapsed_s']:.2f} s",
        f"ties: {s['tie_break']}",
    ]
    return "\n".join(lines) + "\n"
