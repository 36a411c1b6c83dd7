//! Fitting a slot-based DP to a budget by replay.
//!
//! The DPs round every size up to whole slots, so at a budget that is exactly
//! some schedule's peak they can never find that schedule or any as tight: on
//! gpt2-small-s1024-b8 at the peak of checkpoint_sequential with K = 2
//! (14562552776 bytes), persistent and floating with 500 slots give 479.06
//! against checkpoint_sequential's 469.85. The rounding is pessimistic, so a
//! table built a few slots *above* the budget often holds schedules that fit
//! the budget in bytes; replaying them tells which. [`fitted`] keeps the
//! fastest that fits, and `--algorithm auto` uses it.

use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::{Replay, simulate};
use crate::solve::dp::{self, SlotDp, SlotTable};
use crate::solve::{Progress, SolveError};

/// A schedule found by [`fitted`].
pub struct Fitted {
    /// The operations.
    pub ops: Vec<Op>,
    /// Their replay (peak within the budget asked).
    pub replay: Replay,
    /// Bytes per slot of the table.
    pub slot_size: u64,
    /// How many slots above the budget the table's schedule was taken (0: at
    /// the budget itself, the DP's own answer).
    pub slots_above: usize,
}

/// The fastest schedule `D` (persistent or floating) with `slots` slots
/// finds whose *replayed* peak fits `budget` bytes. One table is built with
/// slots of budget/`slots` bytes up to min(2L+4, S/4) slots above the budget
/// (rounding up costs at most one slot per value held at once, so 2L+4 at
/// most, and far fewer in practice: the fits found on the chains in
/// `chains/` were at most 43 slots up), and every budget of it from `budget`
/// upward whose schedule is faster than the best so far is replayed; the
/// fastest that fits in bytes wins, so the result is never slower than the
/// DP's own answer at `budget`. `Ok(None)` when none fits. The cost of one
/// solve of `D` with 1.25 S slots at most.
///
/// Errors: those of [`dp::SlotDp::check`], and [`SolveError::TooLarge`] when
/// the table would exceed the memory a solve may use.
pub fn fitted<D: SlotDp>(
    chain: &Chain,
    budget: u64,
    slots: usize,
    progress: Option<Progress>,
) -> Result<Option<Fitted>, SolveError> {
    let slot = (budget / slots.max(1) as u64).max(1);
    let base = (budget / slot) as usize;
    let extra = (2 * chain.len() + 4).min(slots / 4).max(4);
    let Some(table) = dp::table_up_to::<D>(chain, (base + extra) as u64 * slot, slot, slots, progress)? else {
        return Ok(None);
    };
    let top = table.slots().capacity;
    let mut best: Option<Fitted> = None;
    for m in base..=top {
        let time = table.makespan(m);
        if !time.is_finite() || best.as_ref().is_some_and(|b| time >= b.replay.makespan) {
            continue;
        }
        let ops = table.sequence(m).expect("finite makespan");
        let replay = simulate(chain, &ops).expect("the DPs' schedules are valid");
        if replay.peak_memory <= budget {
            best = Some(Fitted { ops, replay, slot_size: slot, slots_above: m - base });
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::solve::{Algorithm, SolveOptions, solve};

    /// Fitted by replay, the DP reaches schedules as tight as their exact
    /// peak, where the plain DP's rounding needs more memory.
    #[test]
    fn fitted_persistent_reaches_tight_budgets() {
        let c = crate::synthetic::network_like(8, 20);
        let sequential = solve(&c, u64::MAX, Algorithm::Sequential, &seg(2)).unwrap().schedule;
        let f = fitted::<dp::Persistent>(&c, sequential.peak_memory, 500, None).unwrap().unwrap();
        let (ops, replay) = (f.ops, f.replay);
        assert!(replay.peak_memory <= sequential.peak_memory);
        assert!(replay.makespan <= sequential.makespan + 1e-9);
        assert_eq!(simulate(&c, &ops).unwrap(), replay);
        // It is never slower than the plain DP at the same budget.
        if let Ok(plain) = solve(&c, sequential.peak_memory, Algorithm::Persistent, &SolveOptions::default()) {
            assert!(replay.makespan <= plain.schedule.makespan + 1e-9);
        }
    }

    fn seg(k: usize) -> SolveOptions<'static> {
        SolveOptions { segments: Some(k), ..SolveOptions::default() }
    }
}
