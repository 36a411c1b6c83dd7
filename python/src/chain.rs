//! `remat.Chain` and `remat.Stage`: a validated chain as Python sees it.
//!
//! Everything is read from and validated by `remat::Chain`; the JSON chain
//! format is the one exchange format (a dict is turned into that JSON by
//! Python's `json` module), so a chain built from Python is checked with the
//! same messages as a chain file.

use std::path::PathBuf;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remat::size::format_size;
use remat::{Chain, Stage};

/// A chain of stages, the loss last: what remat schedules.
///
/// Stage l (1..=L) runs forward in ``forward_time`` and backward in
/// ``backward_time``; its output is ``output_size`` bytes, what a recorded
/// forward keeps for the backward is ``saved_size`` bytes (the output
/// included), its gradient ``gradient_size`` bytes, and ``forward_overhead`` /
/// ``backward_overhead`` are transient bytes while it runs. The loss is stage
/// L+1. ``input_size`` is the network input's size in bytes.
///
/// A chain is always valid: every constructor checks every field and raises
/// ``ValueError`` naming the one at fault. Chains are immutable; build a new
/// one with ``Chain.from_dict(chain.to_dict() | {...})``.
///
/// Example: ``chain = remat.Chain.load("chains/rotor-fc6.json")``, then
/// ``len(chain)`` is 6 and ``chain.stages[0].output_size`` the first
/// stage's output in bytes.
#[pyclass(module = "remat", name = "Chain", frozen)]
pub struct PyChain {
    pub inner: Chain,
}

impl PyChain {
    /// `origin` is the file name, or None for text made from a dict (whose
    /// line and column numbers would mean nothing to the caller).
    fn parsed(text: &str, origin: Option<&str>) -> PyResult<PyChain> {
        Chain::from_json(text).map(|inner| PyChain { inner }).map_err(|e| match origin {
            Some(origin) => PyValueError::new_err(format!("{origin}: {e}")),
            None => PyValueError::new_err(without_position(&e.to_string())),
        })
    }
}

/// serde_json's message without its ` at line L column C` part (remat may
/// have appended a hint after it).
fn without_position(message: &str) -> String {
    let Some(i) = message.find(" at line ") else { return message.to_string() };
    let rest = &message[i + " at line ".len()..];
    let digits = |s: &str| s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let line = digits(rest);
    let Some(after) = rest[line..].strip_prefix(" column ") else { return message.to_string() };
    let column = digits(after);
    if line == 0 || column == 0 {
        return message.to_string();
    }
    format!("{}{}", &message[..i], &after[column..])
}

/// `json.loads(text)`: JSON written by remat, back as Python objects.
pub fn json_loads<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl PyChain {
    /// Reads and validates a chain file (JSON: ``name``, ``input_size``,
    /// ``stages``, optional ``loss`` and ``metadata``).
    ///
    /// Raises ``OSError`` (``FileNotFoundError``...) when the file cannot be
    /// read and ``ValueError`` naming the field at fault when it is not a valid
    /// chain, e.g. ``stages[2].output_size (stage 3): invalid value: integer
    /// -5, expected u64``.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<PyChain> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read chain file {}: {e}", path.display())))?;
        PyChain::parsed(&text, Some(&path.display().to_string()))
    }

    /// Parses and validates a chain from its JSON text (what ``to_json``
    /// writes and ``remat zoo`` produces).
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyChain> {
        PyChain::parsed(text, None)
    }

    /// Builds and validates a chain from a dict of the JSON chain format:
    /// ``{"name": ..., "input_size": bytes, "stages": [{"forward_time": ...,
    /// "backward_time": ..., "output_size": ..., "saved_size": ...}, ...]}``,
    /// with optional ``gradient_size`` (default: ``output_size``),
    /// ``forward_overhead``, ``backward_overhead`` and ``name`` per stage, an
    /// optional ``loss`` stage (every field optional, default 0) and free-form
    /// ``metadata``.
    ///
    /// Raises ``ValueError`` naming the field at fault (``stages[0].saved_size
    /// (stage 1): missing field `saved_size```), ``TypeError`` when ``d`` is
    /// not a dict or holds values JSON cannot represent.
    #[staticmethod]
    fn from_dict(py: Python<'_>, d: &Bound<'_, PyAny>) -> PyResult<PyChain> {
        if !d.is_instance_of::<PyDict>() {
            return Err(PyTypeError::new_err(format!(
                "Chain.from_dict expects a dict of the chain format, got {}",
                d.get_type().name()?
            )));
        }
        let text: String = py
            .import("json")?
            .call_method1("dumps", (d,))
            .map_err(|e| PyTypeError::new_err(format!("chain dict: {}", e.value(py))))?
            .extract()?;
        PyChain::parsed(&text, None)
    }

    /// The chain as JSON text, readable again by ``Chain.from_json`` and by
    /// the ``remat`` command line.
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    /// The chain as a dict of the JSON chain format (``Chain.from_dict``
    /// reads it back to an equal chain). Every optional field is written out.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_loads(py, &self.inner.to_json())
    }

    /// Writes the chain file (``to_json``) to ``path``.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        std::fs::write(&path, self.inner.to_json() + "\n")
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write chain file {}: {e}", path.display())))?;
        Ok(())
    }

    /// The chain's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Bytes of the network input (a^0).
    #[getter]
    fn input_size(&self) -> u64 {
        self.inner.input_size()
    }

    /// Bytes of the input's gradient (delta^0): ``input_size`` unless the
    /// file's ``input_gradient_size`` says otherwise (a pipeline rank's
    /// chain, whose input is the previous stage's output and whose gradient
    /// is that stage's).
    #[getter]
    fn input_gradient_size(&self) -> u64 {
        self.inner.gradient_size(0)
    }

    /// The stages 1..=L in order (a list of ``Stage``), without the loss.
    #[getter]
    fn stages(&self) -> Vec<PyStage> {
        self.inner.stages().iter().map(|s| PyStage { inner: s.clone() }).collect()
    }

    /// The loss, stage L+1 (all zero when the file has none).
    #[getter]
    fn loss(&self) -> PyStage {
        PyStage { inner: self.inner.loss().clone() }
    }

    /// The free-form ``metadata`` of the chain (a dict, or None).
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.metadata().map(|m| json_loads(py, &m.to_string())).transpose()
    }

    /// What validation changed, e.g. a ``saved_size`` below ``output_size``
    /// raised to it (a recorded forward keeps its output).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings().to_vec()
    }

    /// The makespan of a step without recomputation: every forward and
    /// backward once, the loss included.
    #[getter]
    fn store_all_time(&self) -> f64 {
        self.inner.store_all_time()
    }

    /// L, the number of stages (the loss not counted).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<remat.Chain {:?}: {} stages + loss, input {}>",
            self.inner.name(),
            self.inner.len(),
            format_size(self.inner.input_size())
        )
    }

    /// Chains are equal when their JSON forms are (validation warnings aside).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyChain>().is_ok_and(|o| o.get().inner.to_json() == self.inner.to_json())
    }

    /// Consistent with `==`: the hash of the JSON form (chains are immutable,
    /// so they can key a dict of solutions).
    fn __hash__(&self) -> u64 {
        crate::hash_text(&self.inner.to_json())
    }

    /// Pickles (and copies) through the JSON form.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        Ok((slf.get_type().getattr("from_json")?, (slf.get().inner.to_json(),)))
    }
}

/// One stage of a chain (or its loss), read-only.
///
/// Times are in the chain's unit (whatever it was measured in: milliseconds
/// for chains measured by ``remat.torch.profile``); sizes are bytes.
#[pyclass(module = "remat", name = "Stage", frozen, eq)]
#[derive(PartialEq)]
pub struct PyStage {
    inner: Stage,
}

#[pymethods]
impl PyStage {
    /// The stage's name, or None.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// u_f: time of one forward.
    #[getter]
    fn forward_time(&self) -> f64 {
        self.inner.forward_time
    }

    /// u_b: time of the backward.
    #[getter]
    fn backward_time(&self) -> f64 {
        self.inner.backward_time
    }

    /// w_a: bytes of the output activation.
    #[getter]
    fn output_size(&self) -> u64 {
        self.inner.output_size
    }

    /// w_abar: bytes a recorded forward keeps for the backward, the output
    /// included (so never below ``output_size``).
    #[getter]
    fn saved_size(&self) -> u64 {
        self.inner.saved_size
    }

    /// w_d: bytes of the gradient of the output.
    #[getter]
    fn gradient_size(&self) -> u64 {
        self.inner.gradient_size
    }

    /// o_f: transient bytes while the forward runs.
    #[getter]
    fn forward_overhead(&self) -> u64 {
        self.inner.forward_overhead
    }

    /// o_r: transient bytes while a recording forward (option 0) runs:
    /// ``recording_overhead`` when the stage sets it, else
    /// ``forward_overhead``.
    #[getter]
    fn recording_overhead(&self) -> u64 {
        self.inner.recording_overhead.unwrap_or(self.inner.forward_overhead)
    }

    /// o_b: transient bytes while the backward runs.
    #[getter]
    fn backward_overhead(&self) -> u64 {
        self.inner.backward_overhead
    }

    /// f_b: bytes of the saved set the backward has freed by its peak (at
    /// most ``saved_size``; 0 when it holds it whole until it ends).
    #[getter]
    fn backward_frees(&self) -> u64 {
        self.inner.backward_frees
    }

    /// The stage's further recording options (option 1, 2, ...; option 0 is
    /// the stage itself) as dicts of the JSON chain format: ``name``,
    /// ``saved_size``, ``recompute_time``, ``forward_overhead``,
    /// ``backward_overhead`` (and ``backward_frees`` where not 0). Empty for a stage without options.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.inner.options).expect("options always serialize");
        json_loads(py, &text)
    }

    /// The stage as a dict of the JSON chain format.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = serde_json::to_string(&self.inner).expect("a stage always serializes");
        json_loads(py, &text)
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        let name = s.name.as_deref().map(|n| format!(" {n:?}")).unwrap_or_default();
        format!(
            "<remat.Stage{name}: forward {} backward {}, output {}, saved {}, gradient {}, overheads {} / {}>",
            s.forward_time,
            s.backward_time,
            s.output_size,
            s.saved_size,
            s.gradient_size,
            s.forward_overhead,
            s.backward_overhead
        )
    }
}
