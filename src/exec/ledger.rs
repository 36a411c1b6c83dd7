//! The memory ledger: every tensor the executor holds, counted by kind.
//!
//! A [`Tensor`] can only be made through a [`Ledger`], and it is counted from
//! the moment it is made until it is dropped, so nothing the stages allocate
//! escapes the account: activations a^l, recorded data abar^l, gradients
//! delta^l, and the temporaries an operation makes and frees (its transient
//! workspace). Parameters and their gradients are plain arrays owned by the
//! stages and are not counted: [the model](crate::model) leaves them outside the budget.
//!
//! Around each operation the executor takes a mark ([`Ledger::begin_op`]) and
//! closes it ([`Ledger::end_op`]); the close reports the operation's figure in
//! the simulator's terms: what was stored before, plus what the operation
//! created, plus its workspace.

use std::sync::{Arc, Mutex, MutexGuard};

use ndarray::{Array2, ArrayViewMut2};

use crate::simulate::Memory;

/// Bytes of one element: every tensor holds `f32`.
pub const ELEMENT_BYTES: u64 = std::mem::size_of::<f32>() as u64;

/// What a tensor is, in the model's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A plain activation a^l (the input a^0 included).
    Activation,
    /// Part of a recorded abar^l.
    Saved,
    /// A gradient delta^l.
    Gradient,
    /// Made by the running operation and not (yet) one of its results.
    Transient,
}

fn field(memory: &mut Memory, kind: Kind) -> &mut u64 {
    match kind {
        Kind::Activation => &mut memory.activations,
        Kind::Saved => &mut memory.saved,
        Kind::Gradient => &mut memory.gradients,
        Kind::Transient => &mut memory.transient,
    }
}

#[derive(Debug, Default)]
struct State {
    /// Bytes of the live tensors, by kind.
    held: Memory,
    /// Largest live total since the last [`Ledger::begin_op`].
    op_peak: u64,
    /// Largest live total since the ledger was made.
    peak: u64,
}

/// A shared account of tensor bytes. Cloning it gives another handle on the
/// same account.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    state: Arc<Mutex<State>>,
}

/// An operation's memory, as the ledger measured it (see [`Ledger::end_op`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpMemory {
    /// The accounted figure while the operation ran: stored before + created +
    /// workspace, where the workspace counts at its reservation unless the
    /// operation used more.
    pub during: Memory,
    /// The workspace the operation really used: its peak of live bytes minus
    /// what was stored once it finished (before + created).
    pub used: u64,
    /// The largest number of live tensor bytes at any instant of the operation.
    pub live_peak: u64,
}

/// A tensor that outlived its operation without being one of its results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaked {
    /// Its bytes.
    pub bytes: u64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a handful of counters, valid even if a holder panicked.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts `array` from now on, as a transient of the running operation,
    /// until the returned tensor is dropped.
    pub fn track(&self, array: Array2<f32>) -> Tensor {
        let bytes = array.len() as u64 * ELEMENT_BYTES;
        let mut state = self.lock();
        state.held.transient += bytes;
        let live = state.held.total();
        state.op_peak = state.op_peak.max(live);
        state.peak = state.peak.max(live);
        drop(state);
        Tensor { data: array, kind: Kind::Transient, ledger: self.clone() }
    }

    /// A tracked `rows x cols` tensor of zeros.
    pub fn zeros(&self, rows: usize, cols: usize) -> Tensor {
        self.track(Array2::zeros((rows, cols)))
    }

    /// Bytes held now, by kind.
    pub fn memory(&self) -> Memory {
        self.lock().held
    }

    /// The largest number of live bytes at any instant since the ledger was made.
    pub fn peak(&self) -> u64 {
        self.lock().peak
    }

    /// Starts measuring an operation: its peak starts from what is live now.
    pub fn begin_op(&self) -> Memory {
        let mut state = self.lock();
        state.op_peak = state.held.total();
        state.held
    }

    /// Ends the operation begun by the last [`Ledger::begin_op`], once its
    /// results have been given their kinds and before any input is deleted.
    ///
    /// The workspace counts at `reserved` bytes (the profiled overhead the
    /// executor sets aside for the operation) or at what the operation really
    /// used if that is more, so an operation that outgrows its reservation shows
    /// in the figure. Fails if a tensor the operation made is still alive as a
    /// transient: it would be held without being accounted to any value.
    pub fn end_op(&self, reserved: u64) -> Result<OpMemory, Leaked> {
        let state = self.lock();
        let mut during = state.held;
        if during.transient != 0 {
            return Err(Leaked { bytes: during.transient });
        }
        let used = state.op_peak - during.total();
        during.transient = reserved.max(used);
        Ok(OpMemory { during, used, live_peak: state.op_peak })
    }

    fn retag(&self, from: Kind, to: Kind, bytes: u64) {
        let mut state = self.lock();
        *field(&mut state.held, from) -= bytes;
        *field(&mut state.held, to) += bytes;
    }
}

/// An `f32` matrix (rows = batch, columns = features) counted by a [`Ledger`]
/// for as long as it lives.
///
/// Its shape cannot change (only views are handed out), so the bytes it was
/// counted with stay right.
#[derive(Debug)]
pub struct Tensor {
    data: Array2<f32>,
    kind: Kind,
    ledger: Ledger,
}

impl Tensor {
    /// The values.
    pub fn array(&self) -> &Array2<f32> {
        &self.data
    }

    /// The values, for changing in place.
    pub fn view_mut(&mut self) -> ArrayViewMut2<'_, f32> {
        self.data.view_mut()
    }

    /// `(rows, columns)`.
    pub fn dim(&self) -> (usize, usize) {
        self.data.dim()
    }

    /// Bytes counted for this tensor.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64 * ELEMENT_BYTES
    }

    /// What the tensor is counted as.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Counts the tensor as `kind` from now on.
    pub fn set_kind(&mut self, kind: Kind) {
        self.ledger.retag(self.kind, kind, self.bytes());
        self.kind = kind;
    }

    /// A tracked copy (a new transient of the same ledger).
    pub fn copy(&self) -> Tensor {
        self.ledger.track(self.data.clone())
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        let bytes = self.bytes();
        let mut state = self.ledger.lock();
        *field(&mut state.held, self.kind) -= bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_counted_until_dropped_and_by_kind() {
        let ledger = Ledger::new();
        let mut a = ledger.zeros(2, 3);
        assert_eq!(ledger.memory(), Memory { transient: 24, ..Memory::default() });
        a.set_kind(Kind::Saved);
        let b = a.copy();
        assert_eq!(ledger.memory(), Memory { saved: 24, transient: 24, ..Memory::default() });
        drop(a);
        drop(b);
        assert_eq!(ledger.memory(), Memory::default());
        assert_eq!(ledger.peak(), 48);
    }

    #[test]
    fn an_operation_reports_created_values_and_its_workspace() {
        let ledger = Ledger::new();
        let mut input = ledger.zeros(1, 10);
        input.set_kind(Kind::Activation);
        ledger.begin_op();
        let scratch = ledger.zeros(1, 5);
        let mut out = ledger.zeros(1, 2);
        drop(scratch);
        out.set_kind(Kind::Activation);
        let op = ledger.end_op(0).unwrap();
        // live peak 40 + 20 + 8; stored after 48: 20 bytes of workspace.
        assert_eq!(op.live_peak, 68);
        assert_eq!(op.used, 20);
        assert_eq!(op.during, Memory { activations: 48, transient: 20, ..Memory::default() });
        // A reservation above the use is what counts; below it, the use.
        ledger.begin_op();
        assert_eq!(ledger.end_op(100).unwrap().during.transient, 100);
        ledger.begin_op();
        let _kept = ledger.zeros(1, 1);
        assert_eq!(ledger.end_op(0), Err(Leaked { bytes: 4 }));
    }
}
