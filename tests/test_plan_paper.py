"""Reproductions of the MeshSlice paper's published planner figures (seed 000
section 5), on the bundled TPU v4 calibration, with named tolerances.

The paper's figures come from a cycle-level simulator of TPU v4 (SST with
DRAMSim3); meshtune uses the analytical model of its autotuner, so shapes and
orderings must match while absolute values may differ by the stated
tolerance. The README's accuracy section explains the gaps.
"""

from __future__ import annotations

import pytest

from autotune.loading import load_calibration, load_cluster_spec, load_model_spec
from autotune.plan.search import plan
from autotune.specs import PlanInput, SearchSpec, TrainingSpec

CAL, _ = load_calibration("tpu-v4")
CLUSTER, _ = load_cluster_spec("tpu-v4-256")


def weak_scaling(model: str, chips: int):
    """Paper's weak scaling: batch = chips / 2 sequences of 2048 tokens."""
    return plan(
        PlanInput(
            model=load_model_spec(model),
            training=TrainingSpec(global_batch_sequences=chips // 2, sequence_length=2048),
            cluster=CLUSTER.model_copy(update={"num_chips": chips}),
            calibration=CAL,
            search=SearchSpec(),
        )
    )


# Fig. 9 / section 5.1: "from 16 to 256 chips MeshSlice's efficiency drops only
# 16.8% (GPT-3) and 5.8% (Megatron-NLG)". Tolerance: 12 percentage points, and
# GPT-3 must drop more than Megatron-NLG (its GEMMs are smaller per chip).
PAPER_DROP = {"gpt3-175b": 0.168, "megatron-nlg-530b": 0.058}
DROP_TOLERANCE = 0.12


def test_fig9_weak_scaling_efficiency_drop():
    drops = {}
    for model, paper in PAPER_DROP.items():
        u16 = weak_scaling(model, 16).flop_utilization
        u256 = weak_scaling(model, 256).flop_utilization
        drops[model] = 1 - u256 / u16
        print(
            f"{model}: utilization {u16:.3f} -> {u256:.3f}, drop {drops[model]:.1%} "
            f"(paper {paper:.1%})"
        )
        assert drops[model] == pytest.approx(paper, abs=DROP_TOLERANCE)
    assert drops["gpt3-175b"] > drops["megatron-nlg-530b"]


# Fig. 13 / section 5.2: "the mesh shape can change FC time by up to 2.4x" at 256
# chips (meshes with both sides >= 4, as in the authors' code). Tolerance: the
# spread lies in [1.5x, 3.0x] for both models.
def test_fig13_mesh_shape_matters():
    for model in PAPER_DROP:
        result = weak_scaling(model, 256)
        times = [
            c.step_fc_time_s
            for c in result.candidates
            if c.feasible and min(c.mesh.num_rows, c.mesh.num_cols) >= 4
        ]
        spread = max(times) / min(times)
        print(f"{model}: FC time spread over mesh shapes {spread:.2f}x (paper: up to 2.4x)")
        assert 1.5 <= spread <= 3.0


# Section 5.2 / Fig. 14: the autotuner's best slice count is an interior optimum
# (neither 1 nor the largest valid S) for the large GEMMs at 256 chips.
def test_fig14_interior_slice_count():
    result = weak_scaling("gpt3-175b", 256)
    for lp in result.layers:
        for g in lp.gemms:
            assert 1 < g.num_slices < max(g.valid_slice_counts), (lp.layer.name, g.num_slices)
