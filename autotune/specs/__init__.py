"""Validated, frozen input specs: what is trained (model, training shape), the
hardware (cluster, calibration) and how to search."""

from autotune.specs.calibration import CalibrationSpec, CollectiveFit, LinkSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.model import FfnKind, ModelSpec
from autotune.specs.plan_input import PlanInput, SearchSpec
from autotune.specs.training import DType, TrainingSpec

__all__ = [
    "CalibrationSpec",
    "ClusterSpec",
    "CollectiveFit",
    "DType",
    "FfnKind",
    "LinkSpec",
    "ModelSpec",
    "PlanInput",
    "SearchSpec",
    "TrainingSpec",
]
