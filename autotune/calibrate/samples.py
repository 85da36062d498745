"""One measurement each: what the parsers produce and the fits consume."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import Axis, CollectiveOp
from cost_models.transformer_flops import FLASH_BACKWARD_GEMMS


@dataclass(frozen=True)
class CollectiveSample:
    """One timed collective: `op` along `axis` on a ring of `ring_size`
    chips with a per-chip piece of `shard_bytes` took `seconds`
    (the piece follows the CSV convention; see docs/calibrate.md)."""

    op: CollectiveOp
    axis: Axis
    ring_size: int
    shard_bytes: float
    seconds: float
    file: str
    line: int


@dataclass(frozen=True)
class GemmSample:
    """One timed local GEMM `m x k` by `k x n` in `dtype`, or `groups` of
    that shape in one grouped kernel (a mixture of experts' experts, `m`
    tokens each: a `grouped_gemm` row)."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float
    file: str
    line: int
    groups: int = 1

    @property
    def flops(self) -> float:
        """`2 m n k groups` FLOPs."""
        return 2.0 * self.m * self.n * self.k * self.groups

    @property
    def label(self) -> str:
        """How reports name the row: `gemm MxNxK dtype` (`xG groups`)."""
        grouped = f" x{self.groups} groups" if self.groups > 1 else ""
        return f"gemm {self.m}x{self.n}x{self.k}{grouped} {self.dtype}"


@dataclass(frozen=True)
class AttentionSample:
    """One timed fused attention forward (or, `backward`, its backward
    kernel): `heads` (batch x query heads) sequences of `seq_len` tokens
    with `head_dim`, causal or full, in `dtype`."""

    seq_len: int
    heads: int
    head_dim: int
    causal: bool
    dtype: str
    seconds: float
    file: str
    line: int
    backward: bool = False

    @property
    def flops(self) -> float:
        """Forward FLOPs: `4 heads s^2 d`, halved when causal
        (cost_models.transformer_flops.attention_core_forward_flops); a
        backward row 2.5 times that (FLASH_BACKWARD_GEMMS / 2: five GEMM
        sets against the forward's two, as FlashAttention's and
        tritonbench's benchmarks count it)."""
        full = 4.0 * self.heads * self.seq_len**2 * self.head_dim
        forward = full / 2.0 if self.causal else full
        return forward * FLASH_BACKWARD_GEMMS / 2.0 if self.backward else forward


@dataclass(frozen=True)
class OverlapSample:
    """A GEMM and a collective run side by side; `seconds` is the time of
    the pair (the compute slowdown is seconds / the GEMM alone)."""

    gemm: GemmSample
    collective: CollectiveSample
    seconds: float
    file: str
    line: int


@dataclass(frozen=True)
class ParsedFile:
    """Everything read from one input file."""

    path: str
    kind: str  # "meshtune-csv" or "nccl-tests"
    sha256: str
    collectives: tuple[CollectiveSample, ...]
    gemms: tuple[GemmSample, ...]
    description: str  # e.g. "all_gather_perf, 8 ranks on 1 host (NVIDIA H100)"
    skipped_lines: tuple[int, ...] = ()
    device_names: tuple[str, ...] = ()  # device text of the log's rank lines
    num_hosts: int | None = None  # hosts the ranks ran on; None when not stated
    resource: str | None = None  # intra_node, scale_out, or None (not stated / CSV)
    overlaps: tuple[OverlapSample, ...] = ()
    attentions: tuple[AttentionSample, ...] = ()
    #: host seconds per kernel launch (`host_launch` rows)
    host_launches: tuple[float, ...] = ()

    @property
    def num_rows(self) -> int:
        """Measurements read from the file."""
        return (
            len(self.collectives)
            + len(self.gemms)
            + len(self.overlaps)
            + len(self.attentions)
            + len(self.host_launches)
        )
