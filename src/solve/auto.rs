//! `--algorithm auto` on a chain: which algorithm it runs, and the run.

use crate::chain::Chain;
use crate::size::format_size;
use crate::slots::Slots;
use crate::solve::{Algorithm, Solution, SolveError, SolveOptions, checked, dp, fit, floating, min_budget, solve};

/// Chains of at most this many stages are solved by exhaustive search under
/// `auto`: exact in bytes over every schedule, and about 0.2 s at worst on
/// random and network-like chains of 10 stages (it grows about 2.3x a stage).
pub const AUTO_EXHAUSTIVE_STAGES: usize = 10;
/// `auto` runs the floating DP when its tables need at most this many bytes...
pub const AUTO_FLOATING_BYTES: u64 = 2 << 30;
/// ...and at most this many slot-option steps (about 1 ns each per core).
pub const AUTO_FLOATING_WORK: u64 = 10_000_000_000;

/// The algorithm `auto` runs for a solve, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoChoice {
    /// Exhaustive, Floating or Persistent.
    pub algorithm: Algorithm,
    /// One line for the user.
    pub reason: String,
}

/// What `--algorithm auto` runs: exhaustive search for chains of at most
/// [`AUTO_EXHAUSTIVE_STAGES`] stages (exact in bytes, over every schedule),
/// the floating DP when an upper bound of its cost is modest
/// ([`AUTO_FLOATING_BYTES`], [`AUTO_FLOATING_WORK`], and the machine's
/// [`floating::memory_limit`]), otherwise the persistent DP. Depends only on
/// the chain's length, the budget and the slot count (and the machine's
/// memory), so the same input gets the same algorithm. O(L^2).
pub fn auto_choice(chain: &Chain, budget: u64, opts: &SolveOptions) -> AutoChoice {
    let len = chain.len();
    if len <= AUTO_EXHAUSTIVE_STAGES {
        return AutoChoice {
            algorithm: Algorithm::Exhaustive,
            reason: format!("{len} stages: exact search over every memory state is cheap"),
        };
    }
    if len > floating::MAX_STAGES {
        // Not even a plan: its estimate alone allocates O(L^2).
        return AutoChoice {
            algorithm: Algorithm::Persistent,
            reason: format!("{len} stages: over the floating DP's {}", floating::MAX_STAGES),
        };
    }
    let m = Slots::new(budget, opts.slots.get()).capacity;
    let est = floating::upper_estimate(len, m);
    let limit = AUTO_FLOATING_BYTES.min(floating::memory_limit());
    if len <= floating::MAX_STAGES && est.table_bytes <= limit && est.work <= AUTO_FLOATING_WORK {
        return AutoChoice {
            algorithm: Algorithm::Floating,
            reason: format!(
                "{len} stages at {} slots: floating DP tables of at most {} and {:.1e} steps",
                opts.slots.get(),
                format_size(est.table_bytes),
                est.work as f64
            ),
        };
    }
    AutoChoice {
        algorithm: Algorithm::Persistent,
        reason: format!(
            "{len} stages at {} slots: the floating DP could need {} of tables and {:.1e} steps \
             (auto allows {} and {:.0e}); force it with --algorithm floating or use fewer --slots",
            opts.slots.get(),
            format_size(est.table_bytes),
            est.work as f64,
            format_size(limit),
            AUTO_FLOATING_WORK as f64
        ),
    }
}

/// The baselines `auto` runs beside a slot-based DP: cheap (no slots, at most
/// O(L^3)), and exact in bytes, so at a budget that is exactly one of their
/// peaks they can beat a DP that rounds sizes up to slots.
pub const AUTO_BASELINES: &[Algorithm] =
    &[Algorithm::StoreAll, Algorithm::Sequential, Algorithm::ChenGreedy, Algorithm::ChenSqrt];

/// `--algorithm auto` on a chain: exhaustive search when [`auto_choice`] says
/// so (exact). Otherwise the chosen DP fitted to the budget by replay
/// ([`fit::fitted`]: never slower than the DP's own answer), and the
/// [`AUTO_BASELINES`]; the fastest wins, ties going to the DP. So auto is
/// never slower than the DP it chose nor than any of those baselines at the
/// same budget. The solution's `reason` says what ran and why.
pub(crate) fn solve_auto(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let choice = auto_choice(chain, budget, opts);
    let dp = choice.algorithm;
    if dp == Algorithm::Exhaustive {
        let mut solution = solve(chain, budget, dp, opts)?;
        solution.reason = Some(choice.reason);
        return Ok(solution);
    }
    let fitted = match dp {
        Algorithm::Floating => fit::fitted::<dp::Floating>(chain, budget, opts.slots.get(), opts.progress)?,
        _ => fit::fitted::<dp::Persistent>(chain, budget, opts.slots.get(), opts.progress)?,
    };
    let mut best = match fitted {
        Some(f) => {
            let mut solution = checked(chain, budget, dp, f.ops, f.slot_size, f.replay.makespan)?;
            if f.slots_above > 0 {
                solution.detail = Some(format!(
                    "fitted by replay: the schedule the DP finds {} slot{} above the budget fits it in bytes",
                    f.slots_above,
                    if f.slots_above == 1 { "" } else { "s" }
                ));
            }
            solution.reason = Some(choice.reason.clone());
            Some(solution)
        }
        None => None,
    };
    for &baseline in AUTO_BASELINES {
        let candidate = match solve(chain, budget, baseline, opts) {
            Ok(solution) => solution,
            Err(SolveError::Infeasible { .. }) => continue,
            Err(e) => return Err(e),
        };
        let faster = match &best {
            None => true,
            Some(b) => {
                let (t, tb) = (candidate.schedule.makespan, b.schedule.makespan);
                t < tb - 1e-9 * tb.abs().max(1.0)
            }
        };
        if faster {
            let dp_time = best.as_ref().filter(|b| b.schedule.algorithm == dp.name()).map(|b| b.schedule.makespan);
            let mut solution = candidate;
            solution.reason = Some(match dp_time {
                Some(t) => format!(
                    "{baseline} is faster at this budget than the {dp} DP ({:.2} vs {t:.2}), whose rounding of \
                     sizes up to slots costs it here ({})",
                    solution.schedule.makespan, choice.reason
                ),
                None if best.is_none() => {
                    format!("{baseline} fits this budget and the {dp} DP does not with these slots ({})", choice.reason)
                }
                None => format!("{baseline} is the fastest of the baselines auto runs beside the {dp} DP"),
            });
            best = Some(solution);
        }
    }
    best.ok_or_else(|| SolveError::Infeasible {
        algorithm: Algorithm::Auto,
        budget,
        min_budget: min_budget(chain, Algorithm::Auto, opts).ok().flatten(),
    })
}
