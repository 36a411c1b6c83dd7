"""The core bindings (remat._core) against the library's own answers.

Every figure is checked against something independent of the binding: the
``remat`` command line on the same files, the exact simulator replaying the
schedule, or the chain file's own JSON. The command line is found through
``REMAT_BIN`` (tools/test-all.sh sets it), else run with ``cargo run``.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import remat

ROOT = Path(__file__).resolve().parents[2]
FC6 = ROOT / "chains" / "rotor-fc6.json"
# 22 stages: long enough that auto runs a slot-based DP, short enough for every solver here.
RESNET50 = ROOT / "chains" / "resnet50-224-b8.json"
MIB = 1 << 20
CHAIN_ALGORITHMS = [
    "auto",
    "persistent",
    "floating",
    "exhaustive",
    "store-all",
    "sequential",
    "revolve",
    "chen-sqrt",
    "chen-greedy",
]


def remat_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs the remat command line from the repository root."""
    binary = os.environ.get("REMAT_BIN")
    if binary:
        command = [binary, *args]
    elif shutil.which("cargo"):
        command = ["cargo", "run", "--quiet", "--bin", "remat", "--", *args]
    else:
        pytest.skip("neither REMAT_BIN nor cargo is available to run the remat command line")
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def cli_json(*args: str) -> Any:
    done = remat_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def fc6() -> remat.Chain:
    return remat.Chain.load(FC6)


@pytest.fixture(scope="module")
def resnet50() -> remat.Chain:
    return remat.Chain.load(RESNET50)


def two_stage_dict() -> dict[str, Any]:
    return {
        "name": "tiny",
        "input_size": 4,
        "stages": [
            {"forward_time": 1, "backward_time": 2, "output_size": 8, "saved_size": 10},
            {
                "name": "second",
                "forward_time": 1.5,
                "backward_time": 2,
                "output_size": 6,
                "saved_size": 6,
                "gradient_size": 3,
                "backward_overhead": 7,
            },
        ],
    }


# --- Chain ---------------------------------------------------------------


def test_chain_load_reads_every_field_of_the_file(fc6: remat.Chain) -> None:
    raw = json.loads(FC6.read_text())
    assert fc6.name == raw["name"] == "rotor-fc6"
    assert len(fc6) == len(raw["stages"]) == 6
    assert fc6.input_size == raw["input_size"]
    for stage, want in zip(fc6.stages, raw["stages"]):
        assert stage.name == want.get("name")
        assert stage.forward_time == want["forward_time"]
        assert stage.backward_time == want["backward_time"]
        assert stage.output_size == want["output_size"]
        # Validation raises a saved size below the output (stage 4 of this file).
        assert stage.saved_size == max(want["saved_size"], want["output_size"])
        assert stage.gradient_size == want.get("gradient_size", want["output_size"])
        assert stage.forward_overhead == want.get("forward_overhead", 0)
        assert stage.backward_overhead == want.get("backward_overhead", 0)
    assert fc6.metadata == raw.get("metadata")
    assert len(fc6.warnings) == 1 and "stage 4" in fc6.warnings[0]
    total = sum(s["forward_time"] + s["backward_time"] for s in raw["stages"])
    loss = raw.get("loss", {})
    total += loss.get("forward_time", 0) + loss.get("backward_time", 0)
    assert fc6.store_all_time == pytest.approx(total, rel=1e-12)
    assert "rotor-fc6" in repr(fc6) and "6 stages" in repr(fc6)


def test_from_dict_applies_the_formats_defaults() -> None:
    chain = remat.Chain.from_dict(two_stage_dict())
    first, second = chain.stages
    assert first.name is None and second.name == "second"
    assert first.gradient_size == 8  # defaults to output_size
    assert second.gradient_size == 3
    assert second.backward_overhead == 7 and second.forward_overhead == 0
    loss = chain.loss
    assert (loss.forward_time, loss.output_size, loss.saved_size) == (0.0, 0, 0)
    assert chain.metadata is None and chain.warnings == []
    assert first.to_dict()["saved_size"] == 10


def test_dict_json_and_pickle_round_trips(fc6: remat.Chain, tmp_path: Path) -> None:
    assert remat.Chain.from_dict(fc6.to_dict()) == fc6
    assert remat.Chain.from_json(fc6.to_json()) == fc6
    assert pickle.loads(pickle.dumps(fc6)) == fc6
    assert copy.deepcopy(fc6) == fc6
    fc6.save(tmp_path / "again.json")
    assert remat.Chain.load(tmp_path / "again.json") == fc6
    other = fc6.to_dict()
    other["stages"][0]["forward_time"] += 1
    assert remat.Chain.from_dict(other) != fc6
    assert fc6 != "rotor-fc6"
    # Immutable, so hashable consistently with ==.
    assert hash(remat.Chain.from_json(fc6.to_json())) == hash(fc6)
    assert len({fc6, remat.Chain.from_dict(fc6.to_dict()), remat.Chain.from_dict(other)}) == 2


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d["stages"][1].update(output_size=-6), "stages[1].output_size (stage 2)"),
        (lambda d: d["stages"][0].pop("saved_size"), "missing field `saved_size`"),
        (lambda d: d["stages"][1].update(forward_time=float("nan")), "stages[1].forward_time"),
        (lambda d: d["stages"][0].update(backward_time=-1.0), "stage 1: backward_time is -1"),
        (lambda d: d["stages"][0].update(output_size=2**64), "stages[0].output_size (stage 1)"),
        (lambda d: d["stages"][0].update(colour="red"), "unknown field `colour`"),
        (lambda d: d.update(stages=[]), "`stages` is empty"),
        (lambda d: d.pop("input_size"), "missing field `input_size`"),
        (lambda d: d.update(name=3), "name"),
    ],
)
def test_bad_chain_dicts_raise_value_error_naming_the_field(edit: Any, field: str) -> None:
    d = two_stage_dict()
    edit(d)
    with pytest.raises(ValueError) as info:
        remat.Chain.from_dict(d)
    assert field in str(info.value)
    # A dict has no lines: serde's position would only confuse.
    assert "line 1 column" not in str(info.value)


def test_from_dict_type_errors() -> None:
    with pytest.raises(TypeError, match="expects a dict"):
        remat.Chain.from_dict([1, 2])  # type: ignore[arg-type]
    d = two_stage_dict()
    d["stages"][0]["forward_time"] = object()
    with pytest.raises(TypeError, match="not JSON serializable"):
        remat.Chain.from_dict(d)


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.json"):
        remat.Chain.load(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "input_size": 1, "stages": [{"forward_time": 1}]}')
    with pytest.raises(ValueError, match=r"bad\.json: stages\[0\].*missing field `backward_time`"):
        remat.Chain.load(bad)


# --- sizes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "nbytes"),
    [
        ("90MiB", 90 * MIB),
        ("8GiB", 8 << 30),
        ("1.5GB", 1_500_000_000),
        ("123456", 123456),
        (" 2 kB ", 2000),
        # 11.2 * 2**30 = 12025908428.8: a fraction of a byte rounds down.
        ("11.2GiB", 12025908428),
        ("0.3KiB", 307),
        (94371840, 94371840),
        (0, 0),
    ],
)
def test_sizes_parse(fc6: remat.Chain, size: int | str, nbytes: int) -> None:
    assert remat.parse_size(size) == nbytes
    if nbytes >= 90 * MIB:
        assert remat.solve(fc6, size, "persistent").budget == nbytes


@pytest.mark.parametrize(
    ("size", "error", "message"),
    [
        ("90M", ValueError, "unknown unit `M`"),
        ("lots", ValueError, "`lots` is not a size"),
        ("-5", ValueError, "is not a size"),
        ("20000000TiB", ValueError, "more than 18446744073709551615 bytes"),
        (-5, ValueError, "memory must be a number of bytes from 0"),
        (2**64, ValueError, "memory must be a number of bytes from 0"),
        (True, TypeError, "got a bool"),
        (1.5e9, TypeError, "got float"),
        (None, TypeError, "got NoneType"),
    ],
)
def test_bad_sizes(fc6: remat.Chain, size: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        remat.solve(fc6, size)


class Index:
    """An integer of another library (numpy.int64, a 0-d integer tensor): it has ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_integers_of_other_libraries_are_sizes(fc6: remat.Chain) -> None:
    assert remat.parse_size(Index(90 * MIB)) == 90 * MIB
    assert remat.solve(fc6, Index(90 * MIB)).budget == 90 * MIB
    with pytest.raises(ValueError, match="memory must be a number of bytes from 0"):
        remat.solve(fc6, Index(-1))


def test_format_size() -> None:
    assert remat.format_size(512) == "512 B"
    assert remat.format_size(90 * MIB) == "90.00 MiB"


# --- solve ---------------------------------------------------------------


def test_solve_matches_the_command_line(fc6: remat.Chain) -> None:
    schedule = remat.solve(fc6, "90MiB")
    cli = cli_json("solve", str(FC6), "--memory", "90MiB")
    assert schedule.algorithm == cli["algorithm"] == "exhaustive"
    assert schedule.makespan == cli["makespan"]
    assert schedule.peak_memory == cli["peak_memory"]
    assert schedule.budget == cli["budget"] == 90 * MIB
    assert schedule.operations == [(o["op"], o["stage"]) for o in cli["operations"]]
    assert json.loads(schedule.to_json()) == cli
    # The README's worked example: 47.42 with 5 recomputed forwards.
    assert schedule.makespan == pytest.approx(47.42)
    forwards = [op for op in schedule.operations if op[0] != "B"]
    assert len(forwards) - (len(fc6) + 1) == 5
    assert str(schedule) == " ".join(f"{kind}^{stage}" for kind, stage in schedule.operations)
    assert len(schedule) == len(cli["operations"]) == 19
    assert schedule.slot_size == 1 and schedule.reason and "exact search" in schedule.reason


@pytest.mark.parametrize("algorithm", ["persistent", "floating", "revolve", "chen-greedy"])
def test_other_algorithms_match_the_command_line(resnet50: remat.Chain, algorithm: str) -> None:
    memory = "3GiB"
    schedule = remat.solve(resnet50, memory, algorithm, slots=200)
    cli = cli_json("solve", str(RESNET50), "--memory", memory, "--algorithm", algorithm, "--slots", "200")
    assert json.loads(schedule.to_json()) == cli


@pytest.mark.parametrize("algorithm", CHAIN_ALGORITHMS)
@pytest.mark.parametrize("fraction", [0.6, 0.8, 1.0])
def test_every_schedule_replays_within_its_budget(resnet50: remat.Chain, algorithm: str, fraction: float) -> None:
    store_all = remat.solve(resnet50, 1 << 50, "store-all").peak_memory
    lowest = remat.min_memory(resnet50)
    budget = int(lowest + fraction * (store_all - lowest))
    if algorithm == "exhaustive":
        chain = remat.Chain.load(FC6)  # exhaustive search is for short chains
        budget = 90 * MIB
    else:
        chain = resnet50
    try:
        schedule = remat.solve(chain, budget, algorithm, slots=200)
    except remat.InfeasibleError as e:
        # Baselines cannot meet every budget; then they say what they need.
        assert algorithm not in ("auto", "persistent", "floating") or fraction < 1.0
        assert e.min_budget is not None and e.min_budget > budget
        return
    assert schedule.peak_memory <= budget == schedule.budget
    replay = remat.simulate(chain, schedule, memory=budget)
    assert replay.makespan == schedule.makespan
    assert replay.peak_memory == schedule.peak_memory
    assert replay.budget == budget and len(replay) == len(schedule)
    assert max(step["during"]["total"] for step in replay.steps) == replay.peak_memory
    assert replay.steps[replay.peak_index]["op"] == replay.peak_operation
    assert schedule.makespan >= resnet50.store_all_time * (1 - 1e-12) or chain is not resnet50


def test_auto_is_never_slower_than_the_baselines(resnet50: remat.Chain) -> None:
    budget = "2GiB"
    auto = remat.solve(resnet50, budget)
    for baseline in ["sequential", "revolve", "chen-sqrt", "chen-greedy"]:
        try:
            other = remat.solve(resnet50, budget, baseline)
        except remat.InfeasibleError:
            continue
        assert auto.makespan <= other.makespan + 1e-9


def test_sequential_segments(resnet50: remat.Chain) -> None:
    schedule = remat.solve(resnet50, "8GiB", "sequential", segments=4)
    assert schedule.detail is not None and "4" in schedule.detail
    cli = cli_json("solve", str(RESNET50), "--memory", "8GiB", "-a", "sequential", "--segments", "4")
    assert json.loads(schedule.to_json()) == cli
    with pytest.raises(ValueError, match='segments applies to algorithm="sequential" only'):
        remat.solve(resnet50, "8GiB", "persistent", segments=4)


def test_exact_memory_matches_the_command_line(resnet50: remat.Chain) -> None:
    # ResNet-50 at 3 GiB: exact by default; 0 turns the fronts off (rounded
    # to slots, saying so), as --exact-memory 0 does.
    exact = remat.solve(resnet50, "3GiB", "persistent")
    assert exact.slot_size == 1 and exact.detail and exact.detail.startswith("not rounded to slots")
    rounded = remat.solve(resnet50, "3GiB", "persistent", exact_memory=0)
    assert rounded.slot_size is not None and rounded.slot_size > 1
    assert rounded.detail and "exact answers are turned off" in rounded.detail
    assert exact.makespan <= rounded.makespan
    cli = cli_json("solve", str(RESNET50), "--memory", "3GiB", "-a", "persistent", "--exact-memory", "0")
    assert json.loads(rounded.to_json()) == cli
    small = remat.solve(resnet50, "3GiB", "persistent", exact_memory="1KiB")
    assert small.detail and "more than 1.00 KiB (the exact memory allowed)" in small.detail
    assert remat.solve(resnet50, "3GiB", "persistent", exact_memory="1GiB").slot_size == 1
    # Rounded sizes never need less memory than exact ones.
    exact_min = remat.min_memory(resnet50, "persistent")
    rounded_min = remat.min_memory(resnet50, "persistent", exact_memory=0)
    assert exact_min is not None and rounded_min is not None and rounded_min >= exact_min
    rows = remat.compare(resnet50, "3GiB", algorithms=["persistent"], exact_memory=0)
    assert rows[0]["slot_size"] == rounded.slot_size
    with pytest.raises(ValueError, match="exact_memory"):
        remat.solve(resnet50, "3GiB", exact_memory="lots")


def test_bad_solve_options(fc6: remat.Chain) -> None:
    with pytest.raises(ValueError, match="unknown algorithm `fastest`; expected one of: "):
        remat.solve(fc6, "90MiB", "fastest")
    with pytest.raises(ValueError, match=r"slots must be at least 1 and at most \d+, got 0"):
        remat.solve(fc6, "90MiB", "persistent", slots=0)
    with pytest.raises(ValueError, match="checkmate solves graphs, not chains"):
        remat.solve(fc6, "90MiB", "checkmate")
    with pytest.raises(ValueError, match="exhaustive search for a solve is limited"):
        remat.solve(remat.Chain.load(RESNET50), "4GiB", "exhaustive")
    with pytest.raises(TypeError):
        remat.solve("chains/rotor-fc6.json", "90MiB")  # type: ignore[arg-type]


# --- infeasible budgets --------------------------------------------------


@pytest.mark.parametrize("algorithm", CHAIN_ALGORITHMS)
def test_infeasible_error_carries_the_smallest_budget(fc6: remat.Chain, algorithm: str) -> None:
    budget = 10 * MIB
    with pytest.raises(remat.InfeasibleError) as info:
        remat.solve(fc6, budget, algorithm)
    e = info.value
    assert isinstance(e, remat.RematError)
    assert e.budget == budget
    assert e.algorithm == (algorithm if algorithm != "auto" else "exhaustive")
    assert e.min_budget is not None
    assert f"{e.min_budget} bytes" in str(e)
    # The smallest budget works, and is the one min_memory gives for that algorithm...
    schedule = remat.solve(fc6, e.min_budget, algorithm)
    assert schedule.peak_memory <= e.min_budget
    assert remat.min_memory(fc6, algorithm) == e.min_budget
    # ...and it is the smallest: a byte less fails.
    with pytest.raises(remat.InfeasibleError):
        remat.solve(fc6, e.min_budget - 1, algorithm)


def test_each_kind_of_error_raises_its_documented_exception(fc6: remat.Chain) -> None:
    """The kind of a library error picks the exception (as it picks the
    command's exit code): infeasible is InfeasibleError, input ValueError,
    internal (a bug in remat) InternalError, a RuntimeError."""
    with pytest.raises(remat.InfeasibleError):
        remat.solve(fc6, 10 * MIB, "persistent")
    # An option the library itself refuses (SolveError::Options, of kind input).
    with pytest.raises(ValueError, match="segments"):
        remat.solve(fc6, "1GiB", "sequential", segments=10**6)
    # A joint graph: a budget below the smallest is infeasible, with its figures.
    text = (ROOT / "tests" / "data" / "joint" / "mlp_block.json").read_text()
    smallest = remat.partition_joint(text)["smallest_budget"]
    if smallest > 0:
        with pytest.raises(remat.InfeasibleError) as info:
            remat.partition_joint(text, smallest - 1)
        assert info.value.min_budget == smallest
        assert info.value.budget == smallest - 1
    with pytest.raises(ValueError):
        remat.partition_joint("{}")
    # No input makes remat's solvers contradict their replay: the mapping
    # itself is checked, kind by kind.
    assert remat._core._exception_for("infeasible") is remat.InfeasibleError
    assert remat._core._exception_for("input") is ValueError
    assert remat._core._exception_for("internal") is remat.InternalError
    assert remat._core._exception_for("time_limit") is remat.RematError
    with pytest.raises(ValueError, match="not an error kind"):
        remat._core._exception_for("bug")
    assert issubclass(remat.InternalError, RuntimeError)
    assert issubclass(remat.InternalError, remat.RematError)
    assert not issubclass(remat.InternalError, ValueError)
    assert remat.InternalError.__module__ == "remat"
    assert "bug in remat" in (remat.InternalError.__doc__ or "")
    with pytest.raises(remat.InternalError, match="report"):
        raise remat.InternalError("please report this")


def test_min_memory_matches_the_command_line(fc6: remat.Chain, resnet50: remat.Chain) -> None:
    for path, chain in [(FC6, fc6), (RESNET50, resnet50)]:
        for algorithm in ["persistent", "auto"]:
            cli = cli_json("min-memory", str(path), "-a", algorithm)
            assert cli["any_schedule"] is not None
            assert remat.min_memory(chain) == cli["any_schedule"]
            assert remat.min_memory(chain, algorithm) == cli["algorithm_min"]
            assert remat.min_memory(chain, algorithm, slots=2**63) == cli["algorithm_min_exact"]
    # The any-schedule minimum of fc6 is exact: exhaustive search meets it and no less.
    lowest = remat.min_memory(fc6)
    assert remat.solve(fc6, lowest, "exhaustive").peak_memory == lowest
    with pytest.raises(remat.InfeasibleError):
        remat.solve(fc6, lowest - 1, "exhaustive")
    with pytest.raises(ValueError, match="slots must be at least 1"):
        remat.min_memory(fc6, "persistent", slots=0)


# --- simulate ------------------------------------------------------------


def test_schedule_json_round_trips_through_simulate(fc6: remat.Chain, tmp_path: Path) -> None:
    schedule = remat.solve(fc6, "95MiB", "persistent")
    text = schedule.to_json()
    forms: list[remat.Schedule | str | list[tuple[str, int]]] = [schedule, text, str(schedule), schedule.operations]
    for form in forms:
        replay = remat.simulate(fc6, form)
        assert replay.makespan == schedule.makespan
        assert replay.peak_memory == schedule.peak_memory
        assert replay.budget is None
    again = remat.Schedule.from_json(text)
    assert again.operations == schedule.operations and again.to_json() == text
    assert again.slot_size is None and again.detail is None and again.reason is None
    # The command line replays the same JSON to the same figures.
    (tmp_path / "schedule.json").write_text(text)
    cli = cli_json("simulate", str(FC6), str(tmp_path / "schedule.json"), "--memory", "95MiB")
    assert cli["makespan"] == schedule.makespan and cli["peak_memory"] == schedule.peak_memory
    assert cli["within_budget"] is True
    # Pickling keeps the solver's details too.
    copied = pickle.loads(pickle.dumps(schedule))
    assert copied == schedule and copied.slot_size == schedule.slot_size
    assert copy.deepcopy(schedule) == schedule
    assert hash(copied) == hash(schedule)
    assert {copied: 1}[schedule] == 1


def test_replay_memory_is_the_simulators(fc6: remat.Chain) -> None:
    replay = remat.simulate(fc6, [("F_all", 1), ("F_all", 2), ("F_all", 3), ("F_all", 4),
                                  ("F_all", 5), ("F_all", 6), ("F_all", 7), ("B", 7), ("B", 6),
                                  ("B", 5), ("B", 4), ("B", 3), ("B", 2), ("B", 1)])  # fmt: skip
    stages = fc6.stages
    initial = replay.initial
    assert initial["activations"] == fc6.input_size
    assert initial["gradients"] == fc6.loss.gradient_size and initial["saved"] == 0
    first = replay.steps[0]
    assert first["op"] == ("F_all", 1)
    assert first["after"]["saved"] == stages[0].saved_size
    assert first["during"]["transient"] == stages[0].forward_overhead
    total = sum(first["after"][k] for k in ("activations", "saved", "gradients", "transient"))
    assert first["after"]["total"] == total
    assert replay.makespan == pytest.approx(fc6.store_all_time, rel=1e-12)
    assert replay.peak_memory == remat.solve(fc6, 1 << 40, "store-all").peak_memory


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([("B", 1)], "operation 1 (B^1) is invalid"),
        ([("F_ck", 1)], "the sequence ends before B^1"),
        ([("F_ck", 9)], "stage 9 does not exist"),
        ([("F_some", 1)], 'operation 1 ("F_some", 1): unknown op `F_some`'),
        ([("B", 0)], "stage 0 does not exist"),
        ("F_ck^1 G^2", "token 2: `G^2` is not an operation"),
        ('{"algorithm": "x"}', "schedule: missing field"),
    ],
)
def test_invalid_schedules_raise_value_error(fc6: remat.Chain, schedule: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        remat.simulate(fc6, schedule)
    assert message in str(info.value)


def test_simulate_type_error(fc6: remat.Chain) -> None:
    with pytest.raises(TypeError, match=r"a schedule is a remat\.Schedule"):
        remat.simulate(fc6, 42)  # type: ignore[arg-type]


def test_simulate_over_budget_is_infeasible(fc6: remat.Chain) -> None:
    schedule = remat.solve(fc6, "100MiB")
    with pytest.raises(remat.InfeasibleError) as info:
        remat.simulate(fc6, schedule, memory="80MiB")
    e = info.value
    assert e.min_budget == schedule.peak_memory and e.budget == 80 * MIB
    assert e.algorithm == schedule.algorithm
    assert "over the budget" in str(e)
    remat.simulate(fc6, schedule, memory=schedule.peak_memory)  # exactly the peak fits


# --- compare -------------------------------------------------------------


def test_compare_matches_the_command_line(fc6: remat.Chain) -> None:
    rows = remat.compare(fc6, "90MiB")
    cli = cli_json("compare", str(FC6), "--memory", "90MiB")["rows"]
    for row in rows + cli:
        row.pop("solve_seconds")
    assert rows == cli
    by_name = {row["algorithm"]: row for row in rows}
    assert by_name["exhaustive"]["makespan"] == remat.solve(fc6, "90MiB", "exhaustive").makespan
    assert by_name["store-all"]["status"] == "infeasible"
    assert by_name["store-all"]["min_budget"] == remat.min_memory(fc6, "store-all")
    picked = remat.compare(fc6, "90MiB", algorithms=["revolve"])
    assert [row["algorithm"] for row in picked] == ["revolve"]
    with pytest.raises(ValueError, match="unknown algorithm"):
        remat.compare(fc6, "90MiB", algorithms=["nope"])


# --- the package itself --------------------------------------------------


def test_solves_in_threads_agree_with_serial_solves(resnet50: remat.Chain) -> None:
    budgets = [f"{g}GiB" for g in (2, 3, 4, 5)]
    serial = [remat.solve(resnet50, b, "floating", slots=200).to_json() for b in budgets]
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = remat.solve(resnet50, budgets[i], "floating", slots=200).to_json()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(budgets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(budgets))] == serial


def test_solve_releases_the_gil() -> None:
    """While one thread solves, another runs Python code.

    Deterministic, not timed: with a switch interval far longer than the test,
    the solving thread gives the GIL up only where the binding releases it, so
    the main thread can see the solve unfinished only if the solve runs
    without the GIL. (The solve takes about a second, so the main thread has
    ample time to take the GIL the solver let go.)
    """
    chain = remat.Chain.load(ROOT / "chains" / "resnet101-224-b8.json")
    entered = threading.Event()
    results: list[remat.Schedule] = []

    def work() -> None:
        entered.set()
        results.append(remat.solve(chain, "6GiB", "floating", slots=1500))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        entered.wait()
        unfinished_while_main_ran = not results
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert unfinished_while_main_ran
    assert results[0].peak_memory <= 6 << 30


def test_everything_public_has_a_docstring() -> None:
    for name in remat.__all__:
        obj = getattr(remat, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"remat.{name} has no docstring"
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                # Methods and properties; InfeasibleError's None defaults are data.
                if not attr.startswith("_") and member is not None:
                    assert (member.__doc__ or "").strip(), f"remat.{name}.{attr} has no docstring"


def test_signatures_are_introspectable() -> None:
    params = inspect.signature(remat.solve).parameters
    assert list(params) == ["chain", "memory", "algorithm", "slots", "segments", "exact_memory", "in_flight"]
    assert params["algorithm"].default == "auto" and params["slots"].default == 500
    assert params["exact_memory"].kind == inspect.Parameter.KEYWORD_ONLY and params["exact_memory"].default is None
    assert params["in_flight"].kind == inspect.Parameter.KEYWORD_ONLY and params["in_flight"].default == 1
    assert remat.DEFAULT_SLOTS == 500


def test_stub_file_and_marker_ship_with_the_package() -> None:
    package = Path(remat.__file__).parent
    assert (package / "py.typed").exists()
    stub = (package / "_core.pyi").read_text()
    for name in remat.__all__:
        if name != "__version__":
            assert name in stub, f"{name} missing from _core.pyi"


def test_readme_python_quick_start_runs_and_its_figures_are_true(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python quick start", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    cwd = os.getcwd()
    os.chdir(ROOT)  # the block loads chains/rotor-fc6.json
    try:
        exec(compile(block, "README.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    schedule, chain = namespace["schedule"], namespace["chain"]
    # The figures the block's comments quote.
    assert f"{schedule.makespan}, {schedule.peak_memory}" in block
    assert f"# {remat.min_memory(chain)}: no schedule fits below" in block
    printed = capsys.readouterr().out.splitlines()
    assert printed == [str(schedule), str(remat.min_memory(chain))]
    assert str(schedule).startswith("F_ck^1 F_none^2 F_none^3 F_all^4") and str(schedule).endswith("B^1")
    assert str(schedule.operations[:2]).replace("'", '"') in block
    assert len(namespace["rows"]) == len(remat.compare(chain, "90MiB"))


def test_in_flight_plans_a_pipeline_rank() -> None:
    """``in_flight=n``: the schedule's peak plus n - 1 residues fits the
    budget, the residue is the simulator's, and the smallest budget named is
    the one that works (issue 28)."""
    chain = remat.Chain.load(str(ROOT / "chains" / "rotor-fc6.json"))
    budget = 200 << 20
    plain = remat.solve(chain, budget)
    assert plain.in_flight == 1 and plain.residue is None and plain.rank_peak == plain.peak_memory
    three = remat.solve(chain, budget, in_flight=3)
    replay = remat.simulate(chain, three)
    assert three.in_flight == 3 and three.residue == replay.residue
    assert three.rank_peak == replay.rank_peak(3) == three.peak_memory + 2 * replay.residue <= budget
    assert three.makespan > plain.makespan  # three micro-batches do not fit without recomputing
    again = remat.Schedule.from_json(three.to_json())
    assert (again.in_flight, again.residue) == (3, three.residue)
    least = remat.min_memory(chain, "persistent", in_flight=3)
    one = remat.min_memory(chain, "persistent")
    assert least is not None and one is not None and least > one
    assert remat.solve(chain, least, "persistent", in_flight=3).rank_peak <= least
    with pytest.raises(remat.InfeasibleError) as info:
        remat.solve(chain, least - 1, "persistent", in_flight=3)
    assert info.value.min_budget == least
    floating = remat.solve(chain, budget, "floating", in_flight=3)
    assert floating.rank_peak <= budget and floating.makespan <= three.makespan
    with pytest.raises(ValueError, match="in_flight must be at least 1"):
        remat.solve(chain, budget, in_flight=0)
    with pytest.raises(TypeError, match="in_flight must be a whole number"):
        remat.solve(chain, budget, in_flight=True)


def test_an_option_may_be_faster_but_never_takes_the_backward_below_zero() -> None:
    # docs/model.md, Options: recompute_time down to -backward_time (a
    # compiled block can run faster keeping less), not below.
    stage: dict[str, Any] = {
        "forward_time": 1,
        "backward_time": 2,
        "output_size": 4,
        "saved_size": 8,
        "options": [{"saved_size": 4, "recompute_time": -1}],
    }
    d = {
        "name": "x",
        "input_size": 4,
        "stages": [stage],
        "loss": {"forward_time": 0, "backward_time": 0, "output_size": 0, "saved_size": 0},
    }
    chain = remat.Chain.from_dict(d)
    schedule = remat.solve(chain, 1 << 40)
    assert any(o for _, _, o in schedule.operations_with_options)  # the faster option is taken
    assert remat.simulate(chain, schedule).makespan == schedule.makespan == 1 + 1
    stage["options"][0]["recompute_time"] = -3
    bound = r"stage 1: options\[\]\.recompute_time is -3; .* at least -backward_time \(-2\)"
    with pytest.raises(ValueError, match=bound):
        remat.Chain.from_dict(d)
