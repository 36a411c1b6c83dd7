//! Exact optimum over every graph schedule, for tiny graphs: THE ORACLE the
//! MILP is tested against.
//!
//! A state is (resident values, values computed at least once); resident is a
//! subset of computed, so there are at most 3^n states. Moves follow the graph
//! simulator's rules exactly: compute a node whose inputs are resident and
//! which is not (cost C_i; the memory right after it, with its transient, must
//! fit the budget), or free a resident value (cost 0). Dijkstra finds the
//! cheapest way to a state where every node has been computed.
//!
//! Unlike the MILP, the search is not restricted to frontier-advancing stages
//! (first computations in index order, each node at most once per stage, in
//! index order within a stage), so its optimum can only be lower or equal.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use crate::graph::{CheckmateGraph, GraphOp};

/// Largest graph searched (3^14, about 4.8 million states).
pub const MAX_NODES: usize = 14;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct State {
    resident: u32,
    computed: u32,
}

/// What the search minimises: a cost (f64, ordered by `total_cmp`) or a
/// peak in exact bytes (u64: as f64 a peak above 2^53 rounds, and the
/// search would then pick a schedule whose exact peak is above the smallest).
trait SearchKey: Copy {
    fn order(&self, other: &Self) -> Ordering;
}

impl SearchKey for f64 {
    fn order(&self, other: &Self) -> Ordering {
        self.total_cmp(other)
    }
}

impl SearchKey for u64 {
    fn order(&self, other: &Self) -> Ordering {
        self.cmp(other)
    }
}

/// A heap key ordered by its [`SearchKey`], then by state for determinism.
struct Key<K>(K, State);

impl<K: SearchKey> PartialEq for Key<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K: SearchKey> Eq for Key<K> {}

impl<K: SearchKey> PartialOrd for Key<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: SearchKey> Ord for Key<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.order(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The moves out of `state`: (operation, bytes in use right after it with its
/// transient, or 0 for a free; its cost).
fn moves(graph: &CheckmateGraph, masks: &[u32], state: State, mem: u64) -> Vec<(GraphOp, State, u64, f64)> {
    let mut out = Vec::new();
    for (v, node) in graph.nodes().iter().enumerate() {
        let bit = 1u32 << v;
        if state.resident & bit != 0 {
            out.push((GraphOp::Free(v), State { resident: state.resident & !bit, computed: state.computed }, 0, 0.0));
        } else if state.resident & masks[v] == masks[v] {
            let during = mem + node.size + node.overhead;
            let next = State { resident: state.resident | bit, computed: state.computed | bit };
            out.push((GraphOp::Compute(v), next, during, node.cost));
        }
    }
    out
}

fn resident_bytes(graph: &CheckmateGraph, resident: u32) -> u64 {
    graph.input_size() + (0..graph.len()).filter(|v| resident & (1 << v) != 0).map(|v| graph.node(v).size).sum::<u64>()
}

fn input_masks(graph: &CheckmateGraph) -> Vec<u32> {
    graph.nodes().iter().map(|n| n.inputs.iter().fold(0u32, |m, &u| m | (1 << u))).collect()
}

fn path(prev: &HashMap<State, (State, GraphOp)>, mut state: State) -> Vec<GraphOp> {
    let mut ops = Vec::new();
    while let Some(&(before, op)) = prev.get(&state) {
        ops.push(op);
        state = before;
    }
    ops.reverse();
    ops
}

/// Generic Dijkstra: `step(key, during, cost)` gives the key after a move, or
/// None when the move is not allowed.
fn search<K: SearchKey>(
    graph: &CheckmateGraph,
    zero: K,
    step: impl Fn(K, u64, f64) -> Option<K>,
) -> Option<(K, Vec<GraphOp>)> {
    let n = graph.len();
    assert!(n <= MAX_NODES, "exhaustive graph search is limited to {MAX_NODES} nodes (this graph has {n})");
    let masks = input_masks(graph);
    let all = (1u32 << n) - 1;
    let start = State { resident: 0, computed: 0 };
    let mut best: HashMap<State, K> = HashMap::from([(start, zero)]);
    let mut prev: HashMap<State, (State, GraphOp)> = HashMap::new();
    let mut heap = BinaryHeap::from([Reverse(Key(zero, start))]);
    while let Some(Reverse(Key(key, state))) = heap.pop() {
        if best.get(&state).is_some_and(|b| b.order(&key) == Ordering::Less) {
            continue;
        }
        if state.computed == all {
            return Some((key, path(&prev, state)));
        }
        let mem = resident_bytes(graph, state.resident);
        for (op, next, during, cost) in moves(graph, &masks, state, mem) {
            let Some(next_key) = step(key, during, cost) else { continue };
            if best.get(&next).is_none_or(|b| next_key.order(b) == Ordering::Less) {
                best.insert(next, next_key);
                prev.insert(next, (state, op));
                heap.push(Reverse(Key(next_key, next)));
            }
        }
    }
    None
}

/// The cheapest schedule of `graph` whose memory never exceeds `budget`
/// bytes: `Some((makespan, operations))`, or None when no schedule fits.
///
/// Exact. Time and memory grow as 3^n; panics above [`MAX_NODES`] nodes.
pub fn fastest(graph: &CheckmateGraph, budget: u64) -> Option<(f64, Vec<GraphOp>)> {
    if graph.input_size() > budget {
        return None;
    }
    search(graph, 0.0, |key, during, cost| (during <= budget).then_some(key + cost))
}

/// The smallest peak memory any schedule of `graph` reaches, with a schedule
/// reaching it. Exact; same limits as [`fastest`].
pub fn min_peak(graph: &CheckmateGraph) -> (u64, Vec<GraphOp>) {
    // Bottleneck search: the key is the largest memory so far, in exact bytes.
    let start = graph.input_size();
    search(graph, start, |key, during, _| Some(key.max(during))).expect("every graph can be computed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::CheckmateNode;
    use crate::graph::simulate::simulate_within;

    fn path3() -> CheckmateGraph {
        let nodes = (0..3)
            .map(|i| CheckmateNode {
                name: format!("n{i}"),
                cost: 1.0 + i as f64,
                size: 1,
                overhead: 0,
                inputs: if i == 0 { vec![] } else { vec![i - 1] },
            })
            .collect();
        CheckmateGraph::new("p", 0, nodes).unwrap()
    }

    #[test]
    fn computes_a_path_once_in_two_slots() {
        let g = path3();
        let (cost, ops) = fastest(&g, 2).unwrap();
        assert_eq!(cost, 6.0);
        assert_eq!(simulate_within(&g, &ops, 2).unwrap().makespan, 6.0);
        assert!(fastest(&g, 1).is_none(), "n1 needs n0 resident: two values at once");
        assert_eq!(min_peak(&g).0, 2);
    }
}
