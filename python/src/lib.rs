//! `remat._core`: the Python bindings of the remat library.
//!
//! Thin on purpose: every figure comes from the Rust library (solvers, the
//! exact simulator, size parsing); this crate only converts arguments and
//! results and maps errors to Python exceptions by their kind
//! ([`remat::ErrorKind`], the same kind that picks the CLI's exit code;
//! [`exception_type`] is the whole mapping):
//! - infeasible, no schedule within the budget: `remat.InfeasibleError` (a
//!   `remat.RematError`) with `.min_budget`, `.algorithm` and `.budget`;
//! - input (a chain field, a size, an algorithm name, an option, an invalid
//!   schedule): `ValueError` with the library's message;
//! - internal, a bug in remat (a solver's schedule that its replay rejects, a
//!   mispredicted makespan) or a failed ILP solver: `remat.InternalError`, a
//!   `remat.RematError` and a `RuntimeError`;
//! - a time limit without a schedule: `remat.RematError` itself.
#![deny(unsafe_code)]

mod chain;
mod cli;
mod schedule;

use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyType};
use remat::ErrorKind;
use remat::report::{compare as compare_all, reported};
use remat::size::{format_size as format_bytes, parse_size as parse_bytes};
use remat::solve::{Algorithm, SolveError, SolveOptions, any_min_budget, min_budget};

use chain::{PyChain, PyStage, json_loads};
use schedule::{PyReplay, PySchedule, operations_of, recorded_of};

pyo3::create_exception!(
    remat,
    RematError,
    PyException,
    "Base class of remat's own errors (InfeasibleError, InternalError). Raised as such when a \
     time limit passes before any schedule is found."
);
pyo3::create_exception!(
    remat,
    InfeasibleError,
    RematError,
    "No schedule fits the memory budget.\n\n\
     Attributes: ``min_budget`` (int or None), the smallest budget in bytes at which the algorithm \
     (or, from ``simulate``, the schedule) fits, when known; ``algorithm`` (str or None), the \
     algorithm asked; ``budget`` (int), the budget asked, in bytes. The message says the same in words."
);

/// `remat.InternalError`'s docstring.
const INTERNAL_ERROR_DOC: &str = "A bug in remat, not in the input: a solver's schedule that remat's own \
     simulator rejects, a solver's makespan that its replay contradicts, or a failure of the ILP solver \
     remat calls. Please report it with the input. A RematError and a RuntimeError.";

/// `remat.InternalError(RematError, RuntimeError)`, made once: a class with
/// two bases, which `create_exception!` cannot declare.
static INTERNAL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn internal_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    let ty = INTERNAL_ERROR.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let bases = (py.get_type::<RematError>(), py.get_type::<PyRuntimeError>());
        let namespace = PyDict::new(py);
        namespace.set_item("__doc__", INTERNAL_ERROR_DOC)?;
        namespace.set_item("__module__", "remat")?;
        let class = py.get_type::<PyType>().call1(("InternalError", bases, namespace))?;
        Ok(class.cast_into::<PyType>()?.unbind())
    })?;
    Ok(ty.bind(py).clone())
}

/// The Python exception class of each kind of library error: the one
/// mapping, documented in this crate's header and `remat/__init__.py`.
fn exception_type(py: Python<'_>, kind: ErrorKind) -> PyResult<Bound<'_, PyType>> {
    Ok(match kind {
        ErrorKind::Infeasible => py.get_type::<InfeasibleError>(),
        ErrorKind::Input => py.get_type::<PyValueError>(),
        ErrorKind::TimeLimit => py.get_type::<RematError>(),
        ErrorKind::Internal => internal_error_type(py)?,
    })
}

/// A library error of `kind` as the Python exception of that kind, with
/// `message`. (An `InfeasibleError` with its figures: [`infeasible`].)
fn kind_error(py: Python<'_>, kind: ErrorKind, message: String) -> PyErr {
    match exception_type(py, kind) {
        Ok(ty) => PyErr::from_type(ty, message),
        Err(e) => e,
    }
}

/// The exception class ``remat`` raises for an error of ``kind``
/// (``"infeasible"``, ``"input"``, ``"time_limit"``, ``"internal"``): for
/// tests of the mapping, since no input makes remat's solvers contradict
/// their replay.
#[pyfunction]
fn _exception_for<'py>(py: Python<'py>, kind: &str) -> PyResult<Bound<'py, PyType>> {
    let kind: ErrorKind = kind.parse().map_err(PyValueError::new_err)?;
    exception_type(py, kind)
}

/// An `InfeasibleError` carrying its figures as attributes.
fn infeasible(py: Python<'_>, message: String, algorithm: Option<&str>, budget: u64, min: Option<u64>) -> PyErr {
    let err = InfeasibleError::new_err(message);
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail short of
    // memory exhaustion, in which case the error raised is that one.
    let set = value
        .setattr("min_budget", min)
        .and_then(|()| value.setattr("algorithm", algorithm))
        .and_then(|()| value.setattr("budget", budget));
    match set {
        Ok(()) => err,
        Err(e) => e,
    }
}

/// The Python exception for a library `SolveError`: that of its kind
/// ([`exception_type`]), an `InfeasibleError` with its figures.
fn solve_error(py: Python<'_>, e: SolveError) -> PyErr {
    match e {
        SolveError::Infeasible { algorithm, budget, min_budget } => {
            infeasible(py, e.to_string(), Some(algorithm.name()), budget, min_budget)
        }
        e => kind_error(py, e.kind(), e.to_string()),
    }
}

/// A size argument: an integer of bytes (>= 0) or a string with a unit (`"8GiB"`,
/// `"11.2GiB"`: a fraction of a byte is rounded down). `what` names it in
/// messages.
fn size_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes (an int) or a size string like \"8GiB\", got a bool"
        )));
    }
    // Python ints, and integers of other libraries (numpy, torch) through `__index__`.
    if obj.is_instance_of::<PyInt>() || obj.hasattr("__index__")? {
        return obj.extract::<u64>().map_err(|_| {
            PyValueError::new_err(format!("{what} must be a number of bytes from 0 to {}, got {obj}", u64::MAX))
        });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return parse_bytes(&s.to_cow()?).map_err(|e| PyValueError::new_err(format!("{what}: {e}")));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes (an int) or a size string like \"8GiB\", got {}",
        obj.get_type().name()?
    )))
}

/// A hash of `text` that is the same in every process (SipHash with fixed keys).
fn hash_text(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn algorithm_arg(name: &str) -> PyResult<Algorithm> {
    remat::problem::Method::chain_algorithm(name).map_err(|e: String| PyValueError::new_err(format!("algorithm: {e}")))
}

/// The ``exact_memory`` keyword: None, or bytes as ``size_arg`` reads them.
/// More than this machine can give a solve is a ``ValueError`` at once
/// ([`SolveOptions::check`]), not an abort minutes later.
fn exact_memory_arg(exact_memory: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let bytes = exact_memory.map(|m| size_arg(m, "exact_memory")).transpose()?;
    let opts = SolveOptions { exact_memory: bytes, ..SolveOptions::default() };
    opts.check().map_err(|e| PyValueError::new_err(format!("exact_memory: {e}")))?;
    Ok(bytes)
}

/// A whole-number argument from `min` to `max`: a Python int (or anything
/// with `__index__`), never a bool or a float. Out of range, negative or too
/// large for 64 bits, it is a `ValueError` naming the argument and the value
/// (not pyo3's `OverflowError`); of another type, a `TypeError`.
pub(crate) fn whole_arg(obj: &Bound<'_, PyAny>, what: &str, min: u64, max: u64) -> PyResult<u64> {
    let range = || PyValueError::new_err(format!("{what} must be at least {min} and at most {max}, got {obj}"));
    if obj.is_instance_of::<PyBool>() || !(obj.is_instance_of::<PyInt>() || obj.hasattr("__index__")?) {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a whole number (an int) from {min} to {max}, got {}",
            obj.get_type().name()?
        )));
    }
    match obj.extract::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(range()),
    }
}

/// ``slots``: a whole number from 1 to 2**64 - 1 (more slots than bytes is
/// exact); None (not given) is the default, 500.
/// ``in_flight``: micro-batches a pipeline rank holds at once, a whole
/// number from 1 to ``remat.MAX_IN_FLIGHT`` (2**20, the command line's
/// limit too); None: 1.
pub(crate) fn in_flight_arg(in_flight: Option<&Bound<'_, PyAny>>) -> PyResult<std::num::NonZeroUsize> {
    match in_flight {
        None => Ok(std::num::NonZeroUsize::MIN),
        Some(obj) => {
            let n = whole_arg(obj, "in_flight", 1, remat::schedule::MAX_IN_FLIGHT as u64)?;
            Ok(std::num::NonZeroUsize::new(n as usize).expect("at least 1"))
        }
    }
}

fn slots_arg(slots: Option<&Bound<'_, PyAny>>) -> PyResult<std::num::NonZeroUsize> {
    let Some(slots) = slots else { return Ok(remat::solve::DEFAULT_SLOTS) };
    let n = whole_arg(slots, "slots", 1, usize::MAX as u64)?;
    Ok(std::num::NonZeroUsize::new(n as usize).expect("n >= 1"))
}

/// The fastest schedule of ``chain`` whose peak memory fits ``memory``.
///
/// ``memory`` is bytes (an int) or a size string (``"90MiB"``, ``"8GiB"``,
/// ``"11.2GiB"``; kB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024). It counts
/// activations, saved data, gradients and transient workspace, not parameters
/// or optimizer state.
///
/// ``algorithm``: ``"auto"`` (exhaustive search on small chains, else the
/// floating DP when its tables are modest, else persistent; also tries the
/// cheap baselines and returns the fastest that fits), ``"floating"``,
/// ``"persistent"``, ``"exhaustive"`` (at most 14 stages), or a baseline:
/// ``"store-all"``, ``"sequential"`` (PyTorch's ``checkpoint_sequential``;
/// ``segments`` K, default the fastest K that fits), ``"revolve"``,
/// ``"chen-sqrt"``, ``"chen-greedy"``. ``slots`` is the number of memory
/// slots the DPs round sizes to (more: closer to exact, slower).
///
/// ``exact_memory`` (bytes or a size string): the most memory the persistent
/// optimum exact in bytes may take in ``"persistent"``, ``"floating"`` and
/// ``"auto"``; past it they round sizes to ``slots`` and the schedule's
/// ``detail`` says "not exact". Default: the slot table's memory, at least
/// 256 MiB. ``0``: always round (fastest). ResNet-1001 (339 stages) at half of
/// store-all takes about 750 MB and 25 s exact, 1 s rounded.
///
/// ``in_flight`` (pipeline parallelism): micro-batches a rank holds at once
/// (GPipe: all; 1F1B: ``P - k`` on rank ``k`` of ``P``, at most the
/// micro-batches). The schedule of one micro-batch is then the fastest whose
/// ``peak_memory + (in_flight - 1) * residue`` fits ``memory``, the residue
/// being what it keeps between its forward and its backward; the schedule's
/// ``rank_peak`` is that sum. Every algorithm plans for it (the baselines at
/// the largest budget of their own whose rank peak fits).
///
/// The returned schedule has been replayed by the exact simulator: its
/// ``makespan`` and ``peak_memory`` are the replay's. Deterministic. Runs
/// without the GIL, so other Python threads go on while it solves.
///
/// Raises ``InfeasibleError`` (with ``.min_budget``) when no schedule of the
/// algorithm fits, ``ValueError`` for a bad size, algorithm or option.
#[pyfunction]
#[pyo3(
    signature = (chain, memory, algorithm = "auto", slots = None, *, segments = None, exact_memory = None, in_flight = None),
    text_signature = "(chain, memory, algorithm='auto', slots=500, *, segments=None, exact_memory=None, in_flight=1)"
)]
#[allow(clippy::too_many_arguments)]
fn solve(
    py: Python<'_>,
    chain: &Bound<'_, PyChain>,
    memory: &Bound<'_, PyAny>,
    algorithm: &str,
    slots: Option<&Bound<'_, PyAny>>,
    segments: Option<&Bound<'_, PyAny>>,
    exact_memory: Option<&Bound<'_, PyAny>>,
    in_flight: Option<&Bound<'_, PyAny>>,
) -> PyResult<PySchedule> {
    let budget = size_arg(memory, "memory")?;
    let in_flight = in_flight_arg(in_flight)?;
    let exact_memory = exact_memory_arg(exact_memory)?;
    let algorithm = algorithm_arg(algorithm)?;
    let slots = slots_arg(slots)?;
    let segments = segments.map(|s| whole_arg(s, "segments", 0, usize::MAX as u64).map(|n| n as usize)).transpose()?;
    if segments.is_some() && algorithm != Algorithm::Sequential {
        return Err(PyValueError::new_err(format!(
            "segments applies to algorithm=\"sequential\" only (got algorithm=\"{algorithm}\")"
        )));
    }
    let chain = &chain.get().inner;
    let result = py.detach(|| {
        let opts = SolveOptions { slots, segments, exact_memory, in_flight, ..SolveOptions::default() };
        remat::solve(chain, budget, algorithm, &opts)
    });
    let solution = result.map_err(|e| solve_error(py, e))?;
    Ok(PySchedule {
        inner: solution.schedule,
        slot_size: Some(solution.slot_size),
        detail: solution.detail,
        reason: solution.reason,
    })
}

/// Replays ``schedule`` on ``chain`` with remat's exact simulator and
/// returns a ``Replay`` (makespan, peak memory, memory around every
/// operation).
///
/// ``schedule`` is a ``Schedule``, its JSON text (``Schedule.to_json()``,
/// ``remat solve --json``), the paper's notation (``"F_ck^1 F_none^2 ...
/// B^1"``), or a list of ``(kind, stage)`` pairs. A ``Schedule`` (or its
/// JSON) computed for this chain must record its replay's figures
/// (``peak_memory``, ``residue``, ``makespan``): one that differs is a
/// ``ValueError`` naming it.
///
/// With ``memory`` (bytes or a size string), the schedule is also checked
/// against that budget: its peak, or with micro-batches in flight its rank
/// peak, ``peak_memory + (in_flight - 1) * residue``. ``in_flight``
/// defaults to the schedule's own (``Schedule.in_flight``, 1 for notation
/// or a list); at most ``remat.MAX_IN_FLIGHT``.
///
/// Raises ``ValueError`` naming the first invalid operation and why (its
/// input is not in memory, it runs out of order, the sequence stops before
/// ``B^1``...), ``InfeasibleError`` when the schedule is valid but needs more
/// than ``memory`` (``.min_budget`` is then its peak, or its rank peak).
#[pyfunction]
#[pyo3(
    signature = (chain, schedule, memory = None, *, in_flight = None),
    text_signature = "(chain, schedule, memory=None, *, in_flight=None)"
)]
fn simulate(
    py: Python<'_>,
    chain: &Bound<'_, PyChain>,
    schedule: &Bound<'_, PyAny>,
    memory: Option<&Bound<'_, PyAny>>,
    in_flight: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyReplay> {
    let budget = memory.map(|m| size_arg(m, "memory")).transpose()?;
    let asked = in_flight.map(|n| in_flight_arg(Some(n))).transpose()?;
    let ops = operations_of(schedule)?;
    let recorded = recorded_of(schedule);
    let chain = &chain.get().inner;
    let replay = remat::simulate(chain, &ops).map_err(|e| kind_error(py, e.kind(), e.to_string()))?;
    // Figures recorded for this chain must be the replay's (issue 36: a
    // residue the operations do not have gave a rank peak).
    if let Some(recorded) = recorded.as_ref().filter(|s| s.chain.as_ref().is_some_and(|c| c.hash == chain.id().hash)) {
        replay.check_recorded(recorded).map_err(|e| kind_error(py, e.kind(), format!("schedule: {e}")))?;
    }
    let in_flight = asked.map_or_else(|| recorded.as_ref().map_or(1, |s| s.in_flight), |n| n.get());
    let algorithm = recorded.as_ref().map(|s| s.algorithm.clone());
    if let Some(budget) = budget {
        if let Err(e) = remat::simulate_within(chain, &ops, budget) {
            if e.kind() != ErrorKind::Infeasible {
                return Err(kind_error(py, e.kind(), e.to_string()));
            }
            // Over the budget: an `InfeasibleError` with the schedule's peak.
            let message =
                format!("{e} ({}); the schedule's peak is {} bytes", format_bytes(budget), replay.peak_memory);
            return Err(infeasible(py, message, algorithm.as_deref(), budget, Some(replay.peak_memory)));
        }
        let rank = replay.rank_peak(in_flight);
        if rank.is_none_or(|r| r > budget) {
            let needs = rank.map_or_else(|| "more than 2**64 - 1 bytes".to_string(), |r| format!("{r} bytes"));
            let message = format!(
                "with {in_flight} micro-batches in flight the schedule's rank peak, its peak {} plus {} residues of \
                 {} bytes, is {needs}, over the budget of {} ({budget} bytes)",
                replay.peak_memory,
                in_flight - 1,
                replay.residue(),
                format_bytes(budget)
            );
            return Err(infeasible(py, message, algorithm.as_deref(), budget, rank));
        }
    }
    Ok(PyReplay { inner: replay, budget, in_flight })
}

/// The smallest memory budget, in bytes, that works.
///
/// Without ``algorithm``: the smallest budget at which any valid schedule
/// exists. It is exact in the usual case (the floating DP's nested minimum
/// meets a lower bound every schedule obeys, or exhaustive search on chains
/// of at most 14 stages); otherwise it is the nested minimum, a budget at
/// which remat's own schedules fit. The slot-based DPs round sizes to
/// ``memory / slots``, so ``solve`` at exactly this budget may need an
/// exact algorithm; pass ``algorithm`` for the budget a solver meets.
///
/// With ``algorithm`` (as in ``solve``): the smallest budget at which that
/// algorithm finds a schedule with ``slots`` memory slots (``solve`` at that
/// budget succeeds), or None when no budget works with these options.
/// ``exact_memory`` and ``in_flight`` are ``solve``'s; with ``in_flight`` > 1
/// and no ``algorithm``, the smallest budget ``"auto"`` meets.
#[pyfunction]
#[pyo3(
    signature = (chain, algorithm = None, *, slots = None, exact_memory = None, in_flight = None),
    text_signature = "(chain, algorithm=None, *, slots=500, exact_memory=None, in_flight=1)"
)]
fn min_memory(
    py: Python<'_>,
    chain: &Bound<'_, PyChain>,
    algorithm: Option<&str>,
    slots: Option<&Bound<'_, PyAny>>,
    exact_memory: Option<&Bound<'_, PyAny>>,
    in_flight: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<u64>> {
    let slots = slots_arg(slots)?;
    let exact_memory = exact_memory_arg(exact_memory)?;
    let in_flight = in_flight_arg(in_flight)?;
    let mut algorithm = algorithm.map(algorithm_arg).transpose()?;
    if in_flight.get() > 1 && algorithm.is_none() {
        // With micro-batches in flight, what auto meets.
        algorithm = Some(Algorithm::Auto);
    }
    let chain = &chain.get().inner;
    match algorithm {
        None => py.detach(|| any_min_budget(chain)).map(|a| Some(a.upper)).map_err(|e| solve_error(py, e)),
        Some(algorithm) => {
            let opts = SolveOptions { slots, exact_memory, in_flight, ..SolveOptions::default() };
            py.detach(|| min_budget(chain, algorithm, &opts)).map_err(|e| solve_error(py, e))
        }
    }
}

/// Runs every algorithm (remat's solvers and the baselines, or the names in
/// ``algorithms``) on ``chain`` at one budget, one after the other, and
/// returns one dict per algorithm, as ``remat compare --json`` prints them:
///
/// ``{"algorithm": "persistent", "status": "solved", "makespan": ...,
/// "overhead_percent": ..., "peak_memory": ..., "slot_size": ..., "detail":
/// ..., "solve_seconds": ...}``; ``status`` ``"infeasible"`` rows carry
/// ``min_budget`` (bytes or None), ``"skipped"`` rows (too costly for this
/// chain) a ``reason``. Infeasible algorithms are rows, not errors.
/// ``solve_seconds`` is the only figure that varies between runs. Runs
/// without the GIL. ``slots`` and ``exact_memory`` are ``solve``'s.
#[pyfunction]
#[pyo3(
    signature = (chain, memory, *, slots = None, algorithms = None, exact_memory = None),
    text_signature = "(chain, memory, *, slots=500, algorithms=None, exact_memory=None)"
)]
fn compare<'py>(
    py: Python<'py>,
    chain: &Bound<'py, PyChain>,
    memory: &Bound<'py, PyAny>,
    slots: Option<&Bound<'py, PyAny>>,
    algorithms: Option<Vec<String>>,
    exact_memory: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let budget = size_arg(memory, "memory")?;
    let exact_memory = exact_memory_arg(exact_memory)?;
    let slots = slots_arg(slots)?;
    let algorithms = match algorithms {
        Some(names) => names.iter().map(|n| algorithm_arg(n)).collect::<PyResult<Vec<_>>>()?,
        None => reported(),
    };
    let chain = &chain.get().inner;
    let cmp = py
        .detach(|| {
            compare_all(chain, budget, &algorithms, &SolveOptions { slots, exact_memory, ..SolveOptions::default() })
        })
        .map_err(|e| solve_error(py, e))?;
    let text = serde_json::to_string(&cmp.rows).expect("comparisons serialize");
    json_loads(py, &text)
}

/// Bytes of a size as ``solve`` reads it: an int is returned as is (it must
/// be >= 0), a string is a number with an optional unit (``"90MiB"``,
/// ``"8GiB"``, ``"1.5GB"``, ``"123456"``); a fraction of a byte is rounded
/// down (``"11.2GiB"`` is 12025908428). Raises ``ValueError`` on anything
/// else, naming the units remat knows.
#[pyfunction]
fn parse_size(size: &Bound<'_, PyAny>) -> PyResult<u64> {
    size_arg(size, "size")
}

/// The fusion-aware min-cut of a joint forward+backward graph (remat's joint
/// JSON, as ``remat.torch.export_joint`` writes it): the whole answer as a
/// dict (``chosen`` with its ``saved`` node names, the ``min_cut``,
/// ``save_all`` and ``recompute_all`` partitions, the bans). With ``memory``
/// (bytes or a size string) the saved activations fit that budget at the
/// least recompute cost; random ops are never recomputed. Raises
/// ``ValueError`` for a malformed graph, ``InfeasibleError`` (with
/// ``.min_budget``) when no partition fits the budget and ``InternalError``
/// when the ILP solver fails. Releases the GIL.
#[pyfunction]
#[pyo3(signature = (graph_json, memory=None))]
fn partition_joint<'py>(
    py: Python<'py>,
    graph_json: &str,
    memory: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let memory = memory.map(|m| size_arg(m, "memory")).transpose()?;
    let answer = py.detach(|| remat::joint::partition_json(graph_json, memory)).map_err(|e| match e {
        remat::joint::PartitionError::Budget(remat::joint::BudgetError::Infeasible { budget, smallest }) => {
            infeasible(py, e.to_string(), None, budget, Some(smallest))
        }
        e => kind_error(py, e.kind(), e.to_string()),
    })?;
    let text = serde_json::to_string(&answer).expect("answers serialize");
    json_loads(py, &text)
}

/// Bytes for people, in binary units with two decimals: ``"86.75 MiB"``,
/// ``"512 B"``.
///
/// Raises ``ValueError`` naming ``bytes`` for a negative number or one past
/// 2**64 - 1.
#[pyfunction]
fn format_size(bytes: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(format_bytes(whole_arg(bytes, "bytes", 0, u64::MAX)?))
}

/// remat's core, in Rust: chains, solvers, the exact simulator. Use it
/// through the ``remat`` package, which re-exports everything here.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyChain>()?;
    m.add_class::<PyStage>()?;
    m.add_class::<PySchedule>()?;
    m.add_class::<PyReplay>()?;
    let infeasible_type = py.get_type::<InfeasibleError>();
    // Class-level defaults, so an InfeasibleError raised by Python code has
    // the attributes too.
    for attribute in ["min_budget", "algorithm", "budget"] {
        infeasible_type.setattr(attribute, py.None())?;
    }
    m.add("RematError", py.get_type::<RematError>())?;
    m.add("InfeasibleError", infeasible_type)?;
    m.add("InternalError", internal_error_type(py)?)?;
    m.add_function(wrap_pyfunction!(_exception_for, m)?)?;
    m.add_function(wrap_pyfunction!(cli::main, m)?)?;
    m.add_function(wrap_pyfunction!(solve, m)?)?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(min_memory, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(format_size, m)?)?;
    m.add_function(wrap_pyfunction!(partition_joint, m)?)?;
    m.add("DEFAULT_SLOTS", remat::solve::DEFAULT_SLOTS)?;
    m.add("MAX_IN_FLIGHT", remat::schedule::MAX_IN_FLIGHT)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
