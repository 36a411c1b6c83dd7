//! `revolve`: the optimal strategy of the automatic-differentiation (AD) model
//! made valid for this one, as the Rotor paper's "revolve" baseline (and
//! Gruslys et al.'s appendix C).
//!
//! In the AD model only plain activations a^l are kept as checkpoints, and the
//! backward of stage l is run by re-running its forward from a^{l-1}. Here that
//! reversal is `F_all^l B^l`, so a schedule of this family is built by the
//! recursion, for the sub-chain s..=t with a^{s-1} stored and delta^t held:
//! - s = t: `F_all^s B^s`;
//! - s < t: `F_ck^s F_none^{s+1} .. F_none^{s'-1}` (advance to a^{s'-1} and
//!   keep it as a checkpoint), then s'..=t beside it, then s..=s'-1,
//!
//! which is Griewank and Walther's binomial-checkpointing recursion with
//! heterogeneous times and real sizes. No stage is ever recorded before its
//! backward is due, so every forward runs at least twice except the loss's.
//!
//! What this module optimizes, exactly: the makespan over every schedule of
//! that recursion (every choice of splits s'), subject to the peak memory of
//! the schedule, as the simulator counts it (gradients, overheads and a^0
//! included), fitting the budget with sizes rounded up to slots of
//! budget/S bytes as in the persistent DP. It is the persistent DP of
//! [`crate::solve::persistent`] without its `F_all`-first branch, so it never
//! beats `persistent` at the same slots. O(S L^3) time, O(S L^2) memory.

use rayon::prelude::*;

use super::BaselineSchedule;
use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{SlotChain, Slots};
use crate::solve::{SolveError, SolveOptions};

/// Longest chain the u16 split codes can describe.
pub const MAX_STAGES: usize = u16::MAX as usize - 2;

/// The filled table for one chain and one discretization.
pub struct Table {
    sc: SlotChain,
    /// cost[(s-1) n + (t-1)][m]: fastest makespan of sub-chain s..=t with m
    /// slots besides a^{s-1}; infinity when infeasible.
    cost: Vec<Vec<f64>>,
    /// The split s' reaching it (0 for the s = t leaf or infeasible).
    split: Vec<Vec<u16>>,
}

impl Table {
    /// The discretization the table was built with.
    pub fn slots(&self) -> Slots {
        self.sc.slots
    }

    fn at(&self, s: usize, t: usize) -> usize {
        (s - 1) * self.sc.n + (t - 1)
    }

    /// Fills the table for every budget up to `sc.slots.capacity` slots, one
    /// anti-diagonal t - s at a time (cells of a diagonal in parallel).
    pub fn build(sc: SlotChain, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Table {
        let n = sc.n;
        let mut table = Table { cost: vec![Vec::new(); n * n], split: vec![Vec::new(); n * n], sc };
        for d in 0..n {
            let rows: Vec<_> = (1..=n - d).into_par_iter().map(|s| table.row(s, s + d)).collect();
            for (i, (cost, split)) in rows.into_iter().enumerate() {
                let k = table.at(i + 1, i + 1 + d);
                table.cost[k] = cost;
                table.split[k] = split;
            }
            if let Some(p) = progress {
                p(d as u64 + 1, n as u64);
            }
        }
        table
    }

    fn row(&self, s: usize, t: usize) -> (Vec<f64>, Vec<u16>) {
        let sc = &self.sc;
        let budget = sc.slots.capacity;
        let mut cost = vec![f64::INFINITY; budget + 1];
        let mut split = vec![0u16; budget + 1];
        if s == t {
            let need = sc.forward_all_need(s, s).max(sc.backward_need(s));
            cost.iter_mut().skip(need).for_each(|c| *c = sc.forward_time[s] + sc.backward_time[s]);
            return (cost, split);
        }
        let (mut need_fwd, mut fwd_time) = (sc.forward_ck_need(s, t), sc.forward_time[s]);
        for cut in s + 1..=t {
            let kept = cut - 1; // a^{cut-1} is the new checkpoint
            if kept > s {
                need_fwd = need_fwd.max(sc.forward_none_need(kept, t));
                fwd_time += sc.forward_time[kept];
            }
            let w = sc.output[kept];
            let (right, left) = (&self.cost[self.at(cut, t)], &self.cost[self.at(s, kept)]);
            for m in need_fwd.max(w)..=budget {
                let c = fwd_time + right[m - w] + left[m];
                if c < cost[m] {
                    cost[m] = c;
                    split[m] = cut as u16;
                }
            }
        }
        (cost, split)
    }

    /// Best makespan with `m_slots` slots in all (a^0 included), or infinity.
    pub fn makespan(&self, m_slots: usize) -> f64 {
        match m_slots.checked_sub(self.sc.output[0]) {
            Some(m) if m_slots <= self.sc.slots.capacity => self.cost[self.at(1, self.sc.n)][m],
            _ => f64::INFINITY,
        }
    }

    /// The schedule reaching [`Table::makespan`]`(m_slots)`, or `None` when
    /// infeasible. O(length of the schedule).
    pub fn sequence(&self, m_slots: usize) -> Option<Vec<Op>> {
        if !self.makespan(m_slots).is_finite() {
            return None;
        }
        let sc = &self.sc;
        let mut ops = Vec::new();
        // Sub-chains still to run, the next on top: (s, t, slots besides a^{s-1}).
        let mut todo = vec![(1, sc.n, m_slots - sc.output[0])];
        while let Some((s, t, m)) = todo.pop() {
            if s == t {
                ops.extend([Op::FAll(s, 0), Op::B(s)]);
                continue;
            }
            let cut = self.split[self.at(s, t)][m] as usize;
            ops.push(Op::FCk(s));
            ops.extend((s + 1..cut).map(Op::FNone));
            todo.push((s, cut - 1, m));
            todo.push((cut, t, m - sc.output[cut - 1]));
        }
        Some(ops)
    }
}

/// The smallest peak, in slots and a^0 included, of any schedule of the
/// family under the rounding of `sc`: the min-max form of the recurrence, so
/// the table at budget M is feasible exactly when M >= this value. O(L^3).
pub fn min_peak_slots(sc: &SlotChain) -> usize {
    crate::solve::persistent::min_peak_of_family(sc, false)
}

/// Bytes of the table [`Table::build`] fills for `sc`: one row of an `f64`
/// cost and a `u16` split per budget in slots, for every (s, t) with s <= t.
/// O(1).
pub fn table_bytes_estimate(sc: &SlotChain) -> u64 {
    let cells = (sc.n as u64) * (sc.n as u64 + 1) / 2;
    cells.saturating_mul((sc.slots.capacity as u64).saturating_add(1)).saturating_mul(10)
}

/// The revolve schedule of `chain` under `budget` bytes with `opts.slots.get()`
/// (through the shared slot-DP path, `solve::dp`).
pub fn schedule(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<BaselineSchedule, SolveError> {
    let (ops, slot_size, makespan) =
        crate::solve::dp::solve_dp::<crate::solve::dp::Revolve>(chain, budget, opts.slots.get(), opts.progress)?;
    Ok(BaselineSchedule { ops, makespan, slot_size, detail: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{simulate, simulate_within};
    use crate::solve::Algorithm;
    use crate::solve::dp::{self, Revolve};
    use crate::solve::solve;
    use crate::synthetic::{Rng, small_chain};

    /// Every schedule of the family for sub-chain s..=t, by brute force.
    fn family(s: usize, t: usize) -> Vec<Vec<Op>> {
        if s == t {
            return vec![vec![Op::FAll(s, 0), Op::B(s)]];
        }
        let mut out = Vec::new();
        for cut in s + 1..=t {
            let mut prefix = vec![Op::FCk(s)];
            prefix.extend((s + 1..cut).map(Op::FNone));
            for right in family(cut, t) {
                for left in family(s, cut - 1) {
                    out.push([prefix.clone(), right.clone(), left].concat());
                }
            }
        }
        out
    }

    /// Slots of one byte at any budget (and for the smallest-budget search).
    fn exact() -> SolveOptions<'static> {
        SolveOptions { slots: std::num::NonZeroUsize::MAX, ..SolveOptions::default() }
    }

    /// With exact slots, revolve is the optimum of its family (found by
    /// enumerating it), never beats persistent, and its smallest budget is
    /// the family's smallest peak.
    #[test]
    fn optimal_over_its_family() {
        let mut rng = Rng::new(7);
        for i in 0..400 {
            let c = small_chain(&mut rng, 1 + i % 5, 8, 5);
            let replays: Vec<_> = family(1, c.len() + 1).iter().map(|ops| simulate(&c, ops).unwrap()).collect();
            let min_peak = replays.iter().map(|r| r.peak_memory).min().unwrap();
            assert_eq!(dp::min_budget::<Revolve>(&c, usize::MAX), Some(min_peak), "{c:?}");
            let top = replays.iter().map(|r| r.peak_memory).max().unwrap();
            for budget in min_peak.saturating_sub(1)..=top {
                let brute =
                    replays.iter().filter(|r| r.peak_memory <= budget).map(|r| r.makespan).min_by(f64::total_cmp);
                match solve(&c, budget, Algorithm::Revolve, &exact()) {
                    Ok(sol) => {
                        assert_eq!(Some(sol.schedule.makespan), brute, "{c:?} at {budget}");
                        simulate_within(&c, &sol.schedule.operations, budget).unwrap();
                        let p = solve(&c, budget, Algorithm::Persistent, &exact()).unwrap();
                        assert!(p.schedule.makespan <= sol.schedule.makespan + 1e-9);
                    }
                    Err(SolveError::Infeasible { min_budget, .. }) => {
                        assert_eq!(brute, None, "{c:?} at {budget}");
                        assert_eq!(min_budget, Some(min_peak));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }

    #[test]
    fn slots_min_budget_is_feasible() {
        let c = crate::synthetic::network_like(3, 12);
        let m = dp::min_budget::<Revolve>(&c, 50).unwrap();
        assert!(dp::feasible::<Revolve>(&c, m, 50));
        assert!(m >= dp::min_peak_exact::<dp::Persistent>(&c));
        let sol = solve(
            &c,
            m,
            Algorithm::Revolve,
            &SolveOptions { slots: std::num::NonZeroUsize::new(50).unwrap(), ..SolveOptions::default() },
        )
        .unwrap();
        assert!(sol.schedule.peak_memory <= m);
        // Every forward but the loss's runs at least twice.
        let forwards = sol.schedule.operations.iter().filter(|op| op.is_forward()).count();
        assert!(forwards > 2 * c.len());
    }
}
