//! Every chain algorithm behind one entry point, [`solve`].
//!
//! Whatever an algorithm returns is replayed by the exact simulator before it
//! is handed out: the [`Solution`]'s makespan and peak are the simulator's, and
//! a schedule that is invalid or over budget is reported as a bug, never shown.
//!
//! One file per concept, its items re-exported here: `algorithm` (the
//! catalogue, [`Algorithm`]), `options` ([`SolveOptions`]), `error`
//! ([`SolveError`]), `auto` (what `auto` runs and why, [`auto_choice`]),
//! `budget` (smallest budgets and estimates, [`min_budget`]), `dp` (the
//! interface of the slot DPs and what is written once over it), and one
//! module per algorithm: [`persistent`], [`floating`],
//! [`exhaustive`], [`baselines`]; [`limits`] (each family's limits, which
//! every entry point checks before any work); `fit` fits a DP to a budget by replay;
//! `fronts` is the persistent program exact in bytes, and `exact` decides
//! when `solve` answers with it (persistent, floating and auto all do where
//! its fronts fit) and when with the slot table.

mod algorithm;
mod auto;
pub mod baselines;
mod budget;
pub mod distinct;
// The slot DPs' internals: public for tests and benches only.
#[doc(hidden)]
pub mod dp;
mod error;
pub(crate) mod exact;
pub mod exhaustive;
pub(crate) mod fit;
pub mod floating;
// The exact-in-bytes persistent program: public for tests and benches only.
#[doc(hidden)]
pub mod fronts;
pub mod in_flight;
pub mod limits;
mod options;
pub mod persistent;

pub use crate::schedule::{MAX_IN_FLIGHT, check_in_flight};
pub use algorithm::Algorithm;
pub use auto::{
    AUTO_BASELINES, AUTO_EXHAUSTIVE_STAGES, AUTO_FLOATING_BYTES, AUTO_FLOATING_WORK, AutoChoice, auto_choice,
};
pub use budget::{AnyMinimum, any_min_budget, memory_estimate, min_budget, min_budget_for_makespan};
pub use error::{Remedy, SolveError};
pub use options::{DEFAULT_SLOTS, Progress, SolveOptions};

use crate::chain::Chain;
use crate::schedule::{Op, Schedule};
use crate::simulate::{Replay, simulate_within};
use auto::solve_auto;

/// A schedule that the simulator has replayed within the budget.
#[derive(Clone, Debug)]
pub struct Solution {
    /// The schedule, with the simulator's makespan and peak.
    pub schedule: Schedule,
    /// The replay it was checked with (memory timeline included).
    pub replay: Replay,
    /// Bytes per memory slot the solver worked with (1 = exact).
    pub slot_size: u64,
    /// The makespan the solver itself predicted (checked equal to the replay's).
    pub solver_makespan: f64,
    /// The parameter a baseline settled on (`K = 4 segments`), or how `auto`
    /// fitted a DP to the budget, if any.
    pub detail: Option<String>,
    /// Why `auto` returned this schedule (`None` for the other algorithms).
    pub reason: Option<String>,
}

/// Solves `chain` under `budget` bytes with `algorithm`, replays the result
/// with the exact simulator and returns it.
///
/// Deterministic: the same input gives the same schedule. Complexity is the
/// algorithm's (see each module).
///
/// An [`SolveError::Infeasible`] names a budget that `solve` with the same
/// options then meets; where it could not (with more slots than bytes the
/// tables grow with the budget, and the smallest budget's may be over the
/// memory limit) the answer is a [`SolveError::TooLarge`] that names that
/// budget and what to change.
///
/// # Examples
///
/// ```
/// use remat::{Algorithm, Chain, SolveOptions, simulate, solve};
///
/// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
/// let solution = solve(&chain, 700, Algorithm::Persistent, &SolveOptions::default())?;
/// // The figures are the simulator's: replaying the operations gives them again.
/// let replay = simulate(&chain, &solution.schedule.operations)?;
/// assert_eq!(replay.makespan, solution.schedule.makespan);
/// assert!(solution.schedule.peak_memory <= 700);
/// // Below the smallest budget the error names it.
/// let e = solve(&chain, 600, Algorithm::Persistent, &SolveOptions::default()).unwrap_err();
/// assert!(e.to_string().contains("the smallest budget it can meet is 700 B"), "{e}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn solve(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Result<Solution, SolveError> {
    match solve_unverified(chain, budget, algorithm, opts) {
        Err(SolveError::Infeasible { algorithm, budget, min_budget: Some(min) }) => {
            Err(budget::infeasible_verdict(chain, algorithm, budget, min, opts))
        }
        other => other,
    }
}

/// [`solve`] before its infeasible verdict is checked.
fn solve_unverified(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Solution, SolveError> {
    limits::solve(chain, budget, algorithm, opts)?;
    if opts.in_flight.get() > 1 {
        return in_flight::solve(chain, budget, algorithm, opts);
    }
    let (ops, slot_size, predicted) = match algorithm {
        Algorithm::Persistent => {
            let answer = exact::persistent(chain, budget, opts)?;
            let mut solution = checked(chain, budget, algorithm, answer.ops, answer.slot_size, answer.makespan)?;
            solution.detail = Some(answer.note);
            return Ok(solution);
        }
        Algorithm::Floating => return solve_floating(chain, budget, opts),
        Algorithm::Auto => return solve_auto(chain, budget, opts),
        Algorithm::Exhaustive => {
            // Within its stage limit: checked above.
            match exhaustive::fastest(chain, budget) {
                Some((time, ops)) => (ops, 1, time),
                None => {
                    return Err(SolveError::Infeasible {
                        algorithm,
                        budget,
                        min_budget: Some(exhaustive::min_peak(chain).0),
                    });
                }
            }
        }
        baseline => {
            let generated = baselines::schedule(chain, budget, baseline, opts)?;
            let mut solution =
                checked(chain, budget, algorithm, generated.ops, generated.slot_size, generated.makespan)?;
            solution.detail = generated.detail;
            return Ok(solution);
        }
    };
    checked(chain, budget, algorithm, ops, slot_size, predicted)
}

/// `--algorithm floating`: the floating DP's answer, or the exact persistent
/// optimum where that is faster (every persistent schedule is a floating
/// one, so floating is never slower than persistent), including where the
/// floating table, rounded to slots, finds nothing; kept by
/// [`exact::choose`] (a tie keeps the floating table's).
fn solve_floating(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let slots = opts.slots.get();
    let table = match dp::solve_dp::<dp::Floating>(chain, budget, slots, opts.progress) {
        Ok(answer) => Some(answer),
        Err(SolveError::Infeasible { .. }) => None,
        Err(e) => return Err(e),
    };
    let ceiling = table.as_ref().map_or(f64::INFINITY, |t| t.2);
    let persistent = if dp::min_peak_exact::<dp::Persistent>(chain) <= budget {
        let limit = exact::limit(opts, || exact::fronts_limit_beside_floating(chain, budget, slots));
        exact::exact(chain, budget, limit, exact::work_limit(opts), ceiling)
    } else {
        Ok(None)
    };
    match exact::choose(persistent, table.map(|t| (t, ceiling))) {
        exact::Choice::Exact { makespan, ops, points } => {
            let mut solution = checked(chain, budget, Algorithm::Floating, ops, 1, makespan)?;
            solution.detail = Some(format!(
                "{}, faster than the floating table rounded to {slots} slots: every persistent schedule is a \
                 floating one",
                exact::exact_note(points)
            ));
            Ok(solution)
        }
        exact::Choice::Table { answer: (ops, slot_size, predicted), .. } => {
            checked(chain, budget, Algorithm::Floating, ops, slot_size, predicted)
        }
        exact::Choice::Neither => Err(SolveError::Infeasible {
            algorithm: Algorithm::Floating,
            budget,
            min_budget: min_budget(chain, Algorithm::Floating, opts).ok().flatten(),
        }),
    }
}

/// Replays `ops` within `budget`, checks the solver's `predicted` makespan
/// against the replay (to rounding of float sums) and wraps them as a
/// [`Solution`].
pub(crate) fn checked(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    ops: Vec<Op>,
    slot_size: u64,
    predicted: f64,
) -> Result<Solution, SolveError> {
    checked_in_flight(chain, budget, algorithm, ops, slot_size, predicted, 1)
}

/// [`checked`] for a pipeline rank holding `in_flight` micro-batches: the
/// replay's [`Replay::rank_peak`] must fit `budget`.
pub(crate) fn checked_in_flight(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    ops: Vec<Op>,
    slot_size: u64,
    predicted: f64,
    in_flight: usize,
) -> Result<Solution, SolveError> {
    let rejected = |source| SolveError::Rejected { algorithm, source };
    let replay = if in_flight <= 1 {
        simulate_within(chain, &ops, budget).map_err(rejected)?
    } else {
        let replay = crate::simulate::simulate(chain, &ops).map_err(rejected)?;
        match replay.rank_peak(in_flight) {
            Some(needed) if needed <= budget => replay,
            // Over u64::MAX bytes: no budget holds it (reported at the most a u64 says).
            needed => {
                let (index, needed) = (replay.peak_index, needed.unwrap_or(u64::MAX));
                let op = ops[index];
                return Err(rejected(crate::simulate::SimulateError::OverBudget { index, op, needed, budget }));
            }
        }
    };
    let tolerance = 1e-9 * replay.makespan.abs().max(1.0);
    if (predicted - replay.makespan).abs() > tolerance {
        return Err(SolveError::Mispredicted { algorithm, predicted, replayed: replay.makespan });
    }
    let schedule = Schedule {
        chain: Some(chain.id()),
        algorithm: algorithm.name().to_string(),
        budget,
        makespan: replay.makespan,
        peak_memory: replay.peak_memory,
        in_flight: in_flight.max(1),
        residue: (in_flight > 1).then(|| replay.residue()),
        operations: ops,
    };
    Ok(Solution { schedule, replay, slot_size, solver_makespan: predicted, detail: None, reason: None })
}
