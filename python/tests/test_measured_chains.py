"""The chains measured on a GPU (chains/measured/, by benchmarks/gpu_measure.py)
load, say where they come from, and solve: no GPU needed."""

from __future__ import annotations

from pathlib import Path

import pytest

import remat

MEASURED = Path(__file__).resolve().parents[2] / "chains" / "measured"
CHAINS = sorted(MEASURED.glob("*.json"))


def test_the_measured_chains_are_there() -> None:
    # ResNet-50/101/152, DenseNet-121 and the GPT-2 chain.
    names = {p.name.split("-")[0] for p in CHAINS}
    assert {"resnet50", "resnet101", "resnet152", "densenet121", "gpt2"} <= names


@pytest.mark.parametrize("path", CHAINS, ids=[p.stem for p in CHAINS])
def test_measured_chain_loads_and_solves(path: Path) -> None:
    chain = remat.Chain.load(path)
    assert chain.warnings == []
    meta = chain.metadata or {}
    # Where it was measured, on what, and how to measure it again.
    for key in ("gpu", "dtype", "batch", "torch", "command", "date"):
        assert meta.get(key), f"{path.name}: no metadata {key!r}"
    assert meta["command"].startswith("python benchmarks/gpu_measure.py")
    assert meta["batch"] == int(path.stem.split("-b")[-1].split("-")[0])
    # Times are measured (every stage took some time), the loss too.
    assert all(s.forward_time > 0 and s.backward_time > 0 for s in chain.stages)
    assert chain.loss.saved_size > 0

    store_all = remat.solve(chain, 1 << 60, algorithm="store-all")
    lowest = remat.min_memory(chain)
    assert 0 < lowest < store_all.peak_memory
    budget = (lowest + store_all.peak_memory) // 2
    schedule = remat.solve(chain, budget)
    assert schedule.peak_memory <= budget
    assert schedule.makespan >= store_all.makespan
    replay = remat.simulate(chain, schedule)
    assert replay.peak_memory == schedule.peak_memory
    assert replay.makespan == pytest.approx(schedule.makespan)
    # Below the smallest budget any schedule meets, none is found; the error's
    # budget (auto's, on memory slots: at least that one) is met.
    with pytest.raises(remat.InfeasibleError) as e:
        remat.solve(chain, lowest - 1)
    assert e.value.min_budget is not None and e.value.min_budget >= lowest
    assert remat.solve(chain, e.value.min_budget).peak_memory <= e.value.min_budget
