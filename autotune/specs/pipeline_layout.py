"""Megatron-LM's pipeline layout strings (`--pipeline-model-parallel-layout`)
read into transformer blocks per virtual stage.

The grammar (Megatron-LM `megatron/core/transformer/
pipeline_parallel_layer_layout.py` at d98e8a64, `parse_str_to_list` and
`validate_layer_layout`): virtual stages in model order separated by `|`,
each a run of `E` (the embedding), `t` (a transformer block), `m` (a
multi-token-prediction block) and `L` (the loss); `x*n` repeats one
character and `(...)*n` a group (which may hold `|`); commas are cosmetic.
Virtual stage `i` runs on pipeline rank `i mod pp` as its chunk
`i div pp`, the order meshtune's chunks use. The layout must start with
`E`, end with `L`, hold each once, hold `num_layers` blocks, and put every
`m` after the last `t`, all in one virtual stage, the last one of its
pipeline rank (`validate_layer_layout`: "the MTP should be always in the
last virtual pipeline stage of that rank"; :func:`mtp_stage`). A stage
other than the loss's runs the MTP blocks "standalone": their hidden
states travel on with the main ones to the loss's stage, which runs the
output layer and loss for each (`multi_token_prediction.py`
`process_mtp_loss`).
"""

from __future__ import annotations

import re


class LayoutError(ValueError):
    """Why a layout string is invalid: a reason only; the reader that
    catches it (the training validator, the plan loader) names the field
    and the fix."""


_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_ONE = re.compile(r"([^()|*\d])\*(\d+)")
_MAX_EXPANDED = 1_000_000


def expand_layout(layout: str) -> list[str]:
    """The layout's virtual stages as strings of `E`, `t`, `m`, `L`, in
    model order, repetitions unrolled. Raises LayoutError (the reason) on a
    character outside the grammar or an unclosed repetition."""
    text = layout.replace(",", "").replace(" ", "")

    def unroll(found: re.Match[str]) -> str:
        # checked before the string is built: `(tt|)*3000000000` must not
        # allocate gigabytes
        if len(found.group(1)) * int(found.group(2)) > _MAX_EXPANDED:
            raise LayoutError(f"it unrolls to more than {_MAX_EXPANDED:,} characters")
        return found.group(1) * int(found.group(2))

    for pattern in (_GROUP, _ONE):
        while True:
            text, count = pattern.subn(unroll, text)
            if len(text) > _MAX_EXPANDED:
                raise LayoutError(f"it unrolls to more than {_MAX_EXPANDED:,} characters")
            if count == 0:
                break
    bad = sorted(set(text) - set("EtmL|"))
    if bad:
        raise LayoutError(
            f"{''.join(bad)!r} is not a layout character or an `x*n` / `(...)*n` repetition "
            "(E embedding, t transformer block, m MTP block, L loss, | between stages)"
        )
    return text.split("|")


def layout_blocks(layout: str, num_layers: int, mtp_layers: int) -> list[int]:
    """Transformer blocks per virtual stage of a valid layout for a model
    of `num_layers` blocks and `mtp_layers` multi-token-prediction blocks
    (module docstring). Raises LayoutError with the reason otherwise."""
    stages = expand_layout(layout)
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        raise LayoutError("it must start with the embedding E and hold it once")
    if not flat.endswith("L") or flat.count("L") != 1:
        raise LayoutError("it must end with the loss L and hold it once")
    blocks = flat.count("t")
    if blocks != num_layers:
        raise LayoutError(f"it holds {blocks} transformer blocks (t); the model has {num_layers}")
    if flat.count("m") != mtp_layers:
        raise LayoutError(f"it holds {flat.count('m')} MTP blocks (m); the model has {mtp_layers}")
    if sum("m" in stage for stage in stages) > 1:
        raise LayoutError("every MTP block (m) must be in one stage")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise LayoutError("every transformer block (t) must come before the MTP blocks (m)")
    return [stage.count("t") for stage in stages]


def mtp_stage(layout: str, pp: int) -> int | None:
    """The virtual stage holding a valid layout's MTP blocks (None without
    any). Raises LayoutError unless it is the last virtual stage of its
    pipeline rank, one of the last `pp` (Megatron-LM's rule, module
    docstring)."""
    stages = expand_layout(layout)
    holding = [i for i, stage in enumerate(stages) if "m" in stage]
    if not holding:
        return None
    if holding[0] < len(stages) - pp:
        raise LayoutError(
            f"its MTP blocks (m) are in virtual stage {holding[0]}, not in the last virtual "
            f"stage of a pipeline rank (one of the last {pp})"
        )
    return holding[0]
