//! Property test of the Checkmate MILP (issue 16): on hundreds of random small
//! joint graphs, with random costs, sizes, transients and input sizes, at EVERY
//! budget from one below the smallest feasible one up to the checkpoint-all
//! peak, the MILP's proven optimum equals the exhaustive search's optimum
//! over all graph schedules, "infeasible" comes back exactly where no schedule
//! exists (with the exhaustive smallest budget), and every schedule replays
//! within its budget at the makespan reported -- except where the exhaustive
//! schedule computes a node twice within a stage, which the MILP's staged
//! schedules cannot (rare: see [`check`]); there the MILP may only be slower
//! or infeasible.
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
    CheckmateGraph, CheckmateNode, GraphSolveError, Status, backward, exhaustive, lift, simulate_within,
    solve_checkmate,
};
use remat::synthetic::{Figures, Rng, small_forward_graph};

/// A random DAG of `n` nodes: node v reads 1..=3 distinct earlier nodes
/// (always including v - 1, so the graph is connected).
fn random_dag(rng: &mut Rng, n: usize) -> CheckmateGraph {
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
            CheckmateNode {
                name: format!("n{v}"),
                cost: rng.range(0, 4) as f64,
                size: rng.range(1, 4),
                overhead: if rng.chance(1, 4) { rng.range(1, 3) } else { 0 },
                inputs,
            }
        })
        .collect();
    CheckmateGraph::new("dag", rng.range(0, 2), nodes).unwrap()
}

fn graphs() -> Vec<CheckmateGraph> {
    let cases: usize = std::env::var("GRAPH_PROPERTY_CASES").map_or(500, |s| s.parse().expect("a number"));
    let mut rng = Rng::new(16);
    (0..cases)
        .map(|c| {
            if c % 2 == 0 {
                let n = rng.range(2, 8) as usize;
                random_dag(&mut rng, n)
            } else {
                let k = rng.range(2, 4) as usize;
                backward::derive(&small_forward_graph(&mut rng, k, true, Figures::Random)).unwrap()
            }
        })
        .collect()
}

/// What [`check`] saw on one graph.
#[derive(Default)]
struct Tally {
    /// Budgets tried.
    budgets: usize,
    /// Budgets where the MILP met the exhaustive optimum (or both said
    /// infeasible with the same smallest budget).
    equal: usize,
    /// Budgets where the MILP was slower or infeasible, the exhaustive
    /// schedule having no staged form.
    outside: usize,
}

impl std::ops::Add for Tally {
    type Output = Tally;
    fn add(self, o: Tally) -> Tally {
        Tally { budgets: self.budgets + o.budgets, equal: self.equal + o.equal, outside: self.outside + o.outside }
    }
}

/// Checks `graph` at every budget from one below its exhaustive minimum up to
/// its checkpoint-all peak.
///
/// The MILP optimises over staged schedules (stage t computes node t for the
/// first time, after recomputing each earlier node at most once, in order),
/// exhaustive search over every schedule. Some graphs need a node computed
/// twice within a stage at tight budgets (`tests/suite/graph_milp_vs_exhaustive.rs`
/// pins one), so the MILP must equal the exhaustive optimum whenever the
/// exhaustive schedule has a staged form ([`lift::staged_form`]), and may
/// only be slower (or infeasible) when it has none.
fn check(graph: &CheckmateGraph, backend: Backend) -> Tally {
    let opts = MilpOptions { backend, time_limit: None, ticker: None };
    let (min_any, min_ops) = exhaustive::min_peak(graph);
    let min_staged = lift::staged_form(graph, &min_ops).is_some();
    let store_all = remat::graph::baselines::candidates(graph)[0].peak;
    let mut tally = Tally::default();
    for budget in min_any.saturating_sub(1)..=store_all.max(min_any) {
        tally.budgets += 1;
        let oracle = exhaustive::fastest(graph, budget);
        let case = || format!("{} ({:?}) at budget {budget} with {backend}", graph.name(), graph.nodes());
        match (solve_checkmate(graph, budget, remat::graph::GraphAlgorithm::Checkmate, &opts), oracle) {
            (Ok(sol), Some((best, ops))) => {
                assert_eq!(sol.schedule.status, Status::Optimal, "{}", case());
                assert_eq!(sol.schedule.gap, Some(0.0), "{}", case());
                let replay = simulate_within(graph, &sol.schedule.operations, budget).unwrap();
                assert_eq!(replay.makespan, sol.schedule.makespan, "{}", case());
                if sol.schedule.makespan == best {
                    tally.equal += 1;
                } else {
                    assert!(sol.schedule.makespan > best, "{}: the MILP beat exhaustive search", case());
                    assert!(lift::staged_form(graph, &ops).is_none(), "{}: MILP vs exhaustive", case());
                    tally.outside += 1;
                }
            }
            (Err(GraphSolveError::Infeasible { min_budget, .. }), oracle) => {
                let m = min_budget.expect("no time limit: the smallest budget is found");
                assert!(m.proven && m.bytes > budget, "{}", case());
                assert!(m.bytes >= min_any, "{}: below the exhaustive minimum", case());
                match oracle {
                    None if m.bytes == min_any => tally.equal += 1,
                    None => {
                        assert!(!min_staged, "{}: smallest feasible budget", case());
                        tally.outside += 1;
                    }
                    Some((_, ops)) => {
                        assert!(lift::staged_form(graph, &ops).is_none(), "{}: MILP infeasible", case());
                        tally.outside += 1;
                    }
                }
            }
            (other, oracle) => panic!("{}: MILP {other:?}, exhaustive {oracle:?}", case()),
        }
    }
    let all = solve_checkmate(graph, store_all.max(min_any), remat::graph::GraphAlgorithm::Checkmate, &opts).unwrap();
    assert_eq!(all.schedule.makespan, graph.total_cost(), "store-all at the checkpoint-all peak");
    tally
}

/// Runs [`check`] on every graph: the MILP agrees with exhaustive search on
/// all but a few budgets, and only where the exhaustive schedule has no
/// staged form.
fn run(backend: Backend) {
    let graphs = graphs();
    let t = graphs.par_iter().map(|g| check(g, backend)).reduce(Tally::default, |a, b| a + b);
    println!("{backend}: {} budgets, {} equal, {} outside the staged class", t.budgets, t.equal, t.outside);
    assert!(t.budgets >= 2 * graphs.len(), "{} budgets over {} graphs", t.budgets, graphs.len());
    assert_eq!(t.equal + t.outside, t.budgets);
    assert!(t.outside * 100 <= t.budgets, "{} of {} budgets outside the staged class", t.outside, t.budgets);
}

#[test]
fn microlp_milp_equals_exhaustive_on_random_graphs_at_every_budget() {
    run(Backend::Microlp);
}

#[cfg(feature = "highs")]
#[test]
fn highs_milp_equals_exhaustive_on_random_graphs_at_every_budget() {
    run(Backend::Highs);
}
