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


# The bundled nominal A100 calibration (calibration_data/): data-sheet rates
# times stated efficiencies, not fitted to these runs.
CALIBRATION = "a100-nominal"


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


@pytest.mark.xfail(
    strict=True,
    reason="with nominal A100 figures the model is 18% (GPT-3) and 29% (MT-NLG) faster than "
    "measured; both runs used 2021 software (README, docs/job-search.md)",
)
def test_published_configuration_within_tolerance(repo_root):
    errors = {run["name"]: _error(run, CALIBRATION) for run in _runs(repo_root)}
    print()
    for name, err in errors.items():
        print(f"{name} ({CALIBRATION}): predicted vs measured {err:+.1%}")
    assert all(abs(e) <= TOLERANCE for e in errors.values())


# Korthikanti et al. 2022 Table 3 and 5 (megatron_a100.yaml): heads, hidden,
# layers, TP, PP, GPUs, batch, micro-batch, seconds full / selective.
def test_closed_form_against_korthikanti_table5(repo_root):
    table = yaml.safe_load((repo_root / FIXTURES / "megatron_a100.yaml").read_text())
    errors = []
    print("\nKorthikanti et al. 2022 Table 5 with the search's closed form")
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
        hw = load_search_hardware(f"a100-hgx-{gpus // 8}n", "bf16", CALIBRATION)
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
                **ERA,
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
    assert median <= TOLERANCE
