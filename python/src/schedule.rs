//! `remat.Schedule` (what a solver returns) and `remat.Replay` (what the
//! simulator measured), and the operation forms Python code passes in.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use remat::schedule::{Op, Schedule, notation, parse_operations};
use remat::simulate::{Memory, Replay, Step};
use remat::size::format_size;

/// An operation as Python sees it: `("F_ck", 1)`.
pub type OpTuple = (&'static str, usize);

fn op_tuple(op: Op) -> OpTuple {
    (op.kind_name(), op.stage())
}

/// An operation with its recording option: `("F_all", 3, 1)`; 0 for every
/// operation but an `F_all` recorded with a stage's option.
pub type OpTriple = (&'static str, usize, usize);

/// An operation from `(kind, stage, option)`, through the library's own JSON
/// form of an operation so that its checks and messages apply (unknown kind,
/// stage 0, an option on anything but `F_all`).
fn op_from_parts(index: usize, kind: &str, stage: usize, option: usize) -> PyResult<Op> {
    serde_json::from_value(serde_json::json!({"op": kind, "stage": stage, "option": option}))
        .map_err(|e| PyValueError::new_err(format!("operation {} ({kind:?}, {stage}): {e}", index + 1)))
}

/// The operations of anything `simulate` accepts: a `Schedule`, JSON text or
/// the paper's notation (`str`), or a sequence of `(kind, stage)` pairs.
pub fn operations_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Op>> {
    if let Ok(s) = obj.cast::<PySchedule>() {
        return Ok(s.get().inner.operations.clone());
    }
    if let Ok(text) = obj.cast::<PyString>() {
        return parse_operations(&text.to_cow()?).map_err(|e| PyValueError::new_err(format!("schedule: {e}")));
    }
    let items: Vec<Bound<'_, PyAny>> = obj.extract().map_err(|_| not_a_schedule())?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let (kind, stage, option) = if let Ok((kind, stage)) = item.extract::<(String, usize)>() {
                (kind, stage, 0)
            } else {
                item.extract::<(String, usize, usize)>().map_err(|_| not_a_schedule())?
            };
            op_from_parts(i, &kind, stage, option)
        })
        .collect()
}

/// The schedule object behind anything `simulate` accepts, with its
/// recorded figures: a `Schedule`, or JSON text of one; `None` for notation
/// and lists of operations.
pub fn recorded_of(obj: &Bound<'_, PyAny>) -> Option<Schedule> {
    if let Ok(s) = obj.cast::<PySchedule>() {
        return Some(s.get().inner.clone());
    }
    let text = obj.cast::<PyString>().ok()?.to_cow().ok()?.into_owned();
    serde_json::from_str::<Schedule>(&text).ok()
}

fn not_a_schedule() -> PyErr {
    PyTypeError::new_err(
        "a schedule is a remat.Schedule, its JSON text or notation (a str), or a list of (kind, stage) pairs such \
         as [(\"F_ck\", 1), (\"B\", 1)] (or (kind, stage, option) triples: (\"F_all\", 3, 1) records stage 3 \
         with its option 1)",
    )
}

/// A schedule: the operations of one training step, with the makespan and
/// peak memory the exact simulator replayed it at.
///
/// ``operations`` is a list of ``(kind, stage)`` pairs, kind one of
/// ``"F_ck"`` (forward keeping its input and output), ``"F_none"`` (forward
/// that frees its plain input), ``"F_all"`` (forward recording what the
/// backward needs) and ``"B"`` (backward), stage 1..=L+1 (L+1 is the loss).
/// ``str(schedule)`` is the paper's notation: ``F_ck^1 F_none^2 ... B^1``.
#[pyclass(module = "remat", name = "Schedule", frozen, eq)]
#[derive(PartialEq)]
pub struct PySchedule {
    pub inner: Schedule,
    /// Bytes per memory slot the solver worked with (1 = exact).
    pub slot_size: Option<u64>,
    /// The parameter a baseline settled on, or how `auto` fitted its DP.
    pub detail: Option<String>,
    /// Why `auto` chose this schedule.
    pub reason: Option<String>,
}

#[pymethods]
impl PySchedule {
    /// Reads a schedule written by ``to_json`` (or ``remat solve --json``).
    /// Solver details (``slot_size``, ``detail``, ``reason``) are not part of
    /// that JSON and are None. Raises ``ValueError`` naming the field at
    /// fault, and when the fields disagree with each other (a ``residue``
    /// above ``peak_memory``, ``in_flight`` above 1 without a ``residue``).
    ///
    /// With ``chain``, the schedule is also replayed on it: it must have been
    /// computed for that chain, and its ``peak_memory``, ``residue`` and
    /// ``makespan`` must be the replay's (``ValueError`` naming the one that
    /// differs), so ``rank_peak`` is the operations' own. Without it the
    /// figures are the file's as written.
    #[staticmethod]
    #[pyo3(signature = (text, chain = None))]
    fn from_json(text: &str, chain: Option<&Bound<'_, crate::chain::PyChain>>) -> PyResult<PySchedule> {
        let inner: Schedule =
            serde_json::from_str(text).map_err(|e| PyValueError::new_err(format!("schedule: {e}")))?;
        if let Some(chain) = chain {
            let chain = &chain.get().inner;
            inner.check_chain(chain).map_err(|e| PyValueError::new_err(format!("schedule: {e}")))?;
            let replay = remat::simulate(chain, &inner.operations)
                .map_err(|e| PyValueError::new_err(format!("schedule: not valid on chain `{}`: {e}", chain.name())))?;
            replay.check_recorded(&inner).map_err(|e| PyValueError::new_err(format!("schedule: {e}")))?;
        }
        Ok(PySchedule { inner, slot_size: None, detail: None, reason: None })
    }

    /// The algorithm that produced it (``"persistent"``, ``"floating"``...;
    /// the one ``auto`` chose, never ``"auto"``).
    #[getter]
    fn algorithm(&self) -> &str {
        &self.inner.algorithm
    }

    /// The memory budget it was computed for, in bytes.
    #[getter]
    fn budget(&self) -> u64 {
        self.inner.budget
    }

    /// Sum of the operation times, in the chain's time unit.
    #[getter]
    fn makespan(&self) -> f64 {
        self.inner.makespan
    }

    /// The largest memory in use while an operation runs, in bytes (at most
    /// ``budget``).
    #[getter]
    fn peak_memory(&self) -> u64 {
        self.inner.peak_memory
    }

    /// Micro-batches a pipeline rank holds at once, as planned (1 for plain
    /// training): ``rank_peak`` fits ``budget``.
    #[getter]
    fn in_flight(&self) -> usize {
        self.inner.in_flight
    }

    /// Bytes the schedule keeps between its forward and its backward (stored
    /// just before its first backward ``B^{L+1}``), when planned for more
    /// than one micro-batch in flight; else None (see ``Replay.residue``).
    #[getter]
    fn residue(&self) -> Option<u64> {
        self.inner.residue
    }

    /// The memory of a pipeline rank holding ``in_flight`` micro-batches that
    /// each run this schedule: ``peak_memory + (in_flight - 1) * residue``
    /// (``peak_memory`` for one micro-batch), exact (a Python int is never
    /// saturated); at most ``budget`` for a schedule a solver returned.
    #[getter]
    fn rank_peak(&self) -> u128 {
        let others = (self.inner.in_flight.max(1) - 1) as u128;
        u128::from(self.inner.peak_memory) + u128::from(self.inner.residue.unwrap_or(0)) * others
    }

    /// The operations in order, as ``(kind, stage)`` pairs (an ``F_all``'s
    /// recording option left out: see ``operations_with_options``).
    #[getter]
    fn operations(&self) -> Vec<OpTuple> {
        self.inner.operations.iter().map(|&op| op_tuple(op)).collect()
    }

    /// The operations in order, as ``(kind, stage, option)`` triples: option
    /// is the stage's recording option of an ``F_all`` (0: the stage's own
    /// ``saved_size``; see ``Stage.options``), 0 for every other operation.
    #[getter]
    fn operations_with_options(&self) -> Vec<OpTriple> {
        self.inner.operations.iter().map(|&op| (op.kind_name(), op.stage(), op.option())).collect()
    }

    /// Bytes per memory slot the solver rounded sizes to (1 = exact bytes);
    /// None for a schedule read back from JSON.
    #[getter]
    fn slot_size(&self) -> Option<u64> {
        self.slot_size
    }

    /// The parameter a baseline settled on (``"K = 4 segments"``), or how
    /// ``auto`` fitted a DP to the budget; None otherwise.
    #[getter]
    fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// Why ``auto`` returned this schedule; None for the other algorithms.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The schedule as JSON, the same as ``remat solve --json`` writes:
    /// ``remat.simulate`` and ``remat simulate`` read it back.
    fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.inner).expect("schedules serialize")
    }

    /// The paper's notation: ``F_ck^1 F_none^2 F_all^3 B^3 ... B^1``.
    fn __str__(&self) -> String {
        notation(&self.inner.operations)
    }

    /// The number of operations.
    fn __len__(&self) -> usize {
        self.inner.operations.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<remat.Schedule {}: {} operations, makespan {}, peak {} of budget {}>",
            self.inner.algorithm,
            self.inner.operations.len(),
            self.inner.makespan,
            format_size(self.inner.peak_memory),
            format_size(self.inner.budget)
        )
    }

    /// Consistent with `==`: the hash of the JSON form (schedules are immutable).
    fn __hash__(&self) -> u64 {
        crate::hash_text(&self.to_json())
    }

    /// Pickles (and copies) through the JSON form and the solver details.
    #[allow(clippy::type_complexity)]
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (String, Option<u64>, Option<String>, Option<String>))> {
        let s = slf.get();
        Ok((slf.get_type().getattr("_restore")?, (s.to_json(), s.slot_size, s.detail.clone(), s.reason.clone())))
    }

    /// Unpickling: ``from_json`` with the solver details.
    #[staticmethod]
    fn _restore(
        text: &str,
        slot_size: Option<u64>,
        detail: Option<String>,
        reason: Option<String>,
    ) -> PyResult<PySchedule> {
        Ok(PySchedule { slot_size, detail, reason, ..PySchedule::from_json(text, None)? })
    }
}

/// The simulator's replay of a schedule on a chain: makespan, peak memory
/// and the memory around every operation.
#[pyclass(module = "remat", name = "Replay", frozen)]
pub struct PyReplay {
    pub inner: Replay,
    pub budget: Option<u64>,
    /// Micro-batches in flight the budget was checked with.
    pub in_flight: usize,
}

fn memory_dict<'py>(py: Python<'py>, m: &Memory) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("activations", m.activations)?;
    d.set_item("saved", m.saved)?;
    d.set_item("gradients", m.gradients)?;
    d.set_item("transient", m.transient)?;
    d.set_item("total", m.total())?;
    Ok(d)
}

fn step_dict<'py>(py: Python<'py>, s: &Step) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("op", op_tuple(s.op))?;
    d.set_item("during", memory_dict(py, &s.during)?)?;
    d.set_item("after", memory_dict(py, &s.after)?)?;
    Ok(d)
}

#[pymethods]
impl PyReplay {
    /// Sum of the operation times.
    #[getter]
    fn makespan(&self) -> f64 {
        self.inner.makespan
    }

    /// The largest memory in use while an operation runs, in bytes.
    #[getter]
    fn peak_memory(&self) -> u64 {
        self.inner.peak_memory
    }

    /// Bytes stored (no transient) just before the first backward,
    /// ``B^{L+1}``: what a pipeline rank keeps of this micro-batch while it
    /// runs the others.
    #[getter]
    fn residue(&self) -> u64 {
        self.inner.residue()
    }

    /// The memory of a pipeline rank holding ``in_flight`` micro-batches that
    /// each run this schedule: ``peak_memory + (in_flight - 1) * residue``,
    /// exact. ``in_flight`` is a whole number from 1 to
    /// ``remat.MAX_IN_FLIGHT`` (``ValueError`` naming it otherwise, a
    /// ``TypeError`` for another type); default: the count ``simulate``
    /// checked the budget with.
    #[pyo3(signature = (in_flight = None))]
    fn rank_peak(&self, in_flight: Option<&Bound<'_, PyAny>>) -> PyResult<u128> {
        let n = match in_flight {
            Some(obj) => crate::in_flight_arg(Some(obj))?.get(),
            None => self.in_flight,
        };
        Ok(u128::from(self.inner.peak_memory) + u128::from(self.inner.residue()) * (n as u128 - 1))
    }

    /// Micro-batches in flight ``simulate`` judged the schedule with: its
    /// ``in_flight=`` argument, else the schedule's own, else 1.
    #[getter]
    fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// 0-based index of the (first) operation reaching the peak.
    #[getter]
    fn peak_index(&self) -> usize {
        self.inner.peak_index
    }

    /// The operation reaching the peak, as ``(kind, stage)``.
    #[getter]
    fn peak_operation(&self) -> Option<OpTuple> {
        self.inner.steps.get(self.inner.peak_index).map(|s| op_tuple(s.op))
    }

    /// The budget it was checked against, if any.
    #[getter]
    fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// Memory before the first operation (the input and the loss's
    /// gradient), as a dict of bytes: ``activations``, ``saved``,
    /// ``gradients``, ``transient`` and their ``total``.
    #[getter]
    fn initial<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        memory_dict(py, &self.inner.initial)
    }

    /// One dict per operation: ``{"op": ("F_ck", 1), "during": {...},
    /// "after": {...}}``, memory as in ``initial``: ``during`` while it runs
    /// (its transient overhead included), ``after`` once it has finished.
    #[getter]
    fn steps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let steps = self.inner.steps.iter().map(|s| step_dict(py, s)).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, steps)
    }

    /// The number of operations replayed.
    fn __len__(&self) -> usize {
        self.inner.steps.len()
    }

    fn __repr__(&self) -> String {
        let budget = self.budget.map(|b| format!(" within budget {}", format_size(b))).unwrap_or_default();
        format!(
            "<remat.Replay: {} operations, makespan {}, peak {} at operation {}{budget}>",
            self.inner.steps.len(),
            self.inner.makespan,
            format_size(self.inner.peak_memory),
            self.inner.peak_index + 1
        )
    }
}
