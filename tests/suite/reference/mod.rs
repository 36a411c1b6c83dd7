//! The persistent DP as it was written before the optimisation of issue 8: the
//! straightforward triple loop over (s, t), the split s' and the memory m, with
//! a cost and a choice table of full rows. The optimised solver in
//! `src/solve/persistent.rs` must give the same makespans and, with the same
//! tie-breaking (the first candidate reaching the minimum, F_all before the
//! splits in increasing order), the same sequences.
//!
//! Shared by the tests (`mod reference;`) and the benchmark (`#[path]`), which
//! reports the speed ratio. Generic over the cost type so that a test can show
//! what f32 costs would change.
#![allow(dead_code)]

use std::ops::Add;

use remat::slots::SlotChain;
use remat::{Chain, Op};

/// Peak memory of storing everything (F_all everywhere), in bytes.
pub fn store_all_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
    remat::simulate(chain, &ops).expect("store-all is valid").peak_memory
}

/// The arithmetic the table needs.
pub trait Cost: Copy + PartialOrd + PartialEq + Add<Output = Self> + Send + Sync {
    /// Infinity (an infeasible cell).
    const INF: Self;
    /// A time of the chain in this type.
    fn of(x: f64) -> Self;
}

impl Cost for f64 {
    const INF: f64 = f64::INFINITY;
    fn of(x: f64) -> f64 {
        x
    }
}

impl Cost for f32 {
    const INF: f32 = f32::INFINITY;
    fn of(x: f64) -> f32 {
        x as f32
    }
}

const NONE: u16 = 0;
const ALL: u16 = 1;

/// The filled reference table.
pub struct Reference<C = f64> {
    sc: SlotChain,
    cost: Vec<Vec<C>>,
    choice: Vec<Vec<u16>>,
}

impl<C: Cost> Reference<C> {
    fn idx(&self, s: usize, t: usize) -> usize {
        (s - 1) * self.sc.n + (t - 1)
    }

    /// Fills every row (s, t), s <= t, by increasing t - s, one cell at a time.
    pub fn build(sc: SlotChain) -> Self {
        let n = sc.n;
        let mut table = Reference { cost: vec![Vec::new(); n * n], choice: vec![Vec::new(); n * n], sc };
        for d in 0..n {
            for s in 1..=n - d {
                let (cost, choice) = table.row(s, s + d);
                let k = table.idx(s, s + d);
                table.cost[k] = cost;
                table.choice[k] = choice;
            }
        }
        table
    }

    fn row(&self, s: usize, t: usize) -> (Vec<C>, Vec<u16>) {
        let sc = &self.sc;
        let budget = sc.slots.capacity;
        let mut cost = vec![C::INF; budget + 1];
        let mut choice = vec![NONE; budget + 1];
        let back = sc.backward_need(s);
        if s == t {
            let need = sc.forward_all_need(s, s).max(back);
            let c = C::of(sc.forward_time[s]) + C::of(sc.backward_time[s]);
            for m in need..=budget {
                cost[m] = c;
                choice[m] = ALL;
            }
            return (cost, choice);
        }
        let need = sc.forward_all_need(s, t).max(back).max(sc.saved[s]);
        let fixed = C::of(sc.forward_time[s]) + C::of(sc.backward_time[s]);
        let sub = &self.cost[self.idx(s + 1, t)];
        let w = sc.saved[s];
        for m in need..=budget {
            let c = fixed + sub[m - w];
            if c < cost[m] {
                cost[m] = c;
                choice[m] = ALL;
            }
        }
        let mut need_fwd = sc.forward_ck_need(s, t);
        let mut fwd_time = C::of(sc.forward_time[s]);
        for split in s + 1..=t {
            let j = split - 1;
            if j > s {
                need_fwd = need_fwd.max(sc.forward_none_need(j, t));
                fwd_time = fwd_time + C::of(sc.forward_time[j]);
            }
            let w = sc.output[j];
            let need = need_fwd.max(w);
            let right = &self.cost[self.idx(split, t)];
            let left = &self.cost[self.idx(s, j)];
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

    /// Best makespan at `budget` slots (a^0 included), infinity if infeasible.
    pub fn makespan(&self, m_slots: usize) -> C {
        let a0 = self.sc.output[0];
        if m_slots < a0 || m_slots > self.sc.slots.capacity {
            return C::INF;
        }
        self.cost[self.idx(1, self.sc.n)][m_slots - a0]
    }

    /// The sequence reaching [`Reference::makespan`], `None` if infeasible.
    pub fn sequence(&self, m_slots: usize) -> Option<Vec<Op>> {
        if self.makespan(m_slots) == C::INF {
            return None;
        }
        enum Task {
            Solve(usize, usize, usize),
            Emit(Op),
        }
        let sc = &self.sc;
        let mut ops = Vec::new();
        let mut stack = vec![Task::Solve(1, sc.n, m_slots - sc.output[0])];
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
                    ops.push(Op::FAll(s, 0));
                    stack.push(Task::Emit(Op::B(s)));
                    if s < t {
                        stack.push(Task::Solve(s + 1, t, m - sc.saved[s]));
                    }
                }
                split => {
                    let split = split as usize;
                    ops.push(Op::FCk(s));
                    ops.extend((s + 1..split).map(Op::FNone));
                    stack.push(Task::Solve(s, split - 1, m));
                    stack.push(Task::Solve(split, t, m - sc.output[split - 1]));
                }
            }
        }
        Some(ops)
    }
}
