"""Issue 27's hostile Python calls: each is a ValueError (or TypeError)
naming the argument and the value, never an OverflowError, an abort of the
interpreter or a hang."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import remat

ROOT = Path(__file__).resolve().parents[2]
FC6 = ROOT / "chains" / "rotor-fc6.json"
STAGE = {"forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100}


def chain_of(stages: int) -> remat.Chain:
    return remat.Chain.from_json(json.dumps({"name": "t", "input_size": 1000, "stages": [STAGE] * stages}))


def test_min_memory_on_a_100000_stage_chain_is_a_value_error_not_an_abort() -> None:
    # Run in a child: an abort (a failed 80 GB allocation) would take pytest down.
    code = (
        "import json, remat\n"
        f"stage = {STAGE!r}\n"
        "chain = remat.Chain.from_json(json.dumps({'name': 't', 'input_size': 1000, 'stages': [stage] * 100000}))\n"
        "try:\n"
        "    remat.min_memory(chain)\n"
        "except ValueError as e:\n"
        "    print('ValueError:', e)\n"
    )
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ValueError:" in out.stdout and "100000-stage chain" in out.stdout, out.stdout
    assert time.monotonic() - start < 60


def test_min_memory_of_a_modest_chain_still_answers() -> None:
    chain = chain_of(20)
    assert remat.min_memory(chain) == remat.min_memory(chain, "exhaustive" if len(chain) <= 12 else "floating")


@pytest.mark.parametrize("slots", [-1, 0, 2**64, -(2**70)])
def test_out_of_range_slots_are_value_errors_naming_slots(slots: int) -> None:
    fc6 = remat.Chain.load(FC6)
    calls = [
        lambda: remat.solve(fc6, "90MiB", "persistent", slots=slots),
        lambda: remat.min_memory(fc6, "persistent", slots=slots),
        lambda: remat.compare(fc6, "90MiB", slots=slots),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=f"slots must be at least 1 and at most .*, got {slots}$"):
            call()


@pytest.mark.parametrize("slots", [1.5, "500", True, None])
def test_slots_of_another_type_are_type_errors(slots: object) -> None:
    fc6 = remat.Chain.load(FC6)
    if slots is None:
        # None is the default.
        assert remat.solve(fc6, "90MiB", "persistent", slots=slots).slot_size is not None  # type: ignore[arg-type]
        return
    with pytest.raises(TypeError, match="slots must be a whole number"):
        remat.solve(fc6, "90MiB", "persistent", slots=slots)  # type: ignore[arg-type]


@pytest.mark.parametrize("segments", [-1, 2**64])
def test_out_of_range_segments_are_value_errors_naming_segments(segments: int) -> None:
    fc6 = remat.Chain.load(FC6)
    with pytest.raises(ValueError, match=f"segments must be at least 0 and at most .*, got {segments}$"):
        remat.solve(fc6, "90MiB", "sequential", segments=segments)


@pytest.mark.parametrize("value", [-1, 2**64])
def test_format_size_out_of_range_is_a_value_error_naming_bytes(value: int) -> None:
    with pytest.raises(ValueError, match=f"bytes must be at least 0 and at most 18446744073709551615, got {value}$"):
        remat.format_size(value)
    assert remat.format_size(2**64 - 1).endswith("B")


def test_an_exact_memory_above_the_machine_is_a_value_error() -> None:
    fc6 = remat.Chain.load(FC6)
    for call in [
        lambda: remat.solve(fc6, "90MiB", exact_memory=2**60),
        lambda: remat.min_memory(fc6, "persistent", exact_memory="1000TiB"),
        lambda: remat.compare(fc6, "90MiB", exact_memory=2**64 - 1),
    ]:
        with pytest.raises(ValueError, match="exact_memory: exact memory .* is more than this machine can give"):
            call()
    assert remat.solve(fc6, "90MiB", exact_memory="64MiB").peak_memory <= 90 << 20


@pytest.mark.parametrize(
    "notation", ["F_none^1..18446744073709551615", "F_all^1..100000000 B^2..1", "F_ck^1..16777216 F_ck^1"]
)
def test_a_huge_notation_run_is_a_value_error(notation: str) -> None:
    fc6 = remat.Chain.load(FC6)
    start = time.monotonic()
    with pytest.raises(ValueError, match="at most 16777216"):
        remat.simulate(fc6, notation)
    assert time.monotonic() - start < 20
