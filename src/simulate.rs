//! The exact simulator: replays an operation sequence on a chain in bytes.
//!
//! This is the judge of every schedule remat shows. It follows [the model](crate::model)'s
//! operation table to the letter and is deliberately strict where the table is
//! silent:
//! - a forward may not create a value that is already in memory (that would hold
//!   two copies of a^l, which no solver needs);
//! - a forward whose output could never be used is rejected at once: a plain a^l
//!   after B^{l+1} has run, or any F^l after B^l has run (its memory would stay
//!   allocated to the end);
//! - the sequence must end with B^1, leaving only delta^0.
//!
//! Memory while an operation runs is everything stored before it, plus what it
//! creates, plus its transient overhead. That is also the figure a budget is
//! checked against.

use serde::Serialize;
use thiserror::Error;

use crate::chain::Chain;
use crate::error::ErrorKind;
use crate::schedule::Op;

/// How activation a^l is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Held {
    /// Not in memory.
    Absent,
    /// The output a^l alone (from F_ck or F_none, or the input a^0).
    Plain,
    /// abar^l: everything the backward of stage l needs, a^l included (F_all).
    Saved,
}

/// Memory in use, split by kind of value, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Plain activations a^l (the input included).
    pub activations: u64,
    /// Recorded activations abar^l.
    pub saved: u64,
    /// Gradients delta^l.
    pub gradients: u64,
    /// Transient workspace of the running operation.
    pub transient: u64,
}

impl Memory {
    /// Sum of every kind.
    pub fn total(&self) -> u64 {
        self.activations + self.saved + self.gradients + self.transient
    }
}

/// Memory around one operation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Step {
    /// The operation.
    pub op: Op,
    /// Memory while it runs (its peak).
    pub during: Memory,
    /// Memory once it has finished (no transient).
    pub after: Memory,
}

/// The result of replaying a valid sequence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Replay {
    /// Sum of the operation times.
    pub makespan: f64,
    /// Largest memory in use while an operation runs.
    pub peak_memory: u64,
    /// Index in the sequence of the (first) operation reaching the peak.
    pub peak_index: usize,
    /// Memory before the first operation (a^0 and delta^{L+1}).
    pub initial: Memory,
    /// One entry per operation.
    pub steps: Vec<Step>,
}

impl Replay {
    /// The residue: bytes stored (no transient) just before the first
    /// backward, B^{L+1}; what a pipeline rank keeps of this micro-batch
    /// while it runs the others (see [the model](crate::model)). O(number of
    /// operations).
    pub fn residue(&self) -> u64 {
        match self.steps.iter().position(|s| matches!(s.op, Op::B(_))) {
            Some(0) | None => self.initial.total(),
            Some(i) => self.steps[i - 1].after.total(),
        }
    }

    /// The memory of a pipeline rank holding `in_flight` micro-batches that
    /// each run this schedule: the peak plus `in_flight - 1` residues
    /// (`in_flight` 0 or 1 gives the peak); `None` when that is more than
    /// `u64::MAX` bytes, which no budget holds (issue 36: a saturated sum
    /// "fitted" a budget of `u64::MAX`). O(number of operations).
    ///
    /// ```
    /// use remat::schedule::parse_operations;
    /// use remat::{Chain, simulate};
    ///
    /// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
    /// let replay = simulate(&chain, &parse_operations("F_all^1..3 B^3..1")?)?;
    /// // Store-all keeps a^0 and both abar until its first backward.
    /// assert_eq!((replay.peak_memory, replay.residue()), (900, 700));
    /// assert_eq!(replay.rank_peak(3), Some(900 + 2 * 700));
    /// assert_eq!(replay.rank_peak(1 << 60), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rank_peak(&self, in_flight: usize) -> Option<u64> {
        let others = (in_flight.max(1) - 1) as u64;
        self.residue().checked_mul(others)?.checked_add(self.peak_memory)
    }
}

/// A recorded figure of a schedule file that its replay contradicts.
#[derive(Debug, Error, PartialEq)]
#[error(
    "`{field}` is {recorded}, but its operations replay at {replayed} on this chain: correct the field or leave it \
     out of the file (a replay recomputes it)"
)]
pub struct RecordedMismatch {
    /// The field (`peak_memory`, `residue`, `makespan`).
    pub field: &'static str,
    /// What the file says.
    pub recorded: String,
    /// What the replay found.
    pub replayed: String,
}

impl RecordedMismatch {
    /// A bad figure is bad input: [`ErrorKind::Input`].
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Input
    }
}

impl Replay {
    /// Checks the figures `schedule` records (`peak_memory`, `residue` and,
    /// to float rounding, `makespan`) against this replay of its operations,
    /// naming the first that differs. For a schedule replayed on the chain
    /// it names (on another chain its figures mean nothing). Issue 36: a
    /// residue the operations do not have gave a rank peak that was never
    /// theirs. O(number of operations).
    pub fn check_recorded(&self, schedule: &crate::schedule::Schedule) -> Result<(), RecordedMismatch> {
        let mismatch = |field, recorded: String, replayed: String| RecordedMismatch { field, recorded, replayed };
        if schedule.peak_memory != self.peak_memory {
            return Err(mismatch("peak_memory", schedule.peak_memory.to_string(), self.peak_memory.to_string()));
        }
        if let Some(r) = schedule.residue
            && r != self.residue()
        {
            return Err(mismatch("residue", r.to_string(), self.residue().to_string()));
        }
        if (schedule.makespan - self.makespan).abs() > 1e-9 * self.makespan.abs().max(1.0) {
            return Err(mismatch("makespan", schedule.makespan.to_string(), self.makespan.to_string()));
        }
        Ok(())
    }
}

/// Why a sequence is not a valid schedule.
#[derive(Debug, Error, PartialEq)]
pub enum SimulateError {
    /// An operation whose inputs are not in memory, out of order, or useless.
    #[error("operation {} ({op}) is invalid: {reason}", index + 1)]
    Invalid {
        /// 0-based index of the operation in the sequence.
        index: usize,
        /// The operation.
        op: Op,
        /// Why it cannot run.
        reason: String,
    },
    /// The sequence stops before delta^0 is computed.
    #[error("the sequence ends before B^1: {reason}")]
    Incomplete {
        /// What is missing.
        reason: String,
    },
    /// Valid, but needs more than the budget.
    #[error(
        "operation {} ({op}) needs {needed} bytes, over the budget of {budget} bytes",
        index + 1
    )]
    OverBudget {
        /// 0-based index of the first operation over budget.
        index: usize,
        /// The operation.
        op: Op,
        /// Bytes in use while it runs.
        needed: u64,
        /// The budget in bytes.
        budget: u64,
    },
}

impl SimulateError {
    /// What kind of failure this is: an invalid or incomplete sequence is
    /// [`ErrorKind::Input`] (the schedule is at fault), a valid one over the
    /// budget [`ErrorKind::Infeasible`] (a verdict on the budget). The `remat`
    /// command and the Python package choose their exit code and exception
    /// from it.
    ///
    /// ```
    /// use remat::schedule::parse_operations;
    /// use remat::{Chain, ErrorKind, simulate, simulate_within};
    ///
    /// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
    /// // A backward before its forward: the schedule is at fault.
    /// let e = simulate(&chain, &parse_operations("F_all^1 B^1")?).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Input);
    /// // Store-all (peak 900 bytes) within 800: a verdict on the budget.
    /// let e = simulate_within(&chain, &parse_operations("F_all^1..3 B^3..1")?, 800).unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::Infeasible);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            SimulateError::Invalid { .. } | SimulateError::Incomplete { .. } => ErrorKind::Input,
            SimulateError::OverBudget { .. } => ErrorKind::Infeasible,
        }
    }
}

/// Replays `ops` on `chain` and returns its makespan, peak and memory timeline,
/// or the first invalid operation and why.
///
/// Runs in O(L + number of operations).
///
/// # Examples
///
/// ```
/// use remat::schedule::parse_operations;
/// use remat::{Chain, simulate};
///
/// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
/// // Store-all: every forward keeps what its backward needs.
/// let replay = simulate(&chain, &parse_operations("F_all^1..3 B^3..1")?)?;
/// assert_eq!((replay.makespan, replay.peak_memory), (6.0, 900));
/// // A backward before its forward is refused, naming the operation.
/// let e = simulate(&chain, &parse_operations("F_all^1 B^1")?).unwrap_err();
/// assert!(e.to_string().starts_with("operation 2 (B^1)"), "{e}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn simulate(chain: &Chain, ops: &[Op]) -> Result<Replay, SimulateError> {
    let n = chain.len() + 1; // the loss is stage n
    let mut held = vec![Held::Absent; n + 1];
    // The option abar^l was recorded with, while it is held.
    let mut option = vec![0usize; n + 1];
    held[0] = Held::Plain;
    // The next backward to run is B^grad; delta^grad is in memory.
    let mut grad = n;
    let mut mem = Memory { activations: chain.output_size(0), gradients: chain.gradient_size(n), ..Memory::default() };
    let initial = mem;
    let mut makespan = 0.0;
    let mut peak = mem.total();
    let mut peak_index = 0;
    let mut steps = Vec::with_capacity(ops.len());

    for (index, &op) in ops.iter().enumerate() {
        let invalid = |reason: String| SimulateError::Invalid { index, op, reason };
        let l = op.stage();
        if l == 0 || l > n {
            return Err(invalid(format!("stage {l} does not exist: stages are 1..={n} ({n} is the loss)")));
        }
        let mut during = mem;
        match op {
            Op::FAll(..) | Op::FCk(_) | Op::FNone(_) => {
                if l > grad {
                    return Err(invalid(format!("B^{l} has already run, so a^{l} can no longer be used")));
                }
                if l == grad && !matches!(op, Op::FAll(..)) {
                    return Err(invalid(format!(
                        "B^{} has already run, so a plain a^{l} can no longer be used (only F_all^{l} is useful now)",
                        l + 1
                    )));
                }
                match (held[l - 1], op) {
                    (Held::Absent, _) => return Err(invalid(format!("its input a^{} is not in memory", l - 1))),
                    (Held::Saved, Op::FNone(_)) => {
                        return Err(invalid(format!(
                            "F_none needs a plain input, but a^{} is held as abar^{} (use F_ck or F_all)",
                            l - 1,
                            l - 1
                        )));
                    }
                    _ => {}
                }
                if held[l] != Held::Absent {
                    return Err(invalid(format!("a^{l} is already in memory")));
                }
                if op.option() >= chain.option_count(l) {
                    return Err(invalid(match chain.option_count(l) {
                        1 => format!("stage {l} has no options; record it with F_all^{l}"),
                        k => format!("stage {l} has options 0..={} only", k - 1),
                    }));
                }
                if let Op::FAll(_, o) = op {
                    let r = chain.recording(l, o);
                    during.saved += r.saved_size;
                    during.transient = r.forward_overhead;
                    option[l] = o;
                } else {
                    during.activations += chain.output_size(l);
                    during.transient = chain.forward_overhead(l);
                }
                makespan += chain.forward_time(l);
                mem = Memory { transient: 0, ..during };
                if matches!(op, Op::FNone(_)) {
                    held[l - 1] = Held::Absent;
                    mem.activations -= chain.output_size(l - 1);
                }
                held[l] = if matches!(op, Op::FAll(..)) { Held::Saved } else { Held::Plain };
            }
            Op::B(_) => {
                if l != grad {
                    return Err(invalid(if grad == 0 {
                        "B^1 has already run; the sequence is complete".to_string()
                    } else {
                        format!("backwards run from B^{n} down to B^1; the next one is B^{grad}")
                    }));
                }
                if held[l] != Held::Saved {
                    return Err(invalid(format!("abar^{l} is not in memory (run F_all^{l} first)")));
                }
                if held[l - 1] == Held::Absent {
                    return Err(invalid(format!("its input a^{} is not in memory", l - 1)));
                }
                let r = chain.recording(l, option[l]);
                during.gradients += chain.gradient_size(l - 1);
                during.transient = r.backward_overhead;
                // What the backward has freed of abar^l by its peak (<= w_abar^l, checked by the chain).
                during.saved -= r.backward_frees;
                makespan += r.backward_time;
                mem = Memory { transient: 0, ..during };
                mem.gradients -= chain.gradient_size(l);
                mem.saved -= r.saved_size - r.backward_frees;
                held[l] = Held::Absent;
                if held[l - 1] == Held::Plain {
                    mem.activations -= chain.output_size(l - 1);
                    held[l - 1] = Held::Absent;
                }
                grad = l - 1;
            }
        }
        if during.total() > peak {
            peak = during.total();
            peak_index = index;
        }
        steps.push(Step { op, during, after: mem });
    }
    if grad != 0 {
        return Err(SimulateError::Incomplete {
            reason: format!("the next backward would be B^{grad}, and delta^0 is not computed"),
        });
    }
    Ok(Replay { makespan, peak_memory: peak, peak_index, initial, steps })
}

/// Like [`simulate`], and also rejects a sequence whose peak exceeds `budget`,
/// naming the first operation that goes over.
pub fn simulate_within(chain: &Chain, ops: &[Op], budget: u64) -> Result<Replay, SimulateError> {
    let replay = simulate(chain, ops)?;
    if replay.peak_memory > budget {
        let (index, step) = replay
            .steps
            .iter()
            .enumerate()
            .find(|(_, s)| s.during.total() > budget)
            .expect("some step reaches the peak");
        return Err(SimulateError::OverBudget { index, op: step.op, needed: step.during.total(), budget });
    }
    Ok(replay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::schedule::parse_operations;

    fn chain3() -> Chain {
        // input 1; stage l: output 10*l, saved 10*l+1, gradient = output.
        let stages = (1..=3)
            .map(|l| {
                let mut s = Stage::simple(l as f64, 2.0 * l as f64, 10 * l as u64, 10 * l as u64 + 1);
                s.forward_overhead = 100;
                s.backward_overhead = 1000;
                s
            })
            .collect();
        Chain::new("c", 1, stages, Stage::zero_loss()).unwrap()
    }

    fn ops(text: &str) -> Vec<Op> {
        parse_operations(text).unwrap()
    }

    #[test]
    fn store_all_by_hand() {
        let c = chain3();
        let r = simulate(&c, &ops("F_all^1 F_all^2 F_all^3 F_all^4 B^4 B^3 B^2 B^1")).unwrap();
        assert_eq!(r.makespan, 18.0);
        // B^3: a0(1) + abar1(11) + abar2(21) + abar3(31) + delta3(30) + delta2(20) + o_b(1000)
        assert_eq!(r.steps[5].during.total(), 1 + 11 + 21 + 31 + 30 + 20 + 1000);
        assert_eq!(r.peak_memory, 1114);
        assert_eq!(r.peak_index, 5);
        // B^4 (loss, all zero): deletes nothing but abar^4 (0) and keeps abar^3.
        assert_eq!(r.steps[4].after.total(), 1 + 11 + 21 + 31 + 30);
        assert_eq!(r.steps.last().unwrap().after, Memory { gradients: 1, ..Memory::default() });
    }

    #[test]
    fn recomputation_by_hand() {
        let c = chain3();
        let seq = "F_ck^1 F_none^2 F_all^3 F_all^4 B^4 B^3 F_all^1 F_all^2 B^2 B^1";
        let r = simulate(&c, &ops(seq)).unwrap();
        // forwards 1+2+3 (+0 for the loss), B^3 = 6, recomputed 1+2, B^2 = 4, B^1 = 2
        assert_eq!(r.makespan, (1.0 + 2.0 + 3.0) + 6.0 + (1.0 + 2.0) + 4.0 + 2.0);
        // F_none^2 deletes a^1: after it, a0 + a2.
        assert_eq!(r.steps[1].after.activations, 1 + 20);
        // B^3 deletes the plain a^2 it used.
        assert_eq!(r.steps[5].after.total(), 1 + 20);
    }

    #[test]
    fn options_by_hand() {
        // Stage 2 (output 20, saved 21) gets an option keeping its output only
        // (20 bytes), 0.5 of recomputation in B^2, overheads 7 and 70.
        let mut c = chain3();
        let mut stages = c.stages().to_vec();
        stages[1].options.push(crate::chain::StageOption {
            name: None,
            saved_size: 20,
            recompute_time: 0.5,
            forward_overhead: 7,
            backward_overhead: 70,
            backward_frees: 0,
        });
        c = Chain::new("c", 1, stages, Stage::zero_loss()).unwrap();
        assert!(c.warnings().is_empty());
        let r = simulate(&c, &ops("F_all^1 F_all^2[1] F_all^3 F_all^4 B^4 B^3 B^2 B^1")).unwrap();
        assert_eq!(r.makespan, 18.5);
        assert_eq!(r.steps[1].during, Memory { activations: 1, saved: 11 + 20, gradients: 0, transient: 7 });
        // B^3 holds abar^2[1] (20) instead of abar^2 (21).
        assert_eq!(r.steps[5].during.total(), 1 + 11 + 20 + 31 + 30 + 20 + 1000);
        assert_eq!(r.steps[6].during, Memory { activations: 1, saved: 11 + 20, gradients: 20 + 10, transient: 70 });
        assert_eq!(r.steps[6].after, Memory { activations: 1, saved: 11, gradients: 10, transient: 0 });
        let e = simulate(&c, &ops("F_all^1 F_all^2[2]")).unwrap_err().to_string();
        assert!(e.contains("stage 2 has options 0..=1 only"), "{e}");
        let e = simulate(&c, &ops("F_all^1[1]")).unwrap_err().to_string();
        assert!(e.contains("stage 1 has no options"), "{e}");
    }

    #[test]
    fn invalid_operations_are_named() {
        let c = chain3();
        let cases = [
            ("F_all^2", "operation 1 (F_all^2) is invalid: its input a^1 is not in memory"),
            ("F_all^1 F_none^2", "a^1 is held as abar^1"),
            ("F_all^1 F_ck^1", "a^1 is already in memory"),
            ("F_all^1 B^1", "the next one is B^4"),
            ("F_ck^1 F_all^2 F_all^3 F_all^4 B^4 B^3 B^2 B^1", "abar^1 is not in memory"),
            ("F_all^1 F_all^2 F_all^3 F_all^4 B^4 F_all^4", "B^4 has already run"),
            ("F_all^1 F_all^2 F_all^3 F_all^4 B^4 F_ck^3", "a plain a^3 can no longer be used"),
            ("F_all^5", "stage 5 does not exist"),
            ("F_all^1 F_all^2 F_all^3 F_all^4 B^4 B^3", "ends before B^1"),
            ("F_all^1 F_all^2 F_all^3 F_all^4 B^4 B^3 B^2 B^1 B^1", "B^1 has already run"),
        ];
        for (seq, expected) in cases {
            let e = simulate(&c, &ops(seq)).unwrap_err().to_string();
            assert!(e.contains(expected), "{seq}: got `{e}`, expected `{expected}`");
        }
    }

    #[test]
    fn budget_names_first_operation_over() {
        let c = chain3();
        let seq = ops("F_all^1 F_all^2 F_all^3 F_all^4 B^4 B^3 B^2 B^1");
        assert!(simulate_within(&c, &seq, 1114).is_ok());
        let e = simulate_within(&c, &seq, 1113).unwrap_err();
        assert_eq!(e, SimulateError::OverBudget { index: 5, op: Op::B(3), needed: 1114, budget: 1113 });
    }
}
