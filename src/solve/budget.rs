//! Smallest budgets: what an algorithm needs, what any schedule needs, and
//! what a makespan limit needs; table-size estimates.

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{SlotChain, Slots};
use crate::solve::dp::{self, DpPlan, SlotDp};
use crate::solve::{
    AUTO_BASELINES, Algorithm, Solution, SolveError, SolveOptions, auto_choice, baselines, exhaustive, floating,
    limits, solve,
};

/// The smallest budget, in bytes, at which `algorithm` finds a schedule with
/// these options. For `exhaustive` it is exact (and the smallest budget any
/// schedule can meet).
///
/// # Examples
///
/// ```
/// use remat::solve::min_budget;
/// use remat::{Algorithm, Chain, SolveOptions, solve};
///
/// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
/// let opts = SolveOptions::default();
/// let m = min_budget(&chain, Algorithm::Persistent, &opts)?.expect("some budget works");
/// // solve meets it, and not a byte less.
/// assert!(solve(&chain, m, Algorithm::Persistent, &opts)?.schedule.peak_memory <= m);
/// assert!(solve(&chain, m - 1, Algorithm::Persistent, &opts).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn min_budget(chain: &Chain, algorithm: Algorithm, opts: &SolveOptions) -> Result<Option<u64>, SolveError> {
    limits::min_budget(chain, algorithm, opts)?;
    if opts.in_flight.get() > 1 {
        return crate::solve::in_flight::min_budget_for(chain, algorithm, opts);
    }
    match algorithm {
        Algorithm::Persistent => {
            dp::Persistent::check(chain, opts.slots.get())?;
            Ok(crate::solve::exact::min_budget(chain, opts))
        }
        // Within its stage limit: checked above.
        Algorithm::Exhaustive => Ok(Some(exhaustive::min_peak(chain).0)),
        Algorithm::Floating => {
            // The floating solve also answers with the exact persistent optimum.
            dp::Floating::check(chain, opts.slots.get())?;
            let table = dp::min_budget::<dp::Floating>(chain, opts.slots.get());
            let persistent = crate::solve::exact::min_budget(chain, opts);
            Ok(match (table, persistent) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            })
        }
        Algorithm::Auto => {
            // The choice depends on the budget only through the slot count's
            // range of budgets; judge it at the smallest budget persistent meets.
            let probe = dp::min_peak_exact::<dp::Persistent>(chain);
            let choice = auto_choice(chain, probe, opts).algorithm;
            let mut best = min_budget(chain, choice, opts)?;
            if choice != Algorithm::Exhaustive {
                // auto also runs the cheap baselines, which need no slot rounding.
                for &b in AUTO_BASELINES {
                    if let Some(m) = min_budget(chain, b, opts)? {
                        best = Some(best.map_or(m, |x| x.min(m)));
                    }
                }
            }
            Ok(best)
        }
        baseline => baselines::min_budget(chain, baseline, opts),
    }
}

/// What is known of the smallest budget, in bytes, of any valid schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnyMinimum {
    /// No valid schedule fits below this.
    pub lower: u64,
    /// A schedule fits at this budget; equal to `lower` when exact.
    pub upper: u64,
    /// How it was established.
    pub method: &'static str,
}

/// The smallest budget of any valid schedule: exact when the nested minimum of
/// the floating DP meets [`floating::any_peak_lower_bound`] (any length up to
/// [`floating::MAX_STAGES`]; O(L^4)) or when the chain is small enough for
/// exhaustive search (up to [`exhaustive::MAX_STAGES`] stages); otherwise a
/// lower bound and the nested (or, over [`floating::MAX_STAGES`], persistent)
/// minimum. Not every optimum is nested (see `floating`), so the nested
/// minimum alone is only an upper bound.
///
/// Refuses first, with [`SolveError::TooLarge`], a chain on which this would
/// not finish (its limit is in [`limits`]): every front end (the CLI,
/// Python) gets the same refusal.
///
/// # Examples
///
/// ```
/// use remat::solve::any_min_budget;
/// use remat::{Algorithm, Chain, SolveOptions, solve};
///
/// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
/// let any = any_min_budget(&chain)?;
/// // Proven: the bounds meet, and exhaustive search (exact in bytes) meets it.
/// assert_eq!((any.lower, any.upper), (700, 700));
/// let exact = solve(&chain, any.upper, Algorithm::Exhaustive, &SolveOptions::default())?;
/// assert_eq!(exact.schedule.peak_memory, 700);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn any_min_budget(chain: &Chain) -> Result<AnyMinimum, SolveError> {
    limits::any_min_budget(chain)?;
    Ok(any_min_budget_unguarded(chain))
}

fn any_min_budget_unguarded(chain: &Chain) -> AnyMinimum {
    let lower = floating::any_peak_lower_bound(chain);
    let (upper, method) = if chain.len() <= floating::MAX_STAGES {
        (dp::min_peak_exact::<dp::Floating>(chain), "floating DP, meeting a lower bound")
    } else {
        (dp::min_peak_exact::<dp::Persistent>(chain), "persistent DP, meeting a lower bound")
    };
    if upper == lower {
        return AnyMinimum { lower, upper, method };
    }
    if exhaustive::equivalent_stages(chain) <= limits::EXHAUSTIVE_MIN_BUDGET_STAGES {
        let exact = exhaustive::min_peak(chain).0;
        return AnyMinimum { lower: exact, upper: exact, method: "exhaustive search" };
    }
    let method = if chain.len() <= floating::MAX_STAGES {
        "lower bound to the floating DP's nested minimum"
    } else {
        "lower bound to the persistent DP's minimum"
    };
    AnyMinimum { lower, upper, method }
}

/// Memory, in bytes, that solving `chain` at `budget` with `algorithm` is
/// expected to take (its tables), computed before solving in O(L^2); `None`
/// for algorithms without such an estimate (floating's plan is itself
/// O(L^4), so it checks its own tables while solving). [`solve`] refuses, with
/// [`SolveError::TooLarge`], a slot DP whose estimate exceeds
/// [`crate::machine::memory_limit`] (half of the machine's memory).
///
/// Guards its own cost: over
/// [`crate::solve::distinct::ESTIMATE_MAX_STAGES`] stages, where the O(L^2)
/// estimate itself takes seconds, it is `None` when [`solve`] would refuse
/// the chain before any work (there that check is O(1)).
pub fn memory_estimate(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Option<u64> {
    if chain.len() + 1 > crate::solve::distinct::ESTIMATE_MAX_STAGES
        && limits::solve(chain, budget, algorithm, opts).is_err()
    {
        return None;
    }
    match algorithm {
        Algorithm::Persistent => Some(table_bytes::<dp::Persistent>(chain, budget, opts)),
        Algorithm::Revolve => Some(table_bytes::<dp::Revolve>(chain, budget, opts)),
        Algorithm::Auto => memory_estimate(chain, budget, auto_choice(chain, budget, opts).algorithm, opts),
        _ => None,
    }
}

/// The verdict on an infeasible `budget` whose smallest working budget with
/// the same options is `min`: [`SolveError::Infeasible`] naming `min` when
/// [`solve`] at `min` with these options would not be refused; otherwise the
/// refusal it would meet, as a [`SolveError::TooLarge`] that names `min`.
/// The slot count is part of the options: with more slots than bytes the
/// slot size is one byte and a DP's table grows with the budget, so the
/// smallest budget's table can be over the memory limit even though the
/// budget asked for was not. An infeasible verdict must name a budget that
/// then works. Costs what the refused solve's own checks cost (O(L^2) for the
/// estimates; the floating DP's plan).
pub(crate) fn infeasible_verdict(
    chain: &Chain,
    algorithm: Algorithm,
    budget: u64,
    min: u64,
    opts: &SolveOptions,
) -> SolveError {
    match refusal_at(chain, min, algorithm, opts) {
        None => SolveError::Infeasible { algorithm, budget, min_budget: Some(min) },
        Some(SolveError::TooLarge { reason, remedy }) => SolveError::TooLarge {
            reason: format!(
                "no {algorithm} schedule fits in {} ({budget} bytes); the smallest budget it can meet with {} slots, \
                 {} ({min} bytes), is too large to solve with them: {reason}",
                crate::size::format_size(budget),
                opts.slots,
                crate::size::format_size(min),
            ),
            remedy,
        },
        Some(other) => other,
    }
}

/// The refusal [`solve`] at `budget` would meet before solving, if any: the
/// work estimate of its [`limits`], then the table's memory.
fn refusal_at(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Option<SolveError> {
    if let Err(e) = limits::solve(chain, budget, algorithm, opts) {
        return Some(e);
    }
    let needed = match algorithm {
        // auto runs its DP first and stops at the DP's refusal.
        Algorithm::Auto => return refusal_at(chain, budget, auto_choice(chain, budget, opts).algorithm, opts),
        Algorithm::Floating => table_bytes::<dp::Floating>(chain, budget, opts),
        _ => memory_estimate(chain, budget, algorithm, opts)?,
    };
    limits::table_memory(algorithm, needed, chain.len(), opts.slots.get()).err()
}

pub(crate) fn table_bytes<D: SlotDp>(chain: &Chain, budget: u64, opts: &SolveOptions) -> u64 {
    D::plan(SlotChain::new(chain, Slots::new(budget, opts.slots.get()))).table_bytes()
}

/// The smallest budget at which `solve(chain, budget, algorithm, opts)`
/// returns a schedule with a makespan of at most `max_makespan`, with that
/// schedule; `Ok(None)` when no budget up to store-all's peak does (below
/// the store-all time no schedule can).
///
/// It runs exactly what [`solve`] runs (same algorithm, options and slot
/// rounding at each budget), so the answer is one `remat solve` reproduces.
/// A bisection over bytes between the any-schedule lower bound and
/// store-all's peak keeps the invariant "meets at `hi`, not at `lo`", so the
/// returned budget b meets the limit and b - 1 bytes does not (or is below
/// what any schedule needs), even where the algorithm is not monotone in the
/// budget. O(log2(peak) solves).
pub fn min_budget_for_makespan(
    chain: &Chain,
    max_makespan: f64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Option<Solution>, SolveError> {
    let meets = |budget: u64| -> Result<Option<Solution>, SolveError> {
        match solve(chain, budget, algorithm, opts) {
            Ok(s) if s.schedule.makespan <= max_makespan => Ok(Some(s)),
            Ok(_) | Err(SolveError::Infeasible { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let n = chain.len() + 1;
    let store_all: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
    let peak = crate::simulate::simulate(chain, &store_all)
        .map_err(|source| SolveError::Rejected { algorithm, source })?
        .peak_memory;
    let Some(mut best) = meets(peak)? else {
        return Ok(None);
    };
    let (mut lo, mut hi) = (floating::any_peak_lower_bound(chain).saturating_sub(1), peak);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match meets(mid)? {
            Some(s) => {
                hi = mid;
                best = s;
            }
            None => lo = mid,
        }
    }
    Ok(Some(best))
}
