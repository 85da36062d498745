"""The joint search against published runs: its prediction for each
published configuration beside the measurement, its own choice beside the
published one (both by its model), and the closed form against Korthikanti
et al. 2022 Table 5 (tests/fixtures/published/README.md)."""

from __future__ import annotations

import statistics

import pytest
import yaml

from autotune.job.candidates import enumerate_candidates
from autotune.job.cluster_view import load_search_hardware
from autotune.job.pricing import price
from autotune.job.search import search
from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec

FIXTURES = "tests/fixtures/published"
# Megatron-LM and DeepSpeed of 2021-2022: no flash attention, dropout on,
# fp32 main gradients, gradient all-reduce after the pipeline flush.
ERA = {
    "sequence_length": 2048,
    "flash_attention": False,
    "dropout": True,
    "fp32_gradients": True,
    "overlap_data_parallel": False,
}
TOLERANCE = 0.15


def _runs(repo_root):
    return yaml.safe_load((repo_root / FIXTURES / "search_published.yaml").read_text())["runs"]


# The bundled A100 calibration fitted from public microbenchmarks
# (calibration_data/measured/README.md: a DGX A100 nccl-tests log, cuBLASLt
# GEMMs, BabelStream HBM), none of them these runs; and the nominal one
# (data-sheet rates times stated efficiencies) for comparison.
CALIBRATION = "a100-measured"
NOMINAL = "a100-nominal"
# What the nominal figures gave (docs/job-search.md): recorded so that a
# change making them worse fails; the tolerance above is not met with them.
NOMINAL_ERRORS_MAX = 0.30


def _published_step(run, calibration: str) -> tuple[float, object]:
    model = ModelSpec(**run["model"])
    hw = load_search_hardware(run["cluster"], "bf16", calibration)
    train = AutoTrainingSpec(
        global_batch_sequences=run["global_batch_sequences"], **ERA, **run["configuration"]
    )
    c = enumerate_candidates(model, hw, train, SearchConstraints(max_micro_batch_size=64))
    assert len(c) == 1, "the published configuration is one candidate"
    return float(price(model, hw, train, c).step_s[0]), (model, hw)


def _error(run, calibration: str) -> float:
    predicted, _ = _published_step(run, calibration)
    return predicted / run["measured_step_s"] - 1


@pytest.fixture(scope="module")
def choices(request):
    repo_root = request.config.rootpath
    out = []
    for run in _runs(repo_root):
        published, (model, hw) = _published_step(run, CALIBRATION)
        train = AutoTrainingSpec(global_batch_sequences=run["global_batch_sequences"], **ERA)
        # A short balancer time limit keeps the test quick: a solve it cuts
        # leaves its candidate at the even split, which only makes the
        # choice slower, never the check easier.
        outcome = search(model, hw, train, SearchConstraints(ilp_time_limit_s=3.0))
        out.append((run, published, outcome))
    return out


def test_choice_at_least_as_fast_as_published(choices):
    print("\nconfiguration                    measured  published(model)  chosen(model)  chosen")
    for run, published, outcome in choices:
        best = outcome.ranked[0]
        print(
            f"{run['name'][:32]:32} {run['measured_step_s']:7.2f}s {published:12.2f}s "
            f"{best.step_s:12.2f}s   {best.config}"
        )
        assert best.step_s <= published * (1 + 1e-9)


def test_published_configuration_within_tolerance(repo_root):
    """The 2021 runs (SC'21 GPT-3 estimate, MT-NLG) priced with the measured
    A100 calibration: within 15% of the measurement. The nominal calibration
    is printed beside it (and held to what it gave)."""
    print()
    for run in _runs(repo_root):
        err, nominal = _error(run, CALIBRATION), _error(run, NOMINAL)
        print(
            f"{run['name']}: predicted vs measured {err:+.1%} ({CALIBRATION}), "
            f"{nominal:+.1%} ({NOMINAL})"
        )
        assert abs(err) <= TOLERANCE, run["name"]
        assert abs(nominal) <= NOMINAL_ERRORS_MAX, run["name"]


# Korthikanti et al. 2022 Table 3 and 5 (megatron_a100.yaml): heads, hidden,
# layers, TP, PP, GPUs, batch, micro-batch, seconds full / selective.
# Median |error| the closed form gave on Table 5 per calibration (the
# whole-step model's in docs/accuracy.md), recorded so a change making it
# worse fails.
TABLE5_MEDIAN_MAX = {NOMINAL: 0.10, CALIBRATION: 0.13}


@pytest.mark.parametrize("calibration", [NOMINAL, CALIBRATION])
def test_closed_form_against_korthikanti_table5(repo_root, calibration):
    table = yaml.safe_load((repo_root / FIXTURES / "megatron_a100.yaml").read_text())
    errors = []
    print(f"\nKorthikanti et al. 2022 Table 5 with the search's closed form ({calibration})")
    chunks = table["korthikanti2022_interleave"]
    for row in table["korthikanti2022_table5"]:
        name, heads, hidden, layers, tp, pp, gpus, batch, mbs, full_s, sel_s = row
        model = ModelSpec(
            name=name,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            head_dim=hidden // heads,
            ffn_size=4 * hidden,
            vocab_size=51200,
        )
        hw = load_search_hardware(f"a100-hgx-{gpus // 8}n", "bf16", calibration)
        for mode, measured in (("full", full_s), ("selective", sel_s)):
            train = AutoTrainingSpec(
                global_batch_sequences=batch,
                tensor_mesh=[1, tp],
                pipeline_parallel=pp,
                data_parallel=gpus // (tp * pp),
                micro_batch_size=mbs,
                interleave=chunks[name],
                recompute=mode,
                zero_stage=0,
                **{**ERA, "overlap_tensor_backward": True},  # the paper's section 6.2
            )
            c = enumerate_candidates(model, hw, train, SearchConstraints(max_micro_batch_size=64))
            step = float(price(model, hw, train, c).step_s[0])
            errors.append(step / measured - 1)
            print(
                f"  {name:5} {mode:9} measured {measured:6.2f}s predicted {step:6.2f}s "
                f"{errors[-1]:+6.1%}"
            )
    median = statistics.median(abs(e) for e in errors)
    print(f"  median |error| {median:.1%}, largest {max(abs(e) for e in errors):.1%}")
    assert median <= TABLE5_MEDIAN_MAX[calibration]
