//! What `solve` answers for the persistent program: its optimum exact in
//! bytes ([`super::fronts`]) when the fronts fit in the memory the slot table
//! would take, else the slot DP's rounded answer, saying so.
//!
//! The guard is memory, computed before anything is filled: the fronts may
//! take at most [`SolveOptions::exact_memory`] bytes when it is set, else
//! [`fronts_limit`], the memory of the slot table at the solve's slot count
//! ([`persistent::table_bytes_estimate`], what `solve` used before the
//! fronts), but never less than [`FRONTS_MIN_BYTES`] (on short chains both
//! are small). [`Fronts::build_bounded`] gives up as soon as
//! its fronts exceed it or are projected to, so a chain whose fronts are too
//! large costs a fraction of their time before the slot DP runs. The guard
//! depends on the chain, the budget, the slot count and `exact_memory` only,
//! so the same input always gets the same answer.
//!
//! Since sub-chains holding the same stages share their fronts (issue 25),
//! long stacks of repeated blocks fit in memory but can take minutes, so by
//! default the fronts also give up when their projected work exceeds
//! [`FRONTS_MAX_WORK`] (about 10 s); setting `exact_memory` lifts that limit.

use crate::chain::Chain;
use crate::schedule::Op;
use crate::size::format_size;
use crate::slots::{SlotChain, Slots};
use crate::solve::dp::{self, SlotDp};
use crate::solve::fronts::{Fronts, FrontsTooLarge};
use crate::solve::{Algorithm, SolveError, SolveOptions, floating, persistent};

/// The fronts may always take this much memory, whatever the slot table's:
/// little on a machine that trains networks, and enough for DenseNet-201
/// (114 stages) at any budget, whose 500-slot table takes 15 MB but whose
/// exact answer is up to 3% faster (its fronts take 60 to 140 MB, 1 to 2.5
/// s). Longer chains like ResNet-1001 (339 stages, 0.4 to 0.8 GB) stay
/// rounded by default: [`SolveOptions::exact_memory`] raises the limit.
pub const FRONTS_MIN_BYTES: u64 = 256 << 20;

/// The most work, in point-steps ([`Fronts::build_guarded`]), the fronts may
/// take when [`SolveOptions::exact_memory`] is not set: about 10 s on a
/// loaded 2-core machine (measured about 7 ns a point-step). Before
/// sub-chains were shared (issue 25) memory was the binding limit on every
/// shipped chain; shared fronts of long stacks fit in memory but take
/// minutes (GPT-2 XL, 1,000 blocks: 1.7e10 point-steps, 2 minutes), and
/// this keeps the default answer as fast as the rounded one there. Setting
/// `exact_memory` lifts it: asking for exactness means waiting for it.
pub const FRONTS_MAX_WORK: f64 = 1.5e9;

/// The work the exact fronts may take under `opts`: [`FRONTS_MAX_WORK`], or
/// no limit when `exact_memory` is set.
pub(crate) fn work_limit(opts: &SolveOptions) -> f64 {
    if opts.exact_memory.is_some() { f64::INFINITY } else { FRONTS_MAX_WORK }
}

/// The memory the exact fronts may take at `budget` with `slots` slots: the
/// slot table's ([`persistent::table_bytes_estimate`]) or
/// [`FRONTS_MIN_BYTES`], whichever is larger. O(L^2).
pub fn fronts_limit(chain: &Chain, budget: u64, slots: usize) -> u64 {
    persistent::table_bytes_estimate(&SlotChain::new(chain, Slots::new(budget, slots))).max(FRONTS_MIN_BYTES)
}

/// The memory the exact fronts may take beside the floating DP at `budget`
/// with `slots` slots: [`fronts_limit`] or the floating table's upper
/// estimate ([`floating::upper_estimate`]), whichever is larger (the fronts
/// are freed before the floating table is built, so the peak is no larger
/// than the floating DP's alone). O(L^2).
pub fn fronts_limit_beside_floating(chain: &Chain, budget: u64, slots: usize) -> u64 {
    fronts_limit(chain, budget, slots)
        .max(floating::upper_estimate_shared(chain, Slots::new(budget, slots)).table_bytes)
}

/// The memory the exact fronts may take under `opts`: its `exact_memory`
/// when set, else `default()` (one of the two functions above).
pub(crate) fn limit(opts: &SolveOptions, default: impl FnOnce() -> u64) -> u64 {
    opts.exact_memory.unwrap_or_else(default)
}

/// A persistent answer: exact, or the slot DP's when the fronts gave up.
pub(crate) struct Answer {
    pub ops: Vec<Op>,
    /// 1 when exact.
    pub slot_size: u64,
    /// The makespan the solver predicts.
    pub makespan: f64,
    /// Why it is exact or not, for `Solution::detail`.
    pub note: String,
}

/// The exact persistent optimum at `budget` from fronts of at most `limit`
/// bytes, with the number of breakpoints; `Ok(None)` when no persistent
/// schedule is at most `ceiling` (infinite: any), `Err` when the fronts gave
/// up. Time and memory: those of [`Fronts::build_bounded`]; the fronts are
/// freed before it returns.
pub(crate) fn exact(
    chain: &Chain,
    budget: u64,
    limit: u64,
    max_work: f64,
    ceiling: f64,
) -> Result<Option<(f64, Vec<Op>, usize)>, FrontsTooLarge> {
    let fronts = Fronts::build_guarded(chain, budget, limit, max_work, ceiling)?;
    Ok(fronts.sequence(budget).map(|ops| (fronts.makespan(budget), ops, fronts.points())))
}

/// Why an answer is exact, for the user.
pub(crate) fn exact_note(points: usize) -> String {
    format!("not rounded to slots: the persistent optimum from fronts of {points} breakpoints")
}

/// Why an answer is rounded, for the user, and what to do about it.
pub(crate) fn rounded_note(e: &FrontsTooLarge, opts: &SolveOptions) -> String {
    if let Some(work) = e.work {
        return format!(
            "not exact: the fronts of this {}-stage chain would take about {work:.1e} point-steps (more than the \
             {:.1e} allowed by default, about 10 s); set `--exact-memory SIZE` (`exact_memory=`) to wait for the \
             exact optimum",
            e.stages, e.max_work
        );
    }
    let allowed = match opts.exact_memory {
        Some(0) => return "not exact: exact answers are turned off (exact memory 0)".to_string(),
        Some(_) => "the exact memory allowed".to_string(),
        None => format!(
            "the most they may take by default: the {}-slot table's memory, at least {} MiB",
            opts.slots,
            FRONTS_MIN_BYTES >> 20
        ),
    };
    format!(
        "not exact: the fronts of this {}-stage chain would take more than {} ({}); allow them more \
         (`--exact-memory SIZE`, `exact_memory=`, at most {} on this machine) for the exact optimum",
        e.stages,
        format_size(e.limit),
        allowed,
        format_size(crate::guard::memory_limit())
    )
}

/// `solve(chain, budget, Algorithm::Persistent)`: the exact optimum when the
/// fronts fit ([`limit`]), else the slot DP at `opts.slots` slots; an
/// infeasible budget names [`min_budget`]'s. Errors: those of the slot DP's
/// checks.
pub(crate) fn persistent(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Answer, SolveError> {
    let slots = opts.slots.get();
    dp::Persistent::check(chain, slots)?;
    // The slot table is the fallback: refuse up front, as before the fronts,
    // a solve whose table could not be built.
    let table = persistent::table_bytes_estimate(&SlotChain::new(chain, Slots::new(budget, slots)));
    dp::check_memory(Algorithm::Persistent, table, chain.len(), slots)?;
    let infeasible =
        || SolveError::Infeasible { algorithm: Algorithm::Persistent, budget, min_budget: min_budget(chain, opts) };
    // An infeasible budget needs no separate check (O(L^3)): its fronts are
    // empty there, and the slot DP checks its own.
    match exact(chain, budget, limit(opts, || fronts_limit(chain, budget, slots)), work_limit(opts), f64::INFINITY) {
        Ok(Some((makespan, ops, points))) => Ok(Answer { ops, slot_size: 1, makespan, note: exact_note(points) }),
        Ok(None) => Err(infeasible()),
        Err(e) => {
            let (ops, slot_size, makespan) = match dp::solve_dp::<dp::Persistent>(chain, budget, slots, opts.progress) {
                Err(SolveError::Infeasible { .. }) => return Err(infeasible()),
                other => other?,
            };
            Ok(Answer { ops, slot_size, makespan, note: rounded_note(&e, opts) })
        }
    }
}

/// The smallest budget at which [`persistent`] returns a schedule: the exact
/// smallest peak of any persistent schedule when the fronts fit there (they
/// take least memory at small budgets), else the slot DP's smallest budget
/// ([`dp::min_budget`]). `None` when neither has one. O(L^3) plus one build
/// of the fronts.
pub fn min_budget(chain: &Chain, opts: &SolveOptions) -> Option<u64> {
    let slots = opts.slots.get();
    let min = dp::min_peak_exact::<dp::Persistent>(chain);
    match exact(chain, min, limit(opts, || fronts_limit(chain, min, slots)), work_limit(opts), f64::INFINITY) {
        Ok(Some(_)) => Some(min),
        _ => dp::min_budget::<dp::Persistent>(chain, slots),
    }
}
