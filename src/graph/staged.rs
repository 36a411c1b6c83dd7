//! Schedules in Checkmate's staged form (R, S) and the operations they run.
//!
//! Stage `t` is where node `t` is computed for the first time (frontier
//! advancing). `R[t][i]` (i <= t): node `i` is computed in stage `t`, at most
//! once, in index order. `S[t][i]` (i < t): node `i`'s value is held from
//! stage `t-1` into stage `t`. FREE follows from R and S (Checkmate eq. 5): a
//! value is freed after the last node of the stage that reads it, unless it is
//! held into the next stage.
//!
//! [`Staged::operations`] turns (R, S) into `compute`/`free` operations (Checkmate
//! Alg. 1, with values that a stage does not use freed when it starts);
//! [`Staged::accounting`] evaluates the MILP's own memory variables U on it.

use crate::graph::{CheckmateGraph, GraphOp};

/// A schedule in staged form. Row `t` of `r` has `t + 1` entries with
/// `r[t][t] = true`; row `t` of `s` has `t` entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// `r[t][i]`: node `i` is computed in stage `t`.
    pub r: Vec<Vec<bool>>,
    /// `s[t][i]`: node `i` is held from stage `t-1` into stage `t`.
    pub s: Vec<Vec<bool>>,
}

/// The last node that reads node `i` (None when nothing reads it). The
/// baselines hold `i` only up to this stage; an optimal schedule may hold it
/// longer (a user of `i` recomputed in a later stage reads it), so the MILP
/// does not use this as a bound.
pub fn last_use(graph: &CheckmateGraph, i: usize) -> Option<usize> {
    graph.users(i).last().copied()
}

/// The MILP's view of a staged schedule's memory (Checkmate eqs. 2-5).
#[derive(Clone, Debug, PartialEq)]
pub struct Accounting {
    /// `u[t][k]`: bytes in use right after node `k` in stage `t` (whether or
    /// not it is computed), before the frees that follow it; the input
    /// excluded.
    pub u: Vec<Vec<u64>>,
    /// The largest `u[t][k]` plus node `k`'s transient when computed, plus the
    /// input: what the MILP checks against the budget.
    pub peak: u64,
}

impl Staged {
    /// Only the frontier: `R = I`, `S = 0` (not a valid schedule by itself
    /// unless the graph has no edges; see [`Staged::complete`]).
    pub fn frontier(n: usize) -> Staged {
        let r = (0..n).map(|t| (0..=t).map(|i| i == t).collect()).collect();
        let s = (0..n).map(|t| vec![false; t]).collect();
        Staged { r, s }
    }

    /// Number of nodes (= stages).
    pub fn len(&self) -> usize {
        self.r.len()
    }

    /// Always false for a schedule of a (non-empty) graph.
    pub fn is_empty(&self) -> bool {
        self.r.is_empty()
    }

    /// Whether node `i` is held into stage `t + 1` (false after the last stage).
    pub fn held_next(&self, t: usize, i: usize) -> bool {
        t + 1 < self.len() && i <= t && self.s[t + 1][i]
    }

    /// Whether node `i` is held into stage `t`.
    pub fn held(&self, t: usize, i: usize) -> bool {
        i < t && self.s[t][i]
    }

    /// Whether node `i` is actually evaluated in stage `t`: asked for by R and
    /// not already held (holding and recomputing a value is never useful).
    pub fn evaluates(&self, t: usize, i: usize) -> bool {
        i <= t && self.r[t][i] && !self.held(t, i)
    }

    /// The staged schedule that holds node `i` into stage `t` when `keep(t, i)`
    /// and a node of stage `t` or later still reads it, and recomputes
    /// everything else where needed (the checkpoint-based baselines).
    /// O(n (n + |E|)).
    pub fn keeping(graph: &CheckmateGraph, keep: impl Fn(usize, usize) -> bool) -> Staged {
        let n = graph.len();
        let mut staged = Staged::frontier(n);
        for t in 1..n {
            for i in 0..t {
                staged.s[t][i] = keep(t, i) && last_use(graph, i).is_some_and(|last| last >= t);
            }
        }
        staged.complete(graph);
        staged
    }

    /// Makes R consistent with S: two-phase rounding's second phase
    /// (Checkmate MLSys Alg. 2). First every held value is computed or held in
    /// the stage before (1c), then, scanning each stage from right to left,
    /// every input of a computed node that is neither held nor computed is
    /// computed too (1b). R only gains entries, each one forced by a
    /// constraint, so R is the cheapest completion of S. O(n (n + |E|)).
    pub fn complete(&mut self, graph: &CheckmateGraph) {
        let n = self.len();
        for t in 1..n {
            for i in 0..t {
                if self.s[t][i] && !self.r[t - 1][i] && !self.held(t - 1, i) {
                    self.r[t - 1][i] = true;
                }
            }
        }
        for t in 0..n {
            for j in (0..=t).rev() {
                if self.r[t][j] {
                    for &i in &graph.node(j).inputs {
                        if !self.held(t, i) {
                            self.r[t][i] = true;
                        }
                    }
                }
            }
        }
    }

    /// Sum of `C_i R[t][i]`: the MILP's objective for this schedule.
    pub fn cost(&self, graph: &CheckmateGraph) -> f64 {
        (0..self.len()).map(|t| (0..=t).filter(|&i| self.r[t][i]).map(|i| graph.node(i).cost).sum::<f64>()).sum()
    }

    /// Checkmate's FREE_{t,i,k} (eq. 5) for the edge `i -> k`: node `k` is
    /// computed in stage `t`, `i` is not held into stage `t + 1`, and no later
    /// node of the stage reads `i`.
    pub fn frees(&self, graph: &CheckmateGraph, t: usize, i: usize, k: usize) -> bool {
        self.r[t][k] && !self.held_next(t, i) && !graph.users(i).iter().any(|&j| j > k && j <= t && self.r[t][j])
    }

    /// The MILP's memory variables for this schedule (eqs. 2-3). O(n (n + |E|)).
    pub fn accounting(&self, graph: &CheckmateGraph) -> Accounting {
        let n = self.len();
        let size = |i: usize| graph.node(i).size;
        let mut u = Vec::with_capacity(n);
        let mut peak = 0u64;
        for t in 0..n {
            // Signed: an inconsistent (R, S) could free what it never counted.
            let mut mem: i128 = (0..t).filter(|&i| self.s[t][i]).map(|i| size(i) as i128).sum();
            let mut row = Vec::with_capacity(t + 1);
            for k in 0..=t {
                if k > 0 {
                    let prev = k - 1;
                    for &i in &graph.node(prev).inputs {
                        if self.frees(graph, t, i, prev) {
                            mem -= size(i) as i128;
                        }
                    }
                }
                if self.r[t][k] {
                    mem += size(k) as i128;
                }
                let here = mem.max(0) as u64;
                row.push(here);
                if self.r[t][k] {
                    peak = peak.max(here + graph.node(k).overhead);
                }
            }
            u.push(row);
        }
        Accounting { u, peak: peak + graph.input_size() }
    }

    /// The `compute`/`free` operations (Checkmate Alg. 1, its execution
    /// plan): stage by stage, nodes in index order, each value freed right
    /// after the last node of its stage that reads it unless it is held into
    /// the next stage; a value held into a stage that does not read it and
    /// does not pass it on is freed when the stage starts. The final node is never freed. Memory after every compute
    /// is at most the MILP's `U` there. O(n (n + |E|) d) for maximum degree d.
    pub fn operations(&self, graph: &CheckmateGraph) -> Vec<GraphOp> {
        let n = self.len();
        let last = n - 1;
        let mut resident = vec![false; n];
        let mut ops = Vec::new();
        for t in 0..n {
            let read_in_stage =
                |i: usize, after: usize| graph.users(i).iter().any(|&j| j > after && j <= t && self.evaluates(t, j));
            for (i, held) in resident.iter_mut().enumerate().take(t) {
                if *held && !self.held_next(t, i) && i != last && !read_in_stage(i, i) {
                    ops.push(GraphOp::Free(i));
                    *held = false;
                }
            }
            for k in 0..=t {
                if !self.evaluates(t, k) || resident[k] {
                    continue;
                }
                ops.push(GraphOp::Compute(k));
                resident[k] = true;
                for i in graph.node(k).inputs.iter().copied().chain(std::iter::once(k)) {
                    if resident[i] && i != last && !self.held_next(t, i) && !read_in_stage(i, k) {
                        ops.push(GraphOp::Free(i));
                        resident[i] = false;
                    }
                }
            }
            for (i, held) in resident.iter_mut().enumerate().take(t + 1) {
                if *held && i != last && !self.held_next(t, i) {
                    ops.push(GraphOp::Free(i));
                    *held = false;
                }
            }
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::simulate::simulate;
    use crate::graph::{CheckmateNode, GraphOp};

    /// Checkmate's linear graph with 2 forward nodes: 0 -> 1 -> 2 -> 3 -> 4,
    /// skips 0 -> 4 and 1 -> 3 (forward node to its gradient node).
    fn linear2() -> CheckmateGraph {
        let inputs = [vec![], vec![0], vec![1], vec![1, 2], vec![0, 3]];
        let nodes = inputs
            .iter()
            .enumerate()
            .map(|(i, ins)| CheckmateNode {
                name: format!("n{i}"),
                cost: 1.0,
                size: 1,
                overhead: 0,
                inputs: ins.clone(),
            })
            .collect();
        CheckmateGraph::new("linear2", 0, nodes).unwrap()
    }

    #[test]
    fn keeping_everything_is_checkpoint_all() {
        let g = linear2();
        let staged = Staged::keeping(&g, |_, _| true);
        assert_eq!(staged.cost(&g), 5.0, "every node once");
        let ops = staged.operations(&g);
        use GraphOp::{Compute as C, Free as F};
        assert_eq!(ops, [C(0), C(1), C(2), C(3), F(1), F(2), C(4), F(0), F(3)]);
        let replay = simulate(&g, &ops).unwrap();
        assert_eq!(replay.makespan, 5.0);
        assert_eq!(replay.peak_memory, 4);
        // The MILP counts the same here (no spurious values to free early).
        assert_eq!(staged.accounting(&g).peak, 4);
    }

    #[test]
    fn keeping_nothing_recomputes_and_completion_is_minimal() {
        let g = linear2();
        let staged = Staged::keeping(&g, |_, _| false);
        let replay = simulate(&g, &staged.operations(&g)).unwrap();
        assert_eq!(replay.makespan, staged.cost(&g));
        assert_eq!(staged.r[2], [true, true, true], "stage 2 recomputes n0 and n1 for n2");
        assert_eq!(staged.r[4], [true; 5], "n4 needs n0 and n3, n3 needs n1 and n2");
        assert_eq!(staged.cost(&g), 1.0 + 2.0 + 3.0 + 4.0 + 5.0);
        assert!(replay.peak_memory <= staged.accounting(&g).peak);
    }

    #[test]
    fn phase_one_computes_held_values() {
        let g = linear2();
        let mut staged = Staged::frontier(5);
        staged.s[3][0] = true; // hold n0 into stage 3: it must exist at the end of stage 2
        staged.complete(&g);
        assert!(staged.r[2][0]);
        assert!(simulate(&g, &staged.operations(&g)).is_ok());
    }

    #[test]
    fn any_completed_schedule_plans_within_its_milp_accounting() {
        // Random graphs (each node reads its predecessor and maybe an earlier
        // one), random sizes and a random S: after completion, the plan is a
        // valid schedule that costs at most the MILP objective and peaks at
        // most at the MILP's U. This is why a MILP solution within budget
        // replays within budget.
        let mut rng = crate::synthetic::Rng::new(5);
        for _ in 0..500 {
            let n = rng.range(1, 9) as usize;
            let nodes = (0..n)
                .map(|v| {
                    let mut inputs = if v == 0 { vec![] } else { vec![v - 1] };
                    if v > 1 && rng.chance(1, 2) {
                        inputs.insert(0, rng.range(0, v as u64 - 2) as usize);
                    }
                    CheckmateNode {
                        name: format!("n{v}"),
                        cost: rng.range(0, 4) as f64,
                        size: rng.range(0, 5),
                        overhead: rng.range(0, 3),
                        inputs,
                    }
                })
                .collect();
            let g = CheckmateGraph::new("r", rng.range(0, 3), nodes).unwrap();
            let mut staged = Staged::frontier(n);
            for t in 1..n {
                for i in 0..t {
                    staged.s[t][i] = rng.chance(1, 3);
                }
            }
            staged.complete(&g);
            let replay = simulate(&g, &staged.operations(&g)).unwrap();
            assert!(replay.makespan <= staged.cost(&g) + 1e-9);
            assert!(replay.peak_memory <= staged.accounting(&g).peak);
        }
    }
}
