//! Baseline staged schedules: the MILP's warm start.
//!
//! Checkmate's generalisations of the classic heuristics to graphs: choose
//! which values to hold, then compute the cheapest R for that choice
//! (`staged::Staged::keeping`, as in Checkmate's AP and linearized baselines):
//! - `checkpoint-all`: hold every value while a later node reads it (no
//!   recomputation);
//! - `every-k` (k = 2..): hold every k-th forward value in topological order
//!   (Chen's segments on the linearized graph) and every gradient; the other
//!   forward values are recomputed where needed. In a Checkmate graph read from a
//!   file, where forward and backward nodes are not told apart, every k-th node;
//! - `recompute-all`: hold only gradients (every node, in a joint file, is
//!   recomputed from scratch where needed);
//! - `every-k+next`, `recompute-all+next`: the same, and every value is also
//!   held into the next stage when the next node reads it (instead of being
//!   recomputed right after it was computed).

use crate::graph::staged::Staged;
use crate::graph::{CheckmateGraph, CheckmateRole};

/// One baseline schedule with its figures.
#[derive(Clone, Debug)]
pub struct Baseline {
    /// `checkpoint-all`, `every-3`, `recompute-all`, ...
    pub name: String,
    /// The schedule.
    pub staged: Staged,
    /// Its makespan (sum of `C_i R[t][i]`).
    pub cost: f64,
    /// Its peak as the MILP counts memory (input included): it is a feasible
    /// warm start exactly when this fits the budget.
    pub peak: u64,
}

/// The segment lengths k tried for `every-k`: every k up to 16, then about
/// 25% apart up to `n`, so O(log n) of them. Each baseline costs
/// O(n (n + |E|)); trying every k up to n took seconds on a 443-node joint
/// graph (Inception v3), out of a time limit meant for the MILP.
fn segment_lengths(n: usize) -> Vec<usize> {
    let mut ks: Vec<usize> = (2..=n.min(16)).collect();
    let mut k = 16;
    while k < n {
        k = (k + k / 4).min(n);
        ks.push(k);
    }
    ks
}

/// Every baseline of `graph`, from most memory to least (roughly).
/// O(n (n + |E|) log n).
pub fn candidates(graph: &CheckmateGraph) -> Vec<Baseline> {
    let checkpointable: Vec<usize> = (0..graph.len())
        .filter(|&i| matches!(graph.role(i), CheckmateRole::Forward(_) | CheckmateRole::Given))
        .collect();
    let mut rank = vec![usize::MAX; graph.len()];
    for (r, &i) in checkpointable.iter().enumerate() {
        rank[i] = r;
    }
    let make = |name: String, keep: &dyn Fn(usize, usize) -> bool| {
        let staged = Staged::keeping(graph, keep);
        let cost = staged.cost(graph);
        let peak = staged.accounting(graph).peak;
        Baseline { name, staged, cost, peak }
    };
    // Holding a value into the next stage when the next node reads it saves
    // recomputing it right after it was computed.
    let next = |t: usize, i: usize| t == i + 1 && graph.users(i).contains(&t);
    let mut out = vec![make("checkpoint-all".into(), &|_, _| true)];
    for k in segment_lengths(checkpointable.len()) {
        let every = |i: usize| rank[i] == usize::MAX || rank[i] % k == k - 1;
        out.push(make(format!("every-{k}"), &|_, i| every(i)));
        out.push(make(format!("every-{k}+next"), &|t, i| every(i) || next(t, i)));
    }
    out.push(make("recompute-all+next".into(), &|t, i| rank[i] == usize::MAX || next(t, i)));
    out.push(make("recompute-all".into(), &|_, i| rank[i] == usize::MAX));
    out
}

/// The cheapest baseline whose MILP memory fits `budget` (ties: the first).
pub fn best_fitting(graph: &CheckmateGraph, budget: u64) -> Option<Baseline> {
    candidates(graph).into_iter().filter(|b| b.peak <= budget).min_by(|a, b| a.cost.total_cmp(&b.cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_lengths_are_all_small_ones_then_geometric() {
        assert_eq!(segment_lengths(1), Vec::<usize>::new());
        assert_eq!(segment_lengths(5), [2, 3, 4, 5]);
        let ks = segment_lengths(221);
        assert_eq!(ks[..15], (2..=16).collect::<Vec<_>>()[..]);
        assert_eq!(*ks.last().unwrap(), 221);
        assert!(ks.windows(2).all(|w| w[0] < w[1]) && ks.len() < 30, "{ks:?}");
    }
    use crate::graph::simulate::simulate;
    use crate::graph::{ForwardGraph, backward};

    #[test]
    fn baselines_are_valid_and_trade_time_for_memory() {
        let text = r#"{"name": "p", "input_size": 1, "nodes": [
            {"name": "a", "inputs": [], "forward_time": 1, "backward_time": 1, "output_size": 4, "saved_size": 4},
            {"name": "b", "inputs": ["a"], "forward_time": 1, "backward_time": 1, "output_size": 4, "saved_size": 4},
            {"name": "c", "inputs": ["b"], "forward_time": 1, "backward_time": 1, "output_size": 4, "saved_size": 4},
            {"name": "d", "inputs": ["c"], "forward_time": 1, "backward_time": 1, "output_size": 4, "saved_size": 4}
        ]}"#;
        let g = backward::derive(&ForwardGraph::from_json(text).unwrap()).unwrap();
        let all = candidates(&g);
        assert_eq!(all.first().unwrap().cost, g.total_cost(), "checkpoint-all recomputes nothing");
        for b in &all {
            let replay = simulate(&g, &b.staged.operations(&g)).unwrap_or_else(|e| panic!("{}: {e}", b.name));
            assert_eq!(replay.makespan, b.cost, "{}", b.name);
            assert!(replay.peak_memory <= b.peak, "{}: the plan frees no later than the MILP counts", b.name);
        }
        let last = all.last().unwrap();
        assert!(last.peak < all[0].peak && last.cost > all[0].cost);
        assert_eq!(best_fitting(&g, all[0].peak).unwrap().name, "checkpoint-all");
        let lowest = all.iter().map(|b| b.peak).min().unwrap();
        assert!(best_fitting(&g, lowest).is_some() && best_fitting(&g, lowest - 1).is_none());
    }
}
