//! Property test of the Checkmate MILP (issue 16): on hundreds of random small
//! joint graphs, with random costs, sizes, transients and input sizes, at EVERY
//! budget from one below the smallest feasible one up to the checkpoint-all
//! peak, the MILP's proven optimum equals the exhaustive search's optimum
//! over all graph schedules, "infeasible" comes back exactly where no schedule
//! exists (with the exhaustive smallest budget), and every schedule replays
//! within its budget at the makespan reported.
//!
//! The graphs are of two kinds: arbitrary DAGs (each node reads one to three
//! earlier nodes), and joint graphs derived from random forward graphs with
//! skip connections (where the old formulation's bug showed: a forward value
//! held into a stage after its last reader, because that reader is recomputed
//! there for a gradient). Costs are small integers, so sums are exact in f64.
//!
//! `GRAPH_PROPERTY_CASES` overrides the number of graphs (default 500).

use rayon::prelude::*;
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{
    ForwardGraph, Graph, GraphSolveError, Node, Status, exhaustive, joint, simulate_within, solve_joint,
};
use remat::synthetic::Rng;

/// A random DAG of `n` nodes: node v reads 1..=3 distinct earlier nodes
/// (always including v - 1, so the graph is connected).
fn random_dag(rng: &mut Rng, n: usize) -> Graph {
    let nodes = (0..n)
        .map(|v| {
            let mut inputs = Vec::new();
            if v > 0 {
                inputs.push(v - 1);
                for _ in 0..rng.range(0, 2) {
                    inputs.push(rng.range(0, v as u64 - 1) as usize);
                }
            }
            inputs.sort_unstable();
            inputs.dedup();
            Node {
                name: format!("n{v}"),
                cost: rng.range(0, 4) as f64,
                size: rng.range(1, 4),
                overhead: if rng.chance(1, 4) { rng.range(1, 3) } else { 0 },
                inputs,
            }
        })
        .collect();
    Graph::new("dag", rng.range(0, 2), nodes).unwrap()
}

/// The joint graph of a random forward graph of `k` nodes: each reads the one
/// before it and sometimes an earlier one (a skip).
fn random_derived(rng: &mut Rng, k: usize) -> Graph {
    let mut nodes = Vec::new();
    for v in 0..k {
        let mut inputs = Vec::new();
        if v > 0 {
            inputs.push(format!("\"f{}\"", v - 1));
        }
        if v > 1 && rng.chance(1, 2) {
            inputs.push(format!("\"f{}\"", rng.range(0, v as u64 - 2)));
        }
        nodes.push(format!(
            r#"{{"name": "f{v}", "inputs": [{}], "forward_time": {}, "backward_time": {}, "output_size": {}, "saved_size": {}, "gradient_size": {}}}"#,
            inputs.join(", "),
            rng.range(1, 3),
            rng.range(1, 4),
            rng.range(1, 3),
            rng.range(1, 4),
            rng.range(1, 3),
        ));
    }
    let text = format!(r#"{{"name": "derived", "input_size": {}, "nodes": [{}]}}"#, rng.range(0, 2), nodes.join(", "));
    joint::derive(&ForwardGraph::from_json(&text).unwrap()).unwrap()
}

fn graphs() -> Vec<Graph> {
    let cases: usize = std::env::var("GRAPH_PROPERTY_CASES").map_or(500, |s| s.parse().expect("a number"));
    let mut rng = Rng::new(16);
    (0..cases)
        .map(|c| {
            if c % 2 == 0 {
                let n = rng.range(2, 8) as usize;
                random_dag(&mut rng, n)
            } else {
                let k = rng.range(2, 4) as usize;
                random_derived(&mut rng, k)
            }
        })
        .collect()
}

/// Checks `graph` at every budget from one below its exhaustive minimum up to
/// its checkpoint-all peak. Returns the number of budgets tried.
fn check(graph: &Graph, backend: Backend) -> usize {
    let opts = MilpOptions { backend, time_limit: None, ticker: None };
    let (min_any, _) = exhaustive::min_peak(graph);
    let store_all = remat::graph::baselines::candidates(graph)[0].peak;
    let mut budgets = 0;
    for budget in min_any.saturating_sub(1)..=store_all.max(min_any) {
        budgets += 1;
        let oracle = exhaustive::fastest(graph, budget).map(|(cost, _)| cost);
        let case = || format!("{} ({:?}) at budget {budget} with {backend}", graph.name(), graph.nodes());
        match (solve_joint(graph, budget, remat::graph::GraphAlgorithm::Checkmate, &opts), oracle) {
            (Ok(sol), Some(best)) => {
                assert_eq!(sol.schedule.makespan, best, "{}: MILP vs exhaustive", case());
                assert_eq!(sol.schedule.status, Status::Optimal, "{}", case());
                assert_eq!(sol.schedule.gap, Some(0.0), "{}", case());
                let replay = simulate_within(graph, &sol.schedule.operations, budget).unwrap();
                assert_eq!(replay.makespan, best, "{}", case());
            }
            (Err(GraphSolveError::Infeasible { min_budget, .. }), None) => {
                let m = min_budget.expect("no time limit: the smallest budget is found");
                assert!(m.proven, "{}", case());
                assert_eq!(m.bytes, min_any, "{}: smallest feasible budget", case());
            }
            (other, oracle) => panic!("{}: MILP {other:?}, exhaustive {oracle:?}", case()),
        }
    }
    let all = solve_joint(graph, store_all.max(min_any), remat::graph::GraphAlgorithm::Checkmate, &opts).unwrap();
    assert_eq!(all.schedule.makespan, graph.total_cost(), "store-all at the checkpoint-all peak");
    budgets
}

#[test]
fn microlp_milp_equals_exhaustive_on_random_graphs_at_every_budget() {
    let graphs = graphs();
    let budgets: usize = graphs.par_iter().map(|g| check(g, Backend::Microlp)).sum();
    assert!(budgets >= 2 * graphs.len(), "{budgets} budgets over {} graphs", graphs.len());
}

#[cfg(feature = "highs")]
#[test]
fn highs_milp_equals_exhaustive_on_random_graphs_at_every_budget() {
    let graphs = graphs();
    let budgets: usize = graphs.par_iter().map(|g| check(g, Backend::Highs)).sum();
    assert!(budgets >= 2 * graphs.len(), "{budgets} budgets over {} graphs", graphs.len());
}
