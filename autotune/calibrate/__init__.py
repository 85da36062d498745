"""`meshtune calibrate`: fit the collective and GEMM cost models from
benchmark measurements (meshtune's benchmark CSV and raw nccl-tests logs)."""
