"""meshtune: plan 2D tensor-parallel LLM training (MeshSlice) from analytical
cost models."""

__version__ = "0.1.0"
