"""The GEMM algorithms MeshSlice is compared with (seed 000 sections 2.3
and 5; model.md section 7): Collective 2D GEMM, Wang et al., SUMMA and
Cannon (one module each), and the 1D baselines (`one_d`: Megatron 1D tensor
parallelism, `fsdp`), on the same calibrated cost model as MeshSlice;
`common` holds the shared schedule helpers, `ring` the 1D ring link model.

Conventions (shared with cost_models.meshslice):

- OS: `C = A @ B`; LS: `C = A @ B^T` (A stays); RS: `C = A^T @ B` (B stays).
  Every matrix is stored with its rows split over the ROW axis (size `Nr`)
  and its columns over the COL axis (size `Nc`). `m, n, k` are the output
  rows, output columns and contraction size; `element_bytes` per element.
- `transposed=True` is the plain schedule on the transposed mesh with the
  axes' links exchanged (seed 000 section 3.2.1); the returned `calls` are on
  the physical axes.
- Every function returns a `GemmEstimate` whose breakdown has the same parts
  as MeshSlice's: `compute_s` (sum of the local GEMMs), `launch_s`,
  `sync_s`, `transfer_s` (every communication operation, hidden or not) and
  the critical-path `total_s`; exposed communication is `total - compute`.
- `calls` lists what ONE chip issues on each mesh axis, so that
  `sum(c.bytes_sent_per_chip for c in calls if c.axis is X)` is the bytes
  that chip puts on its axis-X links (`count * (ring_size - 1) *
  shard_bytes`). A single-hop send-recv is recorded as `ring_size=2`,
  `shard_bytes=message`, `count=number of sends`. Each docstring says which
  chip the count describes when chips differ.
- An infeasible configuration (a non-square mesh for Cannon, a dimension
  that does not split evenly) raises :class:`InfeasibleError` carrying the
  reason; callers record it as an infeasible result.
"""
