"""Weights of a model spec's blocks, counted in one place: what the
Hugging Face readers check against `transformers`, what memory holds and
what MFU counts as active."""

from __future__ import annotations

from autotune.specs.model import FfnKind, ModelSpec


def mla_projection_params(model: ModelSpec) -> int:
    """Weights of multi-head latent attention's query and key/value
    projections (DeepSeek-V2 report, arXiv:2405.04434, section 2.1.2;
    norms left out)::

        q:  h r_q + r_q nh d_qk      (h nh d_qk without query compression)
        kv: h (r_kv + d_rope) + r_kv nh (d_nope + d_v)

    `d_qk = d_nope + d_rope`. Units: parameters. Zero without MLA."""
    mla = model.mla
    if mla is None:
        return 0
    h, nh = model.hidden_size, model.num_heads
    if mla.q_lora_rank is None:
        q = h * nh * mla.qk_head_dim
    else:
        q = h * mla.q_lora_rank + mla.q_lora_rank * nh * mla.qk_head_dim
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    kv += mla.kv_lora_rank * nh * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv


def ffn_matrices(model: ModelSpec) -> int:
    """Weight matrices of one FFN (or expert): 3 gated, 2 not."""
    return 3 if model.ffn_kind is FfnKind.SWIGLU else 2


def attention_params(model: ModelSpec) -> int:
    """Weights of a block's attention projections: `h (nh + 2 nkv) d + nh d h`,
    or MLA's (mla_projection_params) plus `nh d_v h`. Units: parameters."""
    h = model.hidden_size
    out = model.attention_width * h
    if model.mla is not None:
        return mla_projection_params(model) + out
    return h * (model.num_heads + 2 * model.kv_heads) * model.head_dim + out


def routed_expert_params(model: ModelSpec, experts: int | None = None) -> int:
    """Weights of `experts` routed experts (all of them by default) of one
    MoE block plus its router: `n f h F_e + E h` (`f` ffn_matrices).
    Zero for a dense model."""
    moe = model.moe
    if moe is None:
        return 0
    n = moe.num_experts if experts is None else experts
    return n * ffn_matrices(model) * model.hidden_size * moe.expert_ffn_size + (
        moe.num_experts * model.hidden_size
    )


def block_params(model: ModelSpec, index: int, active: bool = False) -> int:
    """FC weights of block `index`: attention, then a dense FFN
    (`f h F`) or, in a MoE block, the shared experts (`f h F_s`), the router
    and the routed experts (all of them, or with `active` the `k` a token
    uses). Biases and norms left out. Units: parameters."""
    h, f = model.hidden_size, ffn_matrices(model)
    if not model.is_moe_layer(index):
        return attention_params(model) + f * h * model.ffn_size
    moe = model.moe
    assert moe is not None
    experts = moe.experts_per_token if active else moe.num_experts
    return (
        attention_params(model)
        + f * h * moe.shared_expert_ffn_size
        + routed_expert_params(model, experts)
    )


def mtp_params(model: ModelSpec) -> int:
    """Weights of the multi-token-prediction modules (DeepSeek-V3 report,
    arXiv:2412.19437, section 2.2): each a MoE block and the `2h x h`
    projection of its two inputs; the embedding and output layer are the
    model's own. Units: parameters."""
    if model.mtp_layers == 0:
        return 0
    last = model.num_layers - 1
    return model.mtp_layers * (block_params(model, last) + 2 * model.hidden_size**2)
