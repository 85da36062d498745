"""Chip presets: every preset loads with a source, base-unit accessors
convert once, and device lines of real logs map to the right preset."""

from __future__ import annotations

import pytest

from autotune.errors import InputError
from autotune.hardware.chips import chip_names, load_chip, match_chip
from autotune.specs.chip import ChipSpec

EXPECTED = {
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "h100-sxm",
    "h200-sxm",
    "b200",
    "gb200",
    "mi300x",
    "tpu-v4",
    "tpu-v5p",
    "tpu-v5e",
    "tpu-v6e",
}


def test_every_preset_loads_with_source() -> None:
    assert EXPECTED <= set(chip_names())
    for name in chip_names():
        chip = load_chip(name)
        assert chip.name == name
        assert len(chip.source) > 40
        assert chip.has_dtype("bf16")


@pytest.mark.parametrize(
    ("name", "bf16_flops", "hbm_bytes_per_s", "hbm_bytes"),
    [
        # H100 SXM data sheet: 1979 TFLOPS bf16 with sparsity -> 989 dense; 3.35 TB/s
        ("h100-sxm", 989e12, 3.35e12, int(79.6 * 2**30)),
        ("tpu-v4", 275e12, 1.2e12, 32 * 2**30),
        ("mi300x", 1307.4e12, 5.3e12, 192 * 2**30),
        ("tpu-v5p", 459e12, 2.765e12, 95 * 2**30),
    ],
)
def test_base_unit_accessors(
    name: str, bf16_flops: float, hbm_bytes_per_s: float, hbm_bytes: int
) -> None:
    chip = load_chip(name)
    assert chip.peak_flops_per_s("bf16") == pytest.approx(bf16_flops)
    assert chip.hbm_bytes_per_s == pytest.approx(hbm_bytes_per_s)
    assert chip.hbm_bytes == hbm_bytes


def test_unknown_dtype_names_known_ones() -> None:
    with pytest.raises(KeyError, match="known: bf16, int8"):
        load_chip("tpu-v4").peak_flops_per_s("fp8")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "#  Rank  0 Group  0 Pid  41523 on  node-001 device  0 [0x18] NVIDIA H100 80GB HBM3",
            "h100-sxm",
        ),
        ("|   0  NVIDIA H100 SXM5 80GB   On  | 00000000:18:00.0 Off |", "h100-sxm"),
        ("device  3 [0x4f] NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("device  0 [0x07] NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("device  1 [0x2a] NVIDIA H200", "h200-sxm"),
        ("device  0 [0x1b] NVIDIA B200", "b200"),
        ("device  0 [0x01] NVIDIA GB200", "gb200"),
        ("device  5 [0000:75:00.0] AMD Instinct MI300X", "mi300x"),
        ("TPU v4", "tpu-v4"),
        ("TPU v5", "tpu-v5p"),
        ("TPU v5p", "tpu-v5p"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v6 lite", "tpu-v6e"),
        ("device  0 [0x18] NVIDIA H100 PCIe", None),
        ("device  0 [0x18] NVIDIA H200 NVL", None),
        ("device  0 [0x18] Tesla V100-SXM2-32GB", None),
    ],
)
def test_match_chip(line: str, expected: str | None) -> None:
    assert match_chip(line) == expected


def test_unknown_chip_is_input_error() -> None:
    with pytest.raises(InputError, match=r"neither a chip preset nor a file.*h100-sxm"):
        load_chip("h100-typo")


def test_chip_file_and_bad_values(tmp_path) -> None:
    good = tmp_path / "chip.yaml"
    good.write_text(
        "name: mine\nvendor: X\npeak_tflops_per_s: {bf16: 100}\nhbm_gib: 8\n"
        "hbm_tb_per_s: 1\nsource: my measurements\nfigures: fitted\n"
    )
    chip = load_chip(good)
    assert chip.figures.value == "fitted" and chip.hbm_bytes == 8 * 2**30
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("bf16: 100", "bf16: -1"))
    in_range = r"bad.yaml: peak_tflops_per_s\.bf16: got -1;.*plausible range: each 0\.001 to 1e6"
    with pytest.raises(InputError, match=in_range):
        load_chip(bad)
    with pytest.raises(ValueError):
        ChipSpec.model_validate({"name": "x"})
