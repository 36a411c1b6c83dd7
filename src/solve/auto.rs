//! `--algorithm auto` on a chain: which algorithm it runs, and the run.

use crate::chain::Chain;
use crate::size::format_size;
use crate::slots::Slots;
use crate::solve::dp::SlotDp;
use crate::solve::{
    Algorithm, Solution, SolveError, SolveOptions, checked, dp, exact, exhaustive, fit, floating, min_budget, solve,
};

/// Chains of at most this many stages are solved by exhaustive search under
/// `auto`: exact in bytes over every schedule, and about 0.2 s at worst on
/// random and network-like chains of 10 stages (it grows about 2.3x a stage).
/// A chain with options is counted by [`exhaustive::equivalent_stages`].
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
/// [`AUTO_EXHAUSTIVE_STAGES`] stages, options counted as
/// [`exhaustive::equivalent_stages`] does (exact in bytes, over every schedule),
/// the floating DP when an upper bound of its cost is modest
/// ([`AUTO_FLOATING_BYTES`], [`AUTO_FLOATING_WORK`], and the machine's
/// [`crate::machine::memory_limit`]), otherwise the persistent DP. Depends only on
/// the chain's length, the budget and the slot count (and the machine's
/// memory), so the same input gets the same algorithm. O(L^2).
pub fn auto_choice(chain: &Chain, budget: u64, opts: &SolveOptions) -> AutoChoice {
    let len = chain.len();
    let equivalent = exhaustive::equivalent_stages(chain);
    if equivalent <= AUTO_EXHAUSTIVE_STAGES {
        let options = if equivalent == len {
            String::new()
        } else {
            format!(" (with its options, as many memory states as {equivalent} stages)")
        };
        return AutoChoice {
            algorithm: Algorithm::Exhaustive,
            reason: format!("{len} stages{options}: exact search over every memory state is cheap"),
        };
    }
    if len > floating::MAX_STAGES {
        // Not even a plan: its estimate alone allocates O(L^2).
        return AutoChoice {
            algorithm: Algorithm::Persistent,
            reason: format!("{len} stages: over the floating DP's {}", floating::MAX_STAGES),
        };
    }
    // Every cell counted, as before the floating DP shared groups of equal
    // stages (issue 25): auto makes the same choice as before, and the
    // floating DP it runs is faster on repeated blocks. Counting only the
    // groups it fills would send stacks of 200 blocks to the floating DP
    // (several seconds at 500 slots) for the persistent answer they get in
    // 0.3 s.
    let m = Slots::new(budget, opts.slots.get()).capacity;
    let est = floating::upper_estimate(len, m);
    let limit = AUTO_FLOATING_BYTES.min(crate::machine::memory_limit());
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
/// `uniform` (one recording option on every stage) is among them: on a chain
/// with options it is the schedule people write by hand.
pub const AUTO_BASELINES: &[Algorithm] =
    &[Algorithm::StoreAll, Algorithm::Sequential, Algorithm::ChenGreedy, Algorithm::ChenSqrt, Algorithm::Uniform];

/// `--algorithm auto` on a chain: exhaustive search when [`auto_choice`] says
/// so (exact). Otherwise the [`AUTO_BASELINES`] first (cheap), then the
/// persistent optimum exact in bytes ([`exact::exact`], told the fastest
/// baseline's makespan so that it can drop what cannot beat it), then, when
/// the choice is the floating DP or the exact fronts gave up, that DP fitted
/// to the budget by replay ([`fit::fitted`]: never slower than the DP's own
/// answer). The DP's answer and the exact one are kept by [`exact::choose`]
/// (a tie keeps the DP auto chose); a baseline replaces that only when
/// [`exact::faster`]. So auto is never slower than the persistent optimum
/// (where its fronts fit), the DP it chose, or any of those baselines at the
/// same budget. The solution's `reason` says what ran and why.
pub(crate) fn solve_auto(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let choice = auto_choice(chain, budget, opts);
    let dp = choice.algorithm;
    if dp == Algorithm::Exhaustive {
        let mut solution = solve(chain, budget, dp, opts)?;
        solution.reason = Some(choice.reason);
        return Ok(solution);
    }
    let slots = opts.slots.get();
    let mut baseline: Option<Solution> = None;
    for &b in AUTO_BASELINES {
        let candidate = match solve(chain, budget, b, opts) {
            Ok(solution) => solution,
            Err(SolveError::Infeasible { .. }) => continue,
            Err(e) => return Err(e),
        };
        if baseline.as_ref().is_none_or(|best| exact::faster(candidate.schedule.makespan, best.schedule.makespan)) {
            baseline = Some(candidate);
        }
    }
    let ceiling = baseline.as_ref().map_or(f64::INFINITY, |b| b.schedule.makespan);
    dp::Persistent::check(chain, slots)?;
    let exact = if dp::min_peak_exact::<dp::Persistent>(chain) <= budget {
        // No more memory than the DP auto chose would take.
        let limit = exact::limit(opts, || match dp {
            Algorithm::Floating => exact::fronts_limit_beside_floating(chain, budget, slots),
            _ => exact::fronts_limit(chain, budget, slots),
        });
        exact::exact(chain, budget, limit, exact::work_limit(opts), ceiling)
    } else {
        Ok(None)
    };
    let fitted = match dp {
        Algorithm::Floating => fit::fitted::<dp::Floating>(chain, budget, slots, opts.progress)?,
        _ if exact.is_err() => fit::fitted::<dp::Persistent>(chain, budget, slots, opts.progress)?,
        _ => None,
    };
    // The exact persistent schedule replaces the DP's only when faster: on a
    // tie the floating DP, which auto chose, names the schedule.
    let kept = exact::choose(
        exact,
        fitted.map(|f| {
            let makespan = f.replay.makespan;
            (f, makespan)
        }),
    );
    let rounded_note = match &kept {
        exact::Choice::Table { gave_up: Some(_), .. } => kept.note(opts),
        _ => None,
    };
    let mut best: Option<Solution> = match kept {
        exact::Choice::Exact { makespan, ops, points } => {
            let mut solution = checked(chain, budget, Algorithm::Persistent, ops, 1, makespan)?;
            solution.detail = Some(exact::exact_note(points));
            solution.reason = Some(format!(
                "the persistent optimum exact in bytes is the fastest schedule auto found (beside {})",
                choice.reason
            ));
            Some(solution)
        }
        exact::Choice::Table { answer: f, .. } => {
            let mut solution = checked(chain, budget, dp, f.ops, f.slot_size, f.replay.makespan)?;
            if f.slots_above > 0 {
                solution.detail = Some(format!(
                    "fitted by replay: the schedule the DP finds {} slot{} above the budget fits it in bytes",
                    f.slots_above,
                    if f.slots_above == 1 { "" } else { "s" }
                ));
            }
            solution.reason = Some(match &rounded_note {
                Some(note) => format!("{}; {note}", choice.reason),
                None => choice.reason.clone(),
            });
            Some(solution)
        }
        exact::Choice::Neither => None,
    };
    if let Some(mut candidate) = baseline
        && best.as_ref().is_none_or(|b| exact::faster(candidate.schedule.makespan, b.schedule.makespan))
    {
        let name = candidate.schedule.algorithm.clone();
        candidate.reason = Some(match &best {
            Some(b) => format!(
                "{name} is faster at this budget than the {} schedule auto found ({:.2} vs {:.2}; {})",
                b.schedule.algorithm, candidate.schedule.makespan, b.schedule.makespan, choice.reason
            ),
            None => format!("{name} fits this budget and the DPs auto ran do not ({})", choice.reason),
        });
        best = Some(candidate);
    }
    best.ok_or_else(|| SolveError::Infeasible {
        algorithm: Algorithm::Auto,
        budget,
        min_budget: min_budget(chain, Algorithm::Auto, opts).ok().flatten(),
    })
}
