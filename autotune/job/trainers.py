"""What each export target runs as planned: the search's rules for
`constraints.trainer`.

Without the constraint the search prices every configuration the model
allows, and `meshtune export --to TARGET` writes what the trainer can
express, with a `not expressed:` line (or a refusal) for the rest. With it,
the search leaves out the tensor meshes, ZeRO stages, recomputation modes
and expert tensor degrees the target would run differently from the plan,
each with the reason the report lists beside the other refused degrees,
and it does not mix recomputation modes across stages. Each rule mirrors
the exporter's own condition and source (autotune/formats/<target>.py):

- tensor mesh: Megatron-LM and torchtitan run one tensor axis
  (formats/export.py `needs_1d`);
- FC dataflow: Megatron-LM and torchtitan keep every layer's weights in
  place (column- then row-parallel layers; formats/megatron.py
  `layout_mismatch` lists any other dataflow as not expressed), so the FC
  planner prices only the weight-stationary one (`search.dataflow:
  always-w`; specs/job.py `Trainer.weight_stationary`, applied when the
  plan file is loaded, autotune/loading.py, which may not import job);
- ZeRO stage: Megatron-LM's ZeRO-2 and ZeRO-3 are Megatron-FSDP, which runs
  without pipeline stages (megatron_fsdp_runs; formats/megatron.py
  `uses_megatron_fsdp` states the same rule, as formats may not import
  job); torchtitan's FSDP shards gradients with the optimizer state (no
  ZeRO-1) and shards the weights over the context-parallel group
  whenever it is on (no ZeRO-0 with context parallelism); MaxText shards
  the optimizer state only together with the weights (no ZeRO-1 or ZeRO-2
  over data-parallel replicas) and the weights over its context axis
  (ZeRO-3 with context parallelism); MindFormers' level1 parallel optimizer
  shards the weights too (no ZeRO-1 over data-parallel replicas);
- recomputation: torchtitan's selective checkpointing is op-level (it
  keeps the attention output and recomputes every other matmul), not the
  attention core the plan prices; MaxText has no remat policy that keeps
  every activation (no recompute `none`);
- expert tensor parallelism: torchtitan keeps each expert whole on its
  rank (none above 1); MaxText splits every expert over its tensor axis
  (exactly the tensor degree, which the search then tries alone);
- recomputation per stage: no export writes different modes for different
  stages (Megatron-LM, torchtitan and MaxText apply one mode to every
  block, MindFormers' per-stage lists come from `meshtune pipeline`, the
  JAX module does not rematerialise), so with a trainer the search does
  not mix modes across stages (stage_mixes).

One rule prices rather than refuses: the routed experts' host time
(per_expert_kernels). Megatron-LM with Transformer Engine issues the
experts' kernels one per expert from the host (cost_models.moe
expert_kernel_launches), so a chip holding many small experts can wait on
its host; the JAX trainers (JAX, MaxText) run compiled programs,
torchtitan one grouped GEMM per matrix for all local experts
(`torch._grouped_mm`, `MoEArgs.use_grouped_mm` on by default:
pytorch/torchtitan torchtitan/models/moe/moe.py at 003edbe5), and
MindFormers MindSpore's graph mode, none of which issue per-expert kernels
from the host. Without a trainer, a GPU cluster is priced as Megatron-LM runs it
(its launch commands are what `meshtune export --to megatron` writes),
a TPU one as JAX runs it.

JAX has no rule but the last: its export writes every plan as planned. A
context-parallel exchange a trainer does not have still prints as a `not
expressed:` line.
"""

from __future__ import annotations

from autotune.specs.job import Trainer
from autotune.specs.model import ModelSpec
from autotune.specs.training import ContextComm

#: trainers whose tensor parallelism has one axis
_ONE_AXIS = (Trainer.MEGATRON, Trainer.TORCHTITAN)


def _because(trainer: Trainer, reason: str) -> str:
    return f"{reason} (constraints.trainer: {trainer.value})"


def megatron_fsdp_runs(pipeline_parallel: int) -> bool:
    """Whether Megatron-FSDP, Megatron-LM's ZeRO-2 and ZeRO-3, runs with
    `pipeline_parallel` stages: only with one. It is documented and tested
    without pipeline stages (NVIDIA/Megatron-LM d98e8a64
    docs/user-guide/features/megatron_fsdp.md and examples/megatron_fsdp),
    and its version 2 refuses them
    (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py lines 627-638)."""
    return pipeline_parallel == 1


def mesh_refusal(trainer: Trainer | None, rows: int, cols: int) -> str | None:
    """Why `trainer` cannot run a `rows x cols` tensor mesh, or None."""
    if trainer in _ONE_AXIS and rows > 1 and cols > 1:
        return _because(trainer, f"{trainer.display_name}'s tensor parallelism has one axis")
    return None


def zero_refusal(trainer: Trainer | None, zero: int, dp: int, pp: int, cp: int) -> str | None:
    """Why `trainer` cannot run ZeRO stage `zero` over `dp` data-parallel
    replicas with `pp` pipeline stages and `cp` context-parallel chips as
    the plan prices it, or None (module docstring)."""
    if trainer is Trainer.MEGATRON and zero >= 2 and not megatron_fsdp_runs(pp):
        return _because(
            trainer,
            "Megatron-LM shards gradients and weights with Megatron-FSDP, which runs "
            "without pipeline stages",
        )
    if trainer is Trainer.TORCHTITAN:
        if zero == 1 and dp * cp > 1:
            return _because(
                trainer, "torchtitan's FSDP shards the gradients with the optimizer state"
            )
        if zero == 0 and cp > 1:
            return _because(
                trainer, "torchtitan shards the weights over the context-parallel group"
            )
    if trainer is Trainer.MAXTEXT:
        if zero in (1, 2) and dp > 1:
            return _because(
                trainer, "MaxText shards the optimizer state only together with the weights"
            )
        if zero < 3 and cp > 1:
            return _because(trainer, "MaxText shards the weights over the context axis")
    if trainer is Trainer.MINDFORMERS and zero == 1 and dp > 1:
        return _because(trainer, "MindFormers' level1 parallel optimizer shards the weights too")
    return None


def recompute_refusal(trainer: Trainer | None, mode: str) -> str | None:
    """Why `trainer` cannot run recomputation `mode` (none, selective,
    full) as the plan prices it, or None (module docstring)."""
    if trainer is Trainer.TORCHTITAN and mode == "selective":
        return _because(
            trainer,
            "torchtitan's selective checkpointing recomputes every matmul but the "
            "attention output, not the attention core",
        )
    if trainer is Trainer.MAXTEXT and mode == "none":
        return _because(trainer, "MaxText has no remat policy that keeps every activation")
    return None


def expert_tensor_refusal(trainer: Trainer | None, etp: int, tp: int) -> str | None:
    """Why `trainer` cannot split each routed expert over `etp` chips beside
    a tensor degree `tp`, or None (module docstring)."""
    if trainer is Trainer.TORCHTITAN and etp > 1:
        return _because(trainer, "torchtitan keeps each expert whole on its rank")
    if trainer is Trainer.MAXTEXT and etp != tp:
        return _because(trainer, f"MaxText splits every expert over its {tp} tensor chips")
    return None


def stage_mixes(trainer: Trainer | None) -> bool:
    """Whether the search may give stages different recomputation modes
    (the balancer's step 6): only without a trainer (module docstring)."""
    return trainer is None


def runs_transformer_engine(trainer: Trainer | None, gpu_nodes: bool) -> bool:
    """Whether the layers run in Transformer Engine: Megatron-LM, or no
    trainer on a cluster of GPU nodes (priced as Megatron-LM runs it,
    module docstring)."""
    if trainer is None:
        return gpu_nodes
    return trainer is Trainer.MEGATRON


def per_expert_kernels(trainer: Trainer | None, gpu_nodes: bool) -> bool:
    """Whether the routed experts' kernels are issued one per expert from
    the host, so host time can bound them (module docstring): where the
    layers run in Transformer Engine (runs_transformer_engine)."""
    return runs_transformer_engine(trainer, gpu_nodes)


def context_attention_refusal(model: ModelSpec, comm: ContextComm) -> str | None:
    """Why Transformer Engine's context-parallel attention cannot run this
    model's attention with `comm`, or None (NVIDIA/TransformerEngine v2.9,
    70f53666, `pytorch/attention/dot_product_attention/context_parallel.py`
    lines 3803-3815): sliding-window attention only with all_gather or a2a,
    multi-head latent attention (key and value widths differ) only with p2p
    (or TE's hierarchical a2a+p2p, which meshtune does not price)."""
    if model.sliding_window is not None and comm is ContextComm.P2P:
        return (
            "Transformer Engine's context parallelism runs sliding-window attention only "
            "with context_parallel_comm all_gather or a2a"
        )
    if model.mla is not None and comm is not ContextComm.P2P:
        return (
            f"Transformer Engine's context parallelism runs MLA (key width {model.head_dim}, "
            f"value width {model.value_head_dim}) only with context_parallel_comm p2p"
        )
    return None
