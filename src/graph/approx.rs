//! Checkmate's approximation (MLSys 2020, §5): solve the LP relaxation of the
//! MILP, round the checkpoint matrix `S*` deterministically (`S = 1[S* > 0.5]`)
//! and complete R with two-phase rounding (`staged::Staged::complete`).
//!
//! Rounding keeps every correctness constraint but not the budget, so the
//! rounded schedule is replayed by the exact simulator and kept only if it
//! fits. As in the paper (§5.3), when it does not, the LP is solved again under
//! a smaller budget `(1 - eps) M` for the allowances in [`ALLOWANCES`], and the
//! first rounded schedule that fits the real budget `M` is returned. The LP
//! optimum at `M` is a proven lower bound on the MILP's, so the gap reported is
//! proven too.

use std::time::Instant;

use thiserror::Error;

use crate::error::ErrorKind;
use crate::graph::milp::{self, MilpError, MilpOptions};
use crate::graph::simulate::{GraphReplay, GraphSimulateError, simulate};
use crate::graph::staged::Staged;
use crate::graph::{CheckmateGraph, GraphOp};

/// Budget allowances eps tried in turn: the LP is solved under `(1 - eps) M`.
pub const ALLOWANCES: [f64; 5] = [0.0, 0.1, 0.2, 0.3, 0.5];

/// A rounded schedule that fits the budget.
#[derive(Clone, Debug)]
pub struct Rounded {
    /// The rounded (R, S).
    pub staged: Staged,
    /// Its `compute`/`free` operations (`Staged::operations`).
    pub operations: Vec<GraphOp>,
    /// Their replay (peak within the budget).
    pub replay: GraphReplay,
    /// The LP optimum under the real budget: a lower bound on any schedule's cost.
    pub lp_bound: f64,
    /// The allowance eps whose LP gave this schedule.
    pub allowance: f64,
    /// Seconds spent in LP solves.
    pub seconds: f64,
}

/// Why no rounded schedule came back.
#[derive(Debug, Error)]
pub enum ApproxError {
    /// The LP failed (an infeasible LP means no schedule fits at all).
    #[error(transparent)]
    Lp(#[from] MilpError),
    /// Every rounded schedule exceeded the budget.
    #[error(
        "every rounded schedule exceeds the budget (the smallest needs {smallest_peak} bytes, the budget is {budget}); \
         the exact MILP (--algorithm checkmate) may still find one"
    )]
    OverBudget {
        /// The lowest peak among the rounded schedules.
        smallest_peak: u64,
        /// The budget.
        budget: u64,
    },
    /// A rounded plan failed its replay: a bug in remat.
    #[error("internal error: a rounded plan failed its replay ({0}); please report this")]
    Invalid(GraphSimulateError),
}

impl ApproxError {
    /// What kind of failure this is: every rounded schedule over the budget
    /// is [`ErrorKind::Infeasible`] (for rounding: the exact MILP may still
    /// find one), a rounded plan its replay rejects [`ErrorKind::Internal`],
    /// an LP failure that of [`MilpError::kind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            ApproxError::Lp(e) => e.kind(),
            ApproxError::OverBudget { .. } => ErrorKind::Infeasible,
            ApproxError::Invalid(_) => ErrorKind::Internal,
        }
    }
}

/// Rounds a fractional `S*` and completes R (two-phase rounding).
pub fn round(graph: &CheckmateGraph, s_star: &[Vec<f64>]) -> Staged {
    let mut staged = Staged::frontier(graph.len());
    for (t, row) in s_star.iter().enumerate() {
        for (i, &x) in row.iter().enumerate() {
            staged.s[t][i] = x > 0.5;
        }
    }
    staged.complete(graph);
    staged
}

/// LP relaxation + two-phase rounding of `graph` under `budget` bytes (module
/// documentation). Each LP gets `opts`' time limit.
pub fn round_relaxation(graph: &CheckmateGraph, budget: u64, opts: &MilpOptions) -> Result<Rounded, ApproxError> {
    let start = Instant::now();
    let (lp_bound, first) = milp::relaxation(graph, budget, opts)?;
    let mut smallest_peak = u64::MAX;
    for (attempt, &eps) in ALLOWANCES.iter().enumerate() {
        let s_star = if attempt == 0 {
            first.clone()
        } else {
            let tighter = ((1.0 - eps) * budget as f64).floor() as u64;
            match milp::relaxation(graph, tighter, opts) {
                Ok((_, s)) => s,
                // A tighter LP that is infeasible stays infeasible below.
                Err(MilpError::Infeasible) => break,
                Err(e) => return Err(e.into()),
            }
        };
        let staged = round(graph, &s_star);
        let operations = staged.operations(graph);
        let replay = simulate(graph, &operations).map_err(ApproxError::Invalid)?;
        if replay.peak_memory <= budget {
            let seconds = start.elapsed().as_secs_f64();
            return Ok(Rounded { staged, operations, replay, lp_bound, allowance: eps, seconds });
        }
        smallest_peak = smallest_peak.min(replay.peak_memory);
    }
    Err(ApproxError::OverBudget { smallest_peak, budget })
}
