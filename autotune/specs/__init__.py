"""Validated, frozen input specs: what is trained (model, training shape), the
hardware (cluster, calibration) and how to search."""

from autotune.specs.calibration import CalibrationSpec, CollectiveFit, LinkSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding
from autotune.specs.plan_input import PlanInput, SearchSpec
from autotune.specs.training import AttentionKernel, DType, FcAlgorithm, Recompute, TrainingSpec

__all__ = [
    "AttentionKernel",
    "CalibrationSpec",
    "ClusterSpec",
    "CollectiveFit",
    "DType",
    "FcAlgorithm",
    "FfnKind",
    "LinkSpec",
    "ModelSpec",
    "PlanInput",
    "PositionEncoding",
    "Recompute",
    "SearchSpec",
    "TrainingSpec",
]
