"""`meshtune plan`: phase 1 (per-layer dataflow and sharding), phase 2 (mesh
shape and slice counts), the result types, the `meshtune.plan/2` JSON
document and schema, and the terminal report."""
