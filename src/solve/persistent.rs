//! The persistent dynamic program: Rotor's Algorithms 3 and 4 with the
//! corrections of `MODEL.md`.
//!
//! C(s, t, m) is the fastest persistent way to turn {a^{s-1}, delta^t} into
//! {delta^{s-1}} using at most m slots besides a^{s-1}. Either the chain starts
//! with F_all^s (then solve (s+1, t) with m - w_abar^s and finish with B^s), or
//! with F_ck^s F_none^{s+1} .. F_none^{s'-1}, which leaves a^{s'-1} stored while
//! (s', t) is solved with m - w_a^{s'-1}, after which (s, s'-1) remains.
//!
//! Corrections to the published recurrence:
//! - the F_all branch subtracts w_abar^s (the paper prints w_a^s);
//! - the F_all forward is checked with delta^t resident (w_d^t + w_abar^s +
//!   o_f^s), not delta^s;
//! - the F_none steps are checked only up to the split s' actually chosen (the
//!   paper's bound over every j < t rejects feasible splits).
//!
//! Complexity: O(S L^3) time and O(S L^2) memory for S slots, the (s, t) cells
//! of one anti-diagonal t - s = d filled in parallel (they only read shorter
//! diagonals). Cells are independent of the order of m, so zero sizes (m - 0 = m)
//! are harmless.

use rayon::prelude::*;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{SlotChain, Slots};

/// Choice codes: `NONE` infeasible, `ALL` starts with F_all^s, any other value
/// is the split s' of an F_ck^s start.
const NONE: u16 = 0;
const ALL: u16 = 1;

/// Longest chain the u16 choice codes can describe.
pub const MAX_STAGES: usize = u16::MAX as usize - 2;

/// The filled DP table for one chain and one discretization. Answers every
/// budget up to the one it was built for.
pub struct Table {
    sc: SlotChain,
    /// Row (s, t) at `(s - 1) * n + (t - 1)`; rows with s > t are empty.
    cost: Vec<Vec<f64>>,
    choice: Vec<Vec<u16>>,
}

impl Table {
    fn idx(&self, s: usize, t: usize) -> usize {
        (s - 1) * self.sc.n + (t - 1)
    }

    fn cost(&self, s: usize, t: usize) -> &[f64] {
        &self.cost[self.idx(s, t)]
    }

    /// Fills the table for budgets up to `sc.slots.budget` slots.
    /// `progress(done, total)` is called after each anti-diagonal.
    pub fn build(sc: SlotChain, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Table {
        let n = sc.n;
        let mut table = Table { cost: vec![Vec::new(); n * n], choice: vec![Vec::new(); n * n], sc };
        let total: u64 = (0..n as u64).map(|d| (n as u64 - d) * (d + 1)).sum();
        let mut done = 0;
        for d in 0..n {
            let rows: Vec<(Vec<f64>, Vec<u16>)> = (1..=n - d).into_par_iter().map(|s| table.row(s, s + d)).collect();
            for (i, (cost, choice)) in rows.into_iter().enumerate() {
                let k = table.idx(i + 1, i + 1 + d);
                table.cost[k] = cost;
                table.choice[k] = choice;
            }
            done += (n - d) as u64 * (d as u64 + 1);
            if let Some(p) = progress {
                p(done, total);
            }
        }
        table
    }

    /// Computes row (s, t) from the rows of shorter sub-chains.
    fn row(&self, s: usize, t: usize) -> (Vec<f64>, Vec<u16>) {
        let sc = &self.sc;
        let budget = sc.slots.budget;
        let mut cost = vec![f64::INFINITY; budget + 1];
        let mut choice = vec![NONE; budget + 1];
        let back = sc.backward_need(s);
        if s == t {
            let need = sc.forward_all_need(s, s).max(back);
            let c = sc.forward_time[s] + sc.backward_time[s];
            for m in need..=budget {
                cost[m] = c;
                choice[m] = ALL;
            }
            return (cost, choice);
        }
        // F_all^s, then (s+1, t) beside abar^s, then B^s.
        let need = sc.forward_all_need(s, t).max(back).max(sc.saved[s]);
        let fixed = sc.forward_time[s] + sc.backward_time[s];
        let sub = self.cost(s + 1, t);
        let w = sc.saved[s];
        for m in need..=budget {
            let c = fixed + sub[m - w];
            if c < cost[m] {
                cost[m] = c;
                choice[m] = ALL;
            }
        }
        // F_ck^s F_none^{s+1..s'-1}, then (s', t) beside a^{s'-1}, then (s, s'-1).
        let mut need_fwd = sc.forward_ck_need(s, t);
        let mut fwd_time = sc.forward_time[s];
        for split in s + 1..=t {
            let j = split - 1; // a^j = a^{s'-1} is the stored activation
            if j > s {
                need_fwd = need_fwd.max(sc.forward_none_need(j, t));
                fwd_time += sc.forward_time[j];
            }
            let w = sc.output[j];
            let need = need_fwd.max(w);
            let right = self.cost(split, t);
            let left = self.cost(s, j);
            for m in need..=budget {
                let c = fwd_time + right[m - w] + left[m];
                if c < cost[m] {
                    cost[m] = c;
                    choice[m] = split as u16;
                }
            }
        }
        (cost, choice)
    }

    /// The discretization the table was built with.
    pub fn slots(&self) -> Slots {
        self.sc.slots
    }

    /// Best makespan for a budget of `budget` slots (at most the table's), or
    /// infinity when infeasible.
    pub fn makespan(&self, budget: usize) -> f64 {
        let a0 = self.sc.output[0];
        if budget < a0 || budget > self.sc.slots.budget {
            return f64::INFINITY;
        }
        self.cost(1, self.sc.n)[budget - a0]
    }

    /// The operation sequence reaching [`Table::makespan`] for `budget` slots,
    /// or `None` when infeasible. O(length of the sequence).
    pub fn sequence(&self, budget: usize) -> Option<Vec<Op>> {
        if !self.makespan(budget).is_finite() {
            return None;
        }
        enum Task {
            Solve(usize, usize, usize),
            Emit(Op),
        }
        let sc = &self.sc;
        let mut ops = Vec::new();
        let mut stack = vec![Task::Solve(1, sc.n, budget - sc.output[0])];
        while let Some(task) = stack.pop() {
            let (s, t, m) = match task {
                Task::Emit(op) => {
                    ops.push(op);
                    continue;
                }
                Task::Solve(s, t, m) => (s, t, m),
            };
            match self.choice[self.idx(s, t)][m] {
                NONE => unreachable!("a finite cell always has a choice"),
                ALL => {
                    ops.push(Op::FAll(s));
                    stack.push(Task::Emit(Op::B(s)));
                    if s < t {
                        stack.push(Task::Solve(s + 1, t, m - sc.saved[s]));
                    }
                }
                split => {
                    let split = split as usize;
                    ops.push(Op::FCk(s));
                    ops.extend((s + 1..split).map(Op::FNone));
                    // Stack order: (split, t) runs first, then (s, split - 1).
                    stack.push(Task::Solve(s, split - 1, m));
                    stack.push(Task::Solve(split, t, m - sc.output[split - 1]));
                }
            }
        }
        Some(ops)
    }
}

/// The smallest peak, in slots and a^0 included, of any persistent sequence
/// under the rounding of `sc`: the min-max form of the same recurrence, so the
/// DP at budget M is feasible exactly when M >= this value. O(L^3).
pub fn min_peak_slots(sc: &SlotChain) -> usize {
    let n = sc.n;
    let mut p = vec![usize::MAX; (n + 1) * (n + 1)];
    let at = |s: usize, t: usize| s * (n + 1) + t;
    for d in 0..n {
        for s in 1..=n - d {
            let t = s + d;
            let back = sc.backward_need(s);
            let mut best = if s == t {
                sc.forward_all_need(s, s).max(back)
            } else {
                sc.forward_all_need(s, t).max(back).max(sc.saved[s].saturating_add(p[at(s + 1, t)]))
            };
            let mut need_fwd = sc.forward_ck_need(s, t);
            for split in s + 1..=t {
                let j = split - 1;
                if j > s {
                    need_fwd = need_fwd.max(sc.forward_none_need(j, t));
                }
                let cand = need_fwd.max(sc.output[j].saturating_add(p[at(split, t)])).max(p[at(s, j)]);
                best = best.min(cand);
            }
            p[at(s, t)] = best;
        }
    }
    sc.output[0].saturating_add(p[at(1, n)])
}

/// The smallest budget, in bytes, of any persistent sequence (exact, no slots).
pub fn min_peak_exact(chain: &Chain) -> u64 {
    let sc = SlotChain::new(chain, Slots::with_slot(u64::MAX, 1));
    min_peak_slots(&sc) as u64
}

/// True when the DP with `slots` slots finds a schedule at `budget` bytes.
pub fn feasible(chain: &Chain, budget: u64, slots: usize) -> bool {
    let disc = Slots::new(budget, slots);
    min_peak_slots(&SlotChain::new(chain, disc)) <= disc.budget
}

/// The smallest budget in bytes at which the DP with `slots` slots finds a
/// schedule (verified feasible), found by bisection above the exact minimum
/// [`min_peak_exact`]; slot rounding makes feasibility nearly but not exactly
/// monotone in the budget, so this is the smallest up to that rounding.
/// `None` if no budget works (fewer slots than values a schedule must hold).
/// O(L^3 log M).
pub fn min_budget(chain: &Chain, slots: usize) -> Option<u64> {
    crate::slots::smallest_feasible_budget(min_peak_exact(chain), slots, |budget| feasible(chain, budget, slots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::simulate::simulate;

    #[test]
    fn ample_memory_is_store_all() {
        let stages = (1..=4).map(|l| Stage::simple(l as f64, 1.0, 3, 4)).collect();
        let chain = Chain::new("c", 2, stages, Stage::zero_loss()).unwrap();
        let table = Table::build(SlotChain::new(&chain, Slots::new(1000, 1000)), None);
        let ops = table.sequence(1000).unwrap();
        assert_eq!(table.makespan(1000), chain.store_all_time());
        assert!(ops.iter().all(|op| matches!(op, Op::FAll(_) | Op::B(_))));
        assert_eq!(simulate(&chain, &ops).unwrap().makespan, chain.store_all_time());
    }

    #[test]
    fn min_peak_matches_table_threshold() {
        let stages = vec![Stage::simple(1.0, 1.0, 5, 9), Stage::simple(2.0, 1.0, 2, 7), Stage::simple(1.0, 3.0, 6, 6)];
        let chain = Chain::new("c", 3, stages, Stage::zero_loss()).unwrap();
        let p = min_peak_exact(&chain);
        let table = Table::build(SlotChain::new(&chain, Slots::new(100, 100)), None);
        let first = (0..=100).find(|&m| table.makespan(m).is_finite()).unwrap();
        assert_eq!(first as u64, p);
        let ops = table.sequence(first).unwrap();
        assert_eq!(simulate(&chain, &ops).unwrap().peak_memory, p);
    }
}
