//! The interpreter: runs a schedule's operations on a network with the
//! simulator's semantics, measuring every operation with a [`Ledger`].

use ndarray::Array2;
use serde::Serialize;

use super::ledger::{Kind, Ledger, OpMemory};
use super::{ExecError, Loss, Record, Sequential, Tensor, check_batch};
use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::{Memory, Replay, simulate};

/// One operation as the executor measured it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MeasuredStep {
    /// The operation.
    pub op: Op,
    /// Accounted memory while it ran: stored before + created + workspace (at
    /// its reservation, or its real use if larger). Compare with the
    /// simulator's [`Step::during`](crate::simulate::Step::during).
    pub during: Memory,
    /// Memory held once it finished and its inputs were deleted.
    pub after: Memory,
    /// Workspace the operation really used, in bytes.
    pub workspace_used: u64,
    /// Largest number of live tensor bytes at any instant of the operation.
    pub live_peak: u64,
}

/// The memory timeline of one run of a schedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trace {
    /// Memory before the first operation (a^0 and delta^{L+1}).
    pub initial: Memory,
    /// One entry per operation.
    pub steps: Vec<MeasuredStep>,
    /// Largest accounted figure of any operation.
    pub peak: u64,
    /// Largest number of live tensor bytes at any instant.
    pub live_peak: u64,
}

impl Trace {
    /// Checks that the measured memory equals `replay`'s (the simulator's
    /// prediction for the same operations) before the first operation, while
    /// each runs and after each, kind by kind; names the first difference.
    pub fn check(&self, replay: &Replay) -> Result<(), ExecError> {
        if self.initial != replay.initial {
            return Err(ExecError::ChainMismatch(format!(
                "before the first operation the executor holds {:?} and the simulator predicts {:?}",
                self.initial, replay.initial
            )));
        }
        let mismatch = |index: usize, what: &'static str, measured: &Memory, predicted: &Memory| {
            (measured != predicted).then(|| ExecError::Mismatch {
                index,
                op: self.steps[index].op,
                what: format!("{what}; by kind, measured {measured:?}, predicted {predicted:?}"),
                measured: measured.total(),
                predicted: predicted.total(),
            })
        };
        if self.steps.len() != replay.steps.len() {
            return Err(ExecError::ChainMismatch(format!(
                "the trace has {} operations and the replay {}",
                self.steps.len(),
                replay.steps.len()
            )));
        }
        for (index, (ours, theirs)) in self.steps.iter().zip(&replay.steps).enumerate() {
            if ours.op != theirs.op {
                return Err(ExecError::ChainMismatch(format!(
                    "operation {} is {} in the trace and {} in the replay",
                    index + 1,
                    ours.op,
                    theirs.op
                )));
            }
            if let Some(e) = mismatch(index, "while it runs", &ours.during, &theirs.during)
                .or_else(|| mismatch(index, "after it", &ours.after, &theirs.after))
            {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The result of running a schedule for one batch.
#[derive(Clone, Debug)]
pub struct StepResult {
    /// The loss value.
    pub loss: f32,
    /// dLoss/dparameter for every parameter, in [`Sequential`]'s parameter order.
    pub gradients: Vec<Array2<f32>>,
    /// dLoss/dinput: delta^0.
    pub input_gradient: Array2<f32>,
    /// What the ledger measured, operation by operation.
    pub trace: Trace,
}

/// The store-all schedule: F_all^1 ... F_all^{L+1}, B^{L+1} ... B^1 (no
/// recomputation, the reference every other schedule must reproduce).
pub fn store_all_operations(len: usize) -> Vec<Op> {
    (1..=len + 1).map(|l| Op::FAll(l, 0)).chain((1..=len + 1).rev().map(Op::B)).collect()
}

/// How an activation is held, with its tensors.
enum Held {
    Absent,
    Plain(Tensor),
    Saved(Record),
}

impl Held {
    fn tensor(&self) -> Option<&Tensor> {
        match self {
            Held::Absent => None,
            Held::Plain(t) => Some(t),
            Held::Saved(r) => Some(r.output()),
        }
    }
}

/// Runs `ops` on `net` and `loss` for one batch, with the semantics of
/// [`simulate`] (F_none deletes its plain input, F_ck keeps it, F_all records
/// abar^l, B^l consumes delta^l and abar^l and deletes a plain a^{l-1}), and
/// returns the loss, the gradients and the measured memory timeline.
///
/// `chain` is the network's profiled chain: it validates the schedule (through
/// the simulator, before anything runs) and gives each operation its workspace
/// reservation. The parameter gradients are zeroed first, so they are this
/// batch's. Shapes are checked against the network before anything runs, and
/// an input of another size than the chain's is refused.
///
/// Time: one stage operation per schedule operation; memory: what the trace shows.
pub fn execute(
    net: &mut Sequential,
    loss: &dyn Loss,
    chain: &Chain,
    ops: &[Op],
    input: &Array2<f32>,
    target: &Array2<f32>,
) -> Result<StepResult, ExecError> {
    let n = net.len() + 1;
    if chain.len() != net.len() {
        return Err(ExecError::ChainMismatch(format!(
            "the chain has {} stages and the network {}",
            chain.len(),
            net.len()
        )));
    }
    check_batch(net, loss, input.dim(), target.dim())?;
    let input_bytes = input.len() as u64 * super::ELEMENT_BYTES;
    if input_bytes != chain.output_size(0) {
        return Err(ExecError::ChainMismatch(format!(
            "the input has {input_bytes} bytes, the chain's input_size is {}",
            chain.output_size(0)
        )));
    }
    simulate(chain, ops)?;
    net.zero_grad();

    let ledger = Ledger::new();
    let mut held: Vec<Held> = (0..=n).map(|_| Held::Absent).collect();
    let mut a0 = ledger.track(input.clone());
    a0.set_kind(Kind::Activation);
    held[0] = Held::Plain(a0);
    let mut grad = ledger.track(Array2::ones((1, 1)));
    grad.set_kind(Kind::Gradient);
    let initial = ledger.memory();

    let missing = |what: String| ExecError::ChainMismatch(format!("internal error: {what} is not in memory"));

    let mut loss_value = f32::NAN;
    let mut steps = Vec::with_capacity(ops.len());
    for (index, &op) in ops.iter().enumerate() {
        let l = op.stage();
        ledger.begin_op();
        let measured: OpMemory = match op {
            Op::FAll(..) | Op::FCk(_) | Op::FNone(_) => {
                let x = held[l - 1].tensor().ok_or_else(|| missing(format!("a^{}", l - 1)))?;
                let result = if l == n {
                    let mut record = loss.forward(x, target, &ledger);
                    loss_value = record.output().array()[[0, 0]];
                    record.set_kind(Kind::Saved);
                    Held::Saved(record)
                } else if matches!(op, Op::FAll(..)) {
                    let mut record = net.stages()[l - 1].forward_record(x, &ledger);
                    record.set_kind(Kind::Saved);
                    Held::Saved(record)
                } else {
                    let mut y = net.stages()[l - 1].forward(x, &ledger);
                    y.set_kind(Kind::Activation);
                    Held::Plain(y)
                };
                let measured =
                    ledger.end_op(chain.forward_overhead(l)).map_err(|e| leak(net, loss, index, op, e.bytes))?;
                held[l] = result;
                if matches!(op, Op::FNone(_)) {
                    held[l - 1] = Held::Absent;
                }
                measured
            }
            Op::B(_) => {
                let Held::Saved(record) = &held[l] else { return Err(missing(format!("abar^{l}"))) };
                let x = held[l - 1].tensor().ok_or_else(|| missing(format!("a^{}", l - 1)))?;
                let mut dx = if l == n {
                    loss.backward(record, x, target, &grad, &ledger)
                } else {
                    net.stages_mut()[l - 1].backward(record, x, &grad, &ledger)
                };
                dx.set_kind(Kind::Gradient);
                let measured =
                    ledger.end_op(chain.backward_overhead(l)).map_err(|e| leak(net, loss, index, op, e.bytes))?;
                grad = dx;
                held[l] = Held::Absent;
                if matches!(held[l - 1], Held::Plain(_)) {
                    held[l - 1] = Held::Absent;
                }
                measured
            }
        };
        steps.push(MeasuredStep {
            op,
            during: measured.during,
            after: ledger.memory(),
            workspace_used: measured.used,
            live_peak: measured.live_peak,
        });
    }
    let peak = steps.iter().map(|s| s.during.total()).fold(initial.total(), u64::max);
    let trace = Trace { initial, steps, peak, live_peak: ledger.peak() };
    Ok(StepResult { loss: loss_value, gradients: net.gradients(), input_gradient: grad.array().clone(), trace })
}

/// The error for a tensor that outlived the operation that made it.
fn leak(net: &Sequential, loss: &dyn Loss, index: usize, op: Op, bytes: u64) -> ExecError {
    let l = op.stage();
    ExecError::Contract {
        stage: l,
        name: if l > net.len() { loss.name() } else { net.stages()[l - 1].name() },
        message: format!(
            "{bytes} bytes it allocated during operation {} ({op}) are still alive and not part of its result",
            index + 1
        ),
    }
}
