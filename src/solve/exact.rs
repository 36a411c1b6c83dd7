//! What `solve` answers for the persistent program: its optimum exact in
//! bytes ([`super::fronts`]) when the fronts fit in the memory the slot table
//! would take, else the slot DP's rounded answer, saying so; and [`choose`],
//! the one policy (with one tie rule) by which `persistent`, `floating`,
//! `auto` and micro-batches in flight keep the exact answer or the table's.
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
use crate::solve::{Algorithm, SolveError, SolveOptions, floating, limits, persistent};

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
        format_size(crate::machine::memory_limit())
    )
}

/// What the exact fronts gave ([`exact`]): the persistent optimum at the
/// budget (makespan, schedule, breakpoints), `None` when none is at most the
/// ceiling they were given, or why they gave up.
pub(crate) type Exact = Result<Option<(f64, Vec<Op>, usize)>, FrontsTooLarge>;

/// What [`choose`] keeps.
pub(crate) enum Choice<T> {
    /// The persistent optimum exact in bytes.
    Exact {
        /// Its makespan, as the fronts predict it.
        makespan: f64,
        /// Its operations.
        ops: Vec<Op>,
        /// Breakpoints of the fronts it came from, for the note.
        points: usize,
    },
    /// The slot table's answer.
    Table {
        /// The answer as the caller gave it.
        answer: T,
        /// Why the fronts did not answer, when they gave up.
        gave_up: Option<FrontsTooLarge>,
    },
    /// Neither has a schedule at the budget.
    Neither,
}

impl<T> Choice<T> {
    /// The note the kept answer carries (`Solution::detail`): [`exact_note`]
    /// for the exact one; [`rounded_note`] for the table's when the fronts
    /// gave up; `None` when the table's was kept for being as fast.
    pub(crate) fn note(&self, opts: &SolveOptions) -> Option<String> {
        match self {
            Choice::Exact { points, .. } => Some(exact_note(*points)),
            Choice::Table { gave_up: Some(e), .. } => Some(rounded_note(e, opts)),
            Choice::Table { gave_up: None, .. } | Choice::Neither => None,
        }
    }
}

/// True when makespan `t` is faster than `than` beyond the rounding of float
/// sums (a relative 1e-9, as the replay's check of a predicted makespan).
pub(crate) fn faster(t: f64, than: f64) -> bool {
    if !than.is_finite() {
        return t < than;
    }
    t < than - 1e-9 * than.abs().max(1.0)
}

/// The one selection policy (issue 26) between the persistent optimum exact
/// in bytes (`exact`, what [`exact`] gave) and a slot table's answer (`table`:
/// the answer and its makespan, `None` when the table has none or was not
/// built), used by every solve that may answer with the fronts: `persistent`
/// (plain, and with micro-batches in flight), `floating` and `auto`.
///
/// - Only one has a schedule: that one (the table's carries why the fronts
///   gave up, if they did).
/// - Both have one: the faster. **Tie rule:** the table's answer is kept
///   unless the exact one is [`faster`] beyond float rounding; the algorithm
///   asked for (or the DP `auto` chose) then names the schedule, and the
///   exact one replaces it only for a real gain.
///
/// A caller whose table is of the exact answer's own family (the persistent
/// DP) builds it only when the fronts gave up: the exact optimum is never
/// slower. O(1).
pub(crate) fn choose<T>(exact: Exact, table: Option<(T, f64)>) -> Choice<T> {
    match (exact, table) {
        (Ok(Some((makespan, ops, points))), Some((answer, time))) => {
            if faster(makespan, time) {
                Choice::Exact { makespan, ops, points }
            } else {
                Choice::Table { answer, gave_up: None }
            }
        }
        (Ok(Some((makespan, ops, points))), None) => Choice::Exact { makespan, ops, points },
        (Ok(None), Some((answer, _))) => Choice::Table { answer, gave_up: None },
        (Err(e), Some((answer, _))) => Choice::Table { answer, gave_up: Some(e) },
        (Ok(None) | Err(_), None) => Choice::Neither,
    }
}

/// `solve(chain, budget, Algorithm::Persistent)`: the exact optimum when the
/// fronts fit ([`limit`]), else the slot DP at `opts.slots` slots
/// ([`choose`]); an infeasible budget names [`min_budget`]'s. Errors: those
/// of the slot DP's checks.
pub(crate) fn persistent(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Answer, SolveError> {
    let slots = opts.slots.get();
    dp::Persistent::check(chain, slots)?;
    // The slot table is the fallback: refuse up front, as before the fronts,
    // a solve whose table could not be built.
    let table = persistent::table_bytes_estimate(&SlotChain::new(chain, Slots::new(budget, slots)));
    limits::table_memory(Algorithm::Persistent, table, chain.len(), slots)?;
    // An infeasible budget needs no separate check (O(L^3)): its fronts are
    // empty there, and the slot DP checks its own.
    let exact =
        exact(chain, budget, limit(opts, || fronts_limit(chain, budget, slots)), work_limit(opts), f64::INFINITY);
    let table = match &exact {
        Err(_) => match dp::solve_dp::<dp::Persistent>(chain, budget, slots, opts.progress) {
            Ok((ops, slot_size, makespan)) => Some(((ops, slot_size, makespan), makespan)),
            Err(SolveError::Infeasible { .. }) => None,
            Err(e) => return Err(e),
        },
        Ok(_) => None,
    };
    let choice = choose(exact, table);
    let note = choice.note(opts).unwrap_or_default();
    match choice {
        Choice::Exact { makespan, ops, .. } => Ok(Answer { ops, slot_size: 1, makespan, note }),
        Choice::Table { answer: (ops, slot_size, makespan), .. } => Ok(Answer { ops, slot_size, makespan, note }),
        Choice::Neither => Err(SolveError::Infeasible {
            algorithm: Algorithm::Persistent,
            budget,
            min_budget: min_budget(chain, opts),
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gave_up() -> FrontsTooLarge {
        FrontsTooLarge { limit: 1, bytes: 2, projected: false, stages: 3, done: 1, work: None, max_work: 1.0 }
    }

    /// Issue 26: one policy, one tie rule, for `persistent`, `floating`,
    /// `auto` and micro-batches in flight.
    #[test]
    fn the_table_is_kept_unless_the_exact_answer_is_faster_beyond_rounding() {
        let exact = |t: f64| -> Exact { Ok(Some((t, vec![Op::B(1)], 7))) };
        let kept = |c: Choice<&str>| match c {
            Choice::Exact { points, .. } => format!("exact {points}"),
            Choice::Table { answer, gave_up } => format!("{answer} {}", gave_up.is_some()),
            Choice::Neither => "neither".to_string(),
        };
        // Faster: the exact one.
        assert_eq!(kept(choose(exact(9.0), Some(("table", 10.0)))), "exact 7");
        // A tie, and a gain within float rounding: the table's.
        assert_eq!(kept(choose(exact(10.0), Some(("table", 10.0)))), "table false");
        assert_eq!(kept(choose(exact(10.0 - 1e-12), Some(("table", 10.0)))), "table false");
        assert_eq!(kept(choose(exact(11.0), Some(("table", 10.0)))), "table false");
        // Only one: that one; the table's says why the fronts gave up.
        assert_eq!(kept(choose(exact(10.0), None)), "exact 7");
        assert_eq!(kept(choose(Ok(None), Some(("table", 10.0)))), "table false");
        assert_eq!(kept(choose(Err(gave_up()), Some(("table", 10.0)))), "table true");
        assert_eq!(kept(choose::<&str>(Err(gave_up()), None)), "neither");
        assert_eq!(kept(choose::<&str>(Ok(None), None)), "neither");
        // The notes.
        let opts = SolveOptions::default();
        assert!(choose::<&str>(exact(1.0), None).note(&opts).unwrap().starts_with("not rounded to slots"));
        let rounded = choose(Err(gave_up()), Some(("table", 1.0))).note(&opts).unwrap();
        assert!(rounded.starts_with("not exact"), "{rounded}");
        assert_eq!(choose(exact(1.0), Some(("table", 1.0))).note(&opts), None);
        assert!(faster(1.0, f64::INFINITY) && !faster(f64::INFINITY, f64::INFINITY));
    }
}
