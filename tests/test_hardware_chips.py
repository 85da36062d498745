"""Chip presets: every preset loads with a source, base-unit accessors
convert once, and device lines of real logs map to the right preset."""

from __future__ import annotations

import pytest

from autotune.calibrate.coverage import detect_chip
from autotune.calibrate.samples import ParsedFile
from autotune.errors import InputError
from autotune.hardware.chips import chip_names, load_chip, match_chip, match_chip_family
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


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("NVIDIA H100", ["h100-sxm"]),
        ("NVIDIA A100", ["a100-sxm4-40gb", "a100-sxm4-80gb"]),
        ("NVIDIA H100 PCIe", []),
        ("NVIDIA H100 NVL", []),
        ("NVIDIA A100 PCIe", []),
    ],
)
def test_match_chip_family(device: str, expected: list[str]) -> None:
    assert match_chip(device) is None  # no preset's device pattern names the part
    assert match_chip_family(device) == expected


def _parsed(devices: tuple[str, ...]) -> ParsedFile:
    return ParsedFile("log", "nccl-tests", "0", (), (), "", device_names=devices)


def test_detect_chip_from_a_family_only_device_line() -> None:
    """A device line naming only the family ("NVIDIA H100", as some tools
    print it) takes the family's one preset, with a warning (issue 35)."""
    chip, how, warnings = detect_chip([_parsed(("NVIDIA H100",))], None)
    assert chip is not None and chip.name == "h100-sxm"
    assert "matched from the device lines" in how
    assert warnings == [
        "the device line 'NVIDIA H100' names only the chip's family; took h100-sxm "
        "(pass --chip for another part of the family, e.g. a PCIe card)"
    ]
    chip, _, warnings = detect_chip([_parsed(("AMD Instinct MI300X",))], None)
    assert chip is not None and chip.name == "mi300x" and warnings == []


def test_detect_chip_from_an_ambiguous_family_names_the_choices() -> None:
    chip, why, _ = detect_chip([_parsed(("NVIDIA A100",))], None)
    assert chip is None
    assert why == (
        "'NVIDIA A100' names only the chip's family: pass --chip a100-sxm4-40gb or "
        "--chip a100-sxm4-80gb"
    )
