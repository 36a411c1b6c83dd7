//! Each chain solver family's limits, written once: its cost estimated from
//! the chain's length, the slot count and the budget before anything is
//! allocated or looped over, and a refusal ([`SolveError::TooLarge`]) naming
//! the estimate and one remedy when it would not finish in reasonable time or
//! fit in memory. Every public entry point of [`crate::solve`](mod@crate::solve) (`solve`,
//! `min_budget`, `any_min_budget`) checks its own input here before any
//! work, so front ends call no guard; the slot DPs ([`super::dp::SlotDp`])
//! check their stage count and their table's memory with the same functions.
//!
//! | family | limits (one message and one remedy each) |
//! |---|---|
//! | persistent, revolve | stages (16-bit indices), [`PERSISTENT_MAX_STEPS`], the table's memory |
//! | floating | [`crate::solve::floating::MAX_STAGES`], [`FLOATING_MAX_STEPS`], the tables' memory |
//! | exhaustive | [`EXHAUSTIVE_SOLVE_STAGES`], [`EXHAUSTIVE_MIN_BUDGET_STAGES`] |
//! | sequential, chen-greedy | [`CANDIDATE_SEARCH_MAX_STAGES`] |
//! | the smallest budget of any schedule | [`PERSISTENT_MAX_STEPS`] of min-peak passes |
//! | the exact fronts | `exact_memory` at most the machine's ([`crate::machine::memory_limit`]) |
//!
//! Estimates are counted in *steps*, the inner-loop iterations of each
//! algorithm, so that the same input gets the same verdict on every machine;
//! the limits are set from measurements on a 2-core machine (about 1.25 ns
//! per persistent step, 1 ns per floating step, with two threads), so that
//! anything allowed finishes within about ten minutes there. Every function
//! here is O(L) or less (the floating estimate is O(L^2) and only runs at
//! most [`floating::MAX_STAGES`] stages; the persistent one keys sub-chains
//! by content, O(L^2), up to [`crate::solve::distinct::ESTIMATE_MAX_STAGES`]
//! stages).
//!
//! Memory is checked against [`crate::machine::memory_limit`]: half the
//! machine's physical memory, and no more than half of what the process's
//! address-space limit (`ulimit -v`) leaves.

use crate::Chain;
use crate::machine::memory_limit;
use crate::size::format_size;
use crate::slots::Slots;
use crate::solve::{Algorithm, Remedy, SolveError, SolveOptions, baselines, exhaustive, floating, persistent};

/// The most steps a persistent-style DP (persistent, revolve) may take:
/// L^3 / 6 x (M + 2) for M budget slots (the min-peak pass and the table).
pub const PERSISTENT_MAX_STEPS: f64 = 5e11;
/// The most steps the floating DP may take ([`floating::upper_estimate`]).
pub const FLOATING_MAX_STEPS: f64 = 5e11;
/// Exhaustive search solves chains of at most this many stages (its state
/// space grows about 4x a stage: 11 s at 13 stages, about 40 s at 14).
pub const EXHAUSTIVE_SOLVE_STAGES: usize = exhaustive::MAX_STAGES;
/// Exhaustive search for the smallest budget (`min_peak`) at most this many
/// stages: it explores every memory state without a budget to prune them, 4x
/// slower than a solve (12 s at 12 stages, 52 s at 13, minutes at 14).
pub const EXHAUSTIVE_MIN_BUDGET_STAGES: usize = 12;

/// `sequential` without `--segments` and `chen-greedy` try O(L) candidate
/// schedules, each replayed in O(L), and hold them all (about 4 L^2 bytes):
/// at most this many stages (0.4 GB, about 10^8 steps).
pub const CANDIDATE_SEARCH_MAX_STAGES: usize = 10_000;

/// Refuses an [`SolveOptions::exact_memory`] above
/// [`crate::machine::memory_limit`] (half of this machine's memory, or of
/// what the address-space limit leaves): the exact fronts would grow until
/// an allocation failed and the process aborted, minutes later. Checked by
/// [`solve`] and [`min_budget`], and by [`SolveOptions::check`] where a front
/// end validates its options before running several solves. O(1).
pub(crate) fn exact_memory(opts: &SolveOptions) -> Result<(), SolveError> {
    let Some(asked) = opts.exact_memory else { return Ok(()) };
    let limit = memory_limit();
    if asked <= limit {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "exact memory {} ({asked} bytes) is more than this machine can give a solve: {} ({limit} bytes), half of \
             its memory or of what the process's address-space limit leaves",
            format_size(asked),
            format_size(limit)
        ),
        remedy: Remedy::ExactMemoryAtMost(limit),
    })
}

/// Refuses, before any work, a [`crate::solve::solve`] of `chain` at `budget`
/// with `algorithm` that would not finish or fit (see the module's limits),
/// or whose options [`SolveOptions::check`] refuses (an [`exact_memory`]
/// more than the machine has, too many micro-batches in flight).
/// `auto` is judged by what it would run. O(L^2) at most.
pub(crate) fn solve(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Result<(), SolveError> {
    opts.check()?;
    let len = chain.len();
    let m = Slots::new(budget, opts.slots.get()).capacity;
    match algorithm {
        Algorithm::Persistent | Algorithm::Revolve => {
            dp_stages(algorithm, len)?;
            let steps = if algorithm == Algorithm::Persistent {
                persistent_steps_shared(chain, budget, opts.slots.get())
            } else {
                persistent_steps(len, m)
            };
            dp_steps(algorithm, len, steps, PERSISTENT_MAX_STEPS, opts.slots.get(), true)
        }
        Algorithm::Floating => {
            dp_stages(algorithm, len)?;
            let steps = floating::upper_estimate_shared(chain, Slots::new(budget, opts.slots.get())).work as f64;
            dp_steps(algorithm, len, steps, FLOATING_MAX_STEPS, opts.slots.get(), true)
        }
        Algorithm::Exhaustive => exhaustive_solve(chain),
        Algorithm::Auto => solve(chain, budget, crate::solve::auto_choice(chain, budget, opts).algorithm, opts),
        Algorithm::Sequential if opts.segments.is_some() => Ok(()),
        Algorithm::Sequential | Algorithm::ChenGreedy => candidate_search(algorithm, len),
        _ => Ok(()),
    }
}

/// The stage limit of a slot DP (persistent, revolve, floating), with its one
/// message and remedy: the persistent and revolve tables index stages in 16
/// bits; the floating DP's tables grow as L^3 and its time as L^4. Checked
/// by [`solve`] and by each DP itself ([`super::dp::SlotDp::check`]). O(1).
pub(crate) fn dp_stages(algorithm: Algorithm, len: usize) -> Result<(), SolveError> {
    let (max, why, remedy) = match algorithm {
        Algorithm::Floating => {
            (floating::MAX_STAGES, " (its tables grow as L^3 and its time as L^4)", Remedy::Use(Algorithm::Persistent))
        }
        Algorithm::Revolve => (baselines::revolve::MAX_STAGES, "", Remedy::Use(Algorithm::ChenSqrt)),
        _ => (persistent::MAX_STAGES, "", Remedy::Use(Algorithm::ChenSqrt)),
    };
    if len <= max {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!("the {algorithm} DP handles at most {max} stages{why}; this chain has {len}"),
        remedy,
    })
}

/// Refuses a slot DP whose tables (`needed` bytes, for `stages` stages at
/// `slots` slots) exceed the memory a solve may use
/// ([`crate::machine::memory_limit`]), rather than letting the system kill it
/// midway. The floating DP's tables are L times the persistent one's, so its
/// remedy also names the persistent DP. O(1).
pub(crate) fn table_memory(algorithm: Algorithm, needed: u64, stages: usize, slots: usize) -> Result<(), SolveError> {
    let limit = memory_limit();
    if needed <= limit {
        return Ok(());
    }
    let remedy =
        if algorithm == Algorithm::Floating { Remedy::FewerSlotsOr(Algorithm::Persistent) } else { Remedy::FewerSlots };
    Err(SolveError::TooLarge {
        reason: format!(
            "the {algorithm} DP's tables would take about {} ({needed} bytes) for {stages} stages at {slots} slots, \
             over the {} it may use (half of this machine's memory)",
            format_size(needed),
            format_size(limit)
        ),
        remedy,
    })
}

/// Steps one cell of the min-peak pass counts for, against the DP table's
/// cells the limits are set in: it reads its table by columns. Measured on a
/// 2-core machine: `remat min-memory -a persistent` on a 1,000-stage chain
/// takes 35 s, about 41 passes of L^3 / 6 cells at 5 ns each.
pub const MIN_PEAK_CELL_STEPS: f64 = 4.0;

/// How many min-peak passes the slot-based smallest budget
/// ([`crate::slots::smallest_feasible_budget`]) runs at most with `slots`
/// slots: one exact probe, then, unless a slot is one byte throughout (the
/// probe answers), a doubling search and a bisection over bytes, together
/// about log2 of the largest budget it can reach (store-all's peak, at most
/// the sum of every size). O(L).
pub fn min_peak_passes(chain: &Chain, slots: usize) -> f64 {
    let total = size_sum(chain);
    if slots as u64 >= total {
        return 2.0;
    }
    2.0 + f64::from(u64::BITS - total.leading_zeros()) + 1.0
}

/// The sum of every size of `chain`, its loss included (at least store-all's
/// peak). O(L).
fn size_sum(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    (0..=n).fold(0u64, |t, l| {
        let stage = if l == 0 {
            0
        } else {
            chain.saved_size(l).saturating_add(chain.forward_overhead(l)).saturating_add(chain.backward_overhead(l))
        };
        t.saturating_add(chain.output_size(l)).saturating_add(chain.gradient_size(l)).saturating_add(stage)
    })
}

/// Steps the slot-based smallest budget (persistent, revolve, auto) takes
/// with `opts`: [`min_peak_passes`] passes at [`MIN_PEAK_CELL_STEPS`] steps
/// a cell, each pass over the split candidates of the distinct sub-chains
/// (issue 25: the min-peak pass fills each distinct one once; at most L^3 / 6,
/// every cell above [`crate::solve::distinct::ESTIMATE_MAX_STAGES`] stages).
/// O(L^2) up to that many stages, else O(L).
pub fn min_budget_steps(chain: &Chain, opts: &SolveOptions) -> f64 {
    let len = chain.len();
    let cells = if len + 1 > crate::solve::distinct::ESTIMATE_MAX_STAGES {
        cube(len) / 6.0
    } else {
        // Stages equal in bytes, at one byte a slot: the passes near the
        // smallest budget use small slots, where rounding merges nothing.
        let total = size_sum(chain).max(1);
        let sc = crate::slots::SlotChain::new(chain, Slots::new(total, usize::try_from(total).unwrap_or(usize::MAX)));
        (crate::solve::distinct::Distinct::new(&sc, true).splits() as f64).min(cube(len) / 6.0)
    };
    cells * MIN_PEAK_CELL_STEPS * min_peak_passes(chain, opts.slots.get())
}

/// Seconds `steps` take on the 2-core machine the limits were measured on
/// (about 1.25 ns a step): for a note before long work.
pub fn seconds_for(steps: f64) -> f64 {
    steps * 1.25e-9
}

/// Refuses, before any work, a [`crate::solve::min_budget`] of `chain` with
/// `algorithm` that would not finish. The slot-based minimum bisects over
/// budgets with the min-peak pass (L^3 / 6 cells at [`MIN_PEAK_CELL_STEPS`]
/// steps each) [`min_peak_passes`] times. O(L^2) at most.
pub(crate) fn min_budget(chain: &Chain, algorithm: Algorithm, opts: &SolveOptions) -> Result<(), SolveError> {
    opts.check()?;
    let len = chain.len();
    let rounds = f64::from(usize::BITS - opts.slots.get().leading_zeros()) + 1.0;
    match algorithm {
        Algorithm::Persistent | Algorithm::Revolve | Algorithm::Auto => {
            let steps = min_budget_steps(chain, opts);
            dp_steps(algorithm, len, steps, PERSISTENT_MAX_STEPS, opts.slots.get(), false)?;
            if algorithm == Algorithm::Auto
                && exhaustive::equivalent_stages(chain) <= crate::solve::AUTO_EXHAUSTIVE_STAGES
            {
                exhaustive_min_budget(chain)?;
            }
            Ok(())
        }
        Algorithm::Floating => {
            dp_stages(algorithm, len)?;
            let steps = floating::upper_estimate(len, 0).work as f64 * rounds;
            dp_steps(algorithm, len, steps, FLOATING_MAX_STEPS, opts.slots.get(), false)
        }
        Algorithm::Exhaustive => exhaustive_min_budget(chain),
        Algorithm::Sequential if opts.segments.is_some() => Ok(()),
        Algorithm::Sequential | Algorithm::ChenGreedy => candidate_search(algorithm, len),
        _ => Ok(()),
    }
}

/// Refuses, before any work, [`crate::solve::any_min_budget`] on `chain`
/// when it would not finish: its exact pass is the floating DP's min-peak
/// (L^4 / 24 cells) up to [`floating::MAX_STAGES`] stages, else the
/// persistent one (L^3 / 6), each cell [`MIN_PEAK_CELL_STEPS`] steps. O(1).
pub(crate) fn any_min_budget(chain: &Chain) -> Result<(), SolveError> {
    let len = chain.len();
    let cells = if len <= floating::MAX_STAGES { cube(len) * len as f64 / 24.0 } else { cube(len) / 6.0 };
    let steps = cells * MIN_PEAK_CELL_STEPS;
    if steps <= PERSISTENT_MAX_STEPS {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "the smallest budget of any schedule of a {len}-stage chain takes about {steps:.1e} steps to compute (the \
         limit is {PERSISTENT_MAX_STEPS:.0e}, about ten minutes)"
        ),
        remedy: Remedy::FewerStages,
    })
}

/// [`persistent_steps`] counting distinct sub-chains only (issue 25: the
/// persistent table and its min-peak pass fill each distinct one once, so
/// a stack of repeated blocks is not refused for cells it no longer fills):
/// the split candidates of the distinct cells at the solve's rounding, times
/// M + 2. O(L^2) up to [`crate::solve::distinct::ESTIMATE_MAX_STAGES`]
/// stages, above which every cell counts (O(1)).
fn persistent_steps_shared(chain: &Chain, budget: u64, slots: usize) -> f64 {
    let len = chain.len();
    let disc = Slots::new(budget, slots);
    if len + 1 > crate::solve::distinct::ESTIMATE_MAX_STAGES {
        return persistent_steps(len, disc.capacity);
    }
    let sc = crate::slots::SlotChain::new(chain, disc);
    let splits = crate::solve::distinct::Distinct::new(&sc, true).splits() as f64;
    splits.min(cube(len) / 6.0) * (disc.capacity as f64 + 2.0)
}

/// L^3 as a float (no overflow for any length).
fn cube(len: usize) -> f64 {
    (len as f64).powi(3)
}

/// Steps of the persistent DP at `m` budget slots: the min-peak pass and the
/// table, each about L^3 / 6 cells, the table's with a row of M + 1 budgets.
fn persistent_steps(len: usize, m: usize) -> f64 {
    cube(len) / 6.0 * (m as f64 + 2.0)
}

fn dp_steps(
    algorithm: Algorithm,
    len: usize,
    steps: f64,
    max: f64,
    slots: usize,
    slots_help: bool,
) -> Result<(), SolveError> {
    if steps <= max {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "the {algorithm} DP would take about {steps:.1e} steps for {len} stages at {slots} slots (the limit is \
         {max:.0e}, about ten minutes)"
        ),
        remedy: if slots_help { Remedy::FewerSlots } else { Remedy::FewerStages },
    })
}

/// Refuses exhaustive search for a solve of `chain` over
/// [`EXHAUSTIVE_SOLVE_STAGES`] stages, counted by
/// [`exhaustive::equivalent_stages`] (L without options). O(L).
pub(crate) fn exhaustive_solve(chain: &Chain) -> Result<(), SolveError> {
    exhaustive_stages(chain, EXHAUSTIVE_SOLVE_STAGES, "a solve")
}

/// Refuses exhaustive search for the smallest budget of `chain` over
/// [`EXHAUSTIVE_MIN_BUDGET_STAGES`] stages (as [`exhaustive_solve`]). O(L).
pub(crate) fn exhaustive_min_budget(chain: &Chain) -> Result<(), SolveError> {
    exhaustive_stages(chain, EXHAUSTIVE_MIN_BUDGET_STAGES, "the smallest budget")
}

/// The one message and remedy of exhaustive search's limit: `what` on a chain
/// over `max` stages, counted by [`exhaustive::equivalent_stages`]. O(L).
fn exhaustive_stages(chain: &Chain, max: usize, what: &str) -> Result<(), SolveError> {
    let (len, equivalent) = (chain.len(), exhaustive::equivalent_stages(chain));
    if equivalent <= max {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "exhaustive search for {what} is limited to chains of at most {max} stages (its state space grows about \
         4x a stage: {equivalent} stages would take minutes); this chain has {len}{}",
            options_note(len, equivalent)
        ),
        remedy: Remedy::Use(Algorithm::Floating),
    })
}

/// What a stage count in a refusal of exhaustive search means for a chain
/// with options: empty when `equivalent` (its
/// [`exhaustive::equivalent_stages`]) is its length `len`.
pub(crate) fn options_note(len: usize, equivalent: usize) -> String {
    if equivalent == len {
        return String::new();
    }
    format!(
        ", whose recording options give it as many memory states as {equivalent} stages without options (each held \
         activation also remembers its option)"
    )
}

fn candidate_search(algorithm: Algorithm, len: usize) -> Result<(), SolveError> {
    if len <= CANDIDATE_SEARCH_MAX_STAGES {
        return Ok(());
    }
    let hint = if algorithm == Algorithm::Sequential { " (with a given number of segments it is O(L))" } else { "" };
    Err(SolveError::TooLarge {
        reason: format!(
            "{algorithm} searches over about {len} candidate schedules of {len} stages each (about {:.1e} steps and {} \
         of candidates); remat does this for at most {CANDIDATE_SEARCH_MAX_STAGES} stages{hint}",
            (len as f64).powi(2),
            format_size((len as u64).saturating_mul(len as u64).saturating_mul(4))
        ),
        remedy: Remedy::Use(Algorithm::ChenSqrt),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stage;

    fn chain(len: usize) -> Chain {
        Chain::new("c", 10, vec![Stage::simple(1.0, 2.0, 10, 20); len], Stage::zero_loss()).unwrap()
    }

    #[test]
    fn persistent_is_refused_on_3000_stages_at_500_slots_but_not_at_100() {
        // Every stage different: no sub-chain is shared.
        let stages = (0..3000).map(|l| Stage::simple(1.0 + l as f64, 2.0, 10, 20)).collect();
        let c = Chain::new("c", 10, stages, Stage::zero_loss()).unwrap();
        let at = |c: &Chain, slots: usize| {
            let slots = std::num::NonZeroUsize::new(slots).unwrap();
            solve(c, 1 << 30, Algorithm::Persistent, &SolveOptions { slots, ..SolveOptions::default() })
        };
        let err = at(&c, 500).unwrap_err().to_string();
        assert!(err.contains("3000 stages at 500 slots") && err.contains("fewer memory slots"), "{err}");
        assert!(at(&c, 100).is_ok());
        // 3,000 identical stages: about 3 L distinct sub-chains (issue 25),
        // so the table it would fill is small enough.
        assert!(at(&chain(3000), 500).is_ok());
    }

    #[test]
    fn exhaustive_min_budget_stops_at_12_stages() {
        let opts = SolveOptions::default();
        assert!(min_budget(&chain(12), Algorithm::Exhaustive, &opts).is_ok());
        let err = min_budget(&chain(14), Algorithm::Exhaustive, &opts).unwrap_err().to_string();
        assert!(err.contains("at most 12 stages") && err.contains("this chain has 14"), "{err}");
        assert!(solve(&chain(14), 1 << 30, Algorithm::Exhaustive, &opts).is_ok());
    }

    #[test]
    fn exhaustive_search_has_one_message_and_one_remedy() {
        // Issue 26: the solve's refusal said "4x a stage" here and "3^L"
        // (with another remedy) in solve/mod.rs.
        let opts = SolveOptions::default();
        let solve_err = solve(&chain(15), 1 << 30, Algorithm::Exhaustive, &opts).unwrap_err();
        let min_err = min_budget(&chain(15), Algorithm::Exhaustive, &opts).unwrap_err();
        for e in [&solve_err, &min_err] {
            let SolveError::TooLarge { reason, remedy } = e else { panic!("{e:?}") };
            assert!(reason.contains("grows about 4x a stage") && reason.contains("this chain has 15"), "{reason}");
            assert_eq!(*remedy, Remedy::Use(Algorithm::Floating));
        }
    }

    #[test]
    fn the_dp_stage_limits_have_one_message_and_one_remedy() {
        // Issue 26: solve/dp.rs and guard.rs both checked these, with other
        // remedies.
        let persistent = dp_stages(Algorithm::Persistent, persistent::MAX_STAGES + 1).unwrap_err();
        let SolveError::TooLarge { reason, remedy } = persistent else { unreachable!() };
        assert!(reason.contains("the persistent DP handles at most 65533 stages"), "{reason}");
        assert_eq!(remedy, Remedy::Use(Algorithm::ChenSqrt));
        let floating = dp_stages(Algorithm::Floating, 501).unwrap_err();
        let SolveError::TooLarge { reason, remedy } = floating else { unreachable!() };
        assert!(reason.contains("at most 500 stages (its tables grow as L^3"), "{reason}");
        assert_eq!(remedy, Remedy::Use(Algorithm::Persistent));
        assert!(dp_stages(Algorithm::Floating, 500).is_ok());
        assert!(table_memory(Algorithm::Floating, 1, 10, 500).is_ok());
        let SolveError::TooLarge { remedy, .. } = table_memory(Algorithm::Floating, u64::MAX, 10, 500).unwrap_err()
        else {
            unreachable!()
        };
        assert_eq!(remedy, Remedy::FewerSlotsOr(Algorithm::Persistent));
    }

    #[test]
    fn the_smallest_budget_of_a_10000_stage_chain_is_refused_and_of_2000_allowed() {
        // Issue 27: `min-memory` ran 318 s at 2,000 stages and past 300 s at
        // 10,000; the estimate counted a tenth of the min-peak passes.
        let opts = SolveOptions::default();
        for algorithm in [Algorithm::Auto, Algorithm::Persistent] {
            assert!(min_budget(&chain(2000), algorithm, &opts).is_ok());
            let err = min_budget(&chain(10_000), algorithm, &opts).unwrap_err().to_string();
            assert!(err.contains("10000 stages"), "{err}");
        }
        assert!(any_min_budget(&chain(2000)).is_ok());
        assert!(matches!(any_min_budget(&chain(10_000)), Err(SolveError::TooLarge { .. })));
        // One byte a slot: the exact probe answers, two passes.
        assert_eq!(min_peak_passes(&chain(10), usize::MAX), 2.0);
        assert!(min_peak_passes(&chain(100), 500) > 10.0);
    }

    #[test]
    fn a_100000_stage_chain_is_refused_by_every_dp_at_once() {
        let c = chain(100_000);
        let opts = SolveOptions::default();
        for a in [Algorithm::Auto, Algorithm::Persistent, Algorithm::Floating, Algorithm::Revolve] {
            assert!(matches!(solve(&c, 1 << 30, a, &opts), Err(SolveError::TooLarge { .. })), "{a}");
        }
        assert!(matches!(any_min_budget(&c), Err(SolveError::TooLarge { .. })));
        assert!(solve(&c, 1 << 30, Algorithm::ChenSqrt, &opts).is_ok());
    }
}
