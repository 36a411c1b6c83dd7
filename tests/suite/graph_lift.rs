//! Schedules lifted from the chain DP (`remat::graph::lift`, issue 16): the
//! translation of a chain schedule of a path reproduces its makespan exactly
//! and fits its peak; on random forward graphs with skips every lifted
//! schedule replays within its budget, is never below the exhaustive optimum,
//! and has a staged form of the same cost; `auto` and `checkmate` are never
//! worse than the lifted schedule (`auto` searches these small graphs
//! exhaustively, the MILP starts from the lift); and a large graph is
//! answered by the lift when the MILP is out of reach.

use std::num::NonZeroUsize;
use std::time::Duration;

use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{GraphFile, LIFT_NAME, backward, exhaustive, lift, simulate, simulate_within};
use remat::problem::{Method, Options, Outcome, Problem, solve};
use remat::solve::{Algorithm, SolveOptions};
use remat::synthetic::{Figures, Rng, small_forward_graph};

#[test]
fn a_chain_schedule_of_a_path_lifts_with_its_makespan_and_within_its_peak() {
    let mut rng = Rng::new(161);
    let mut compared = 0;
    for _ in 0..150 {
        let k = rng.range(1, 9) as usize;
        let forward = small_forward_graph(&mut rng, k, false, Figures::Plain);
        let chain = forward.as_chain().unwrap();
        let graph = backward::derive(&forward).unwrap();
        // One block per node: the block chain is the path's own chain.
        let counts = lift::crossing_counts(&forward);
        let ends = lift::cuts(&counts, k, usize::MAX);
        assert_eq!(ends, (0..k).collect::<Vec<_>>());
        let blocks = lift::block_chain(&forward, &graph, &ends, true).unwrap();
        let same = |s: &remat::Stage, t: &remat::Stage| {
            (s.forward_time, s.backward_time, s.output_size, s.saved_size, s.gradient_size)
                == (t.forward_time, t.backward_time, t.output_size, t.saved_size, t.gradient_size)
                && (s.forward_overhead, s.backward_overhead) == (t.forward_overhead, t.backward_overhead)
        };
        assert!(blocks.stages().iter().zip(chain.stages()).all(|(a, b)| same(a, b)));
        let top = chain.stages().iter().map(|s| s.saved_size + s.gradient_size + 4).sum::<u64>() + 8;
        for budget in 1..=top {
            let opts = SolveOptions { slots: NonZeroUsize::new(budget as usize).unwrap(), ..SolveOptions::default() };
            let Ok(sol) = remat::solve::solve(chain, budget, Algorithm::Persistent, &opts) else { continue };
            let ops = lift::with_frees(&graph, &lift::translate(k, &ends, &sol.schedule.operations));
            let replay = simulate(&graph, &ops).unwrap();
            assert_eq!(replay.makespan, sol.schedule.makespan, "the same costs in the same order");
            assert!(
                replay.peak_memory <= sol.schedule.peak_memory,
                "{} > {}",
                replay.peak_memory,
                sol.schedule.peak_memory
            );
            // The lift searches chain budgets around this one, with fewer
            // slots at most: never slower than the exact chain DP here.
            let lifted = lift::lift(&forward, &graph, budget, None)
                .unwrap_or_else(|e| panic!("{k} nodes at {budget}: the chain schedule itself fits, yet {e:?}"));
            assert!(
                lifted.replay.makespan <= replay.makespan + 1e-9,
                "{} > {}",
                lifted.replay.makespan,
                replay.makespan
            );
            compared += 1;
        }
    }
    assert!(compared > 500, "{compared}");
}

#[test]
fn lifted_schedules_of_graphs_with_skips_replay_within_budget_and_have_a_staged_form() {
    let mut rng = Rng::new(162);
    let mut lifted_cases = 0;
    for _ in 0..120 {
        let k = rng.range(2, 5) as usize;
        let forward = small_forward_graph(&mut rng, k, true, Figures::Random);
        let graph = backward::derive(&forward).unwrap();
        let (lowest, _) = exhaustive::min_peak(&graph);
        let all = graph.nodes().iter().map(|n| n.size + n.overhead).sum::<u64>() + graph.input_size();
        for budget in lowest.saturating_sub(1)..=all {
            let optimum = exhaustive::fastest(&graph, budget).map(|(cost, _)| cost);
            match lift::lift(&forward, &graph, budget, None) {
                Ok(l) => {
                    let replay = simulate_within(&graph, &l.ops, budget).unwrap();
                    assert_eq!(replay, l.replay);
                    let optimum = optimum.expect("a lifted schedule fits, so some schedule does");
                    assert!(
                        l.replay.makespan + 1e-9 >= optimum,
                        "below the optimum: {} < {optimum}",
                        l.replay.makespan
                    );
                    let staged = lift::staged_form(&graph, &l.ops).expect("first computes come in node order");
                    assert!((staged.cost(&graph) - l.replay.makespan).abs() < 1e-9);
                    let plan = simulate(&graph, &staged.operations(&graph)).unwrap();
                    assert!(plan.makespan <= l.replay.makespan + 1e-9);
                    lifted_cases += 1;
                }
                Err(no) => {
                    if let Some(peak) = no.lowest_peak {
                        assert!(peak > budget, "a lifted schedule at {peak} fits {budget}");
                    }
                }
            }
        }
    }
    assert!(lifted_cases > 1000, "{lifted_cases}");
}

#[test]
fn auto_and_checkmate_are_never_worse_than_the_lifted_schedule() {
    let mut rng = Rng::new(163);
    let milp = MilpOptions { backend: Backend::Microlp, time_limit: Some(Duration::from_secs(2)), ticker: None };
    let opts = Options { milp, ..Options::default() };
    let mut compared = 0;
    for _ in 0..25 {
        let k = rng.range(3, 5) as usize;
        let forward = small_forward_graph(&mut rng, k, true, Figures::Random);
        if forward.as_chain().is_ok() {
            continue;
        }
        let graph = backward::derive(&forward).unwrap();
        let (lowest, _) = exhaustive::min_peak(&graph);
        let file = Problem::Graph(GraphFile::Forward(forward.clone()));
        for budget in [lowest, lowest + 2, lowest + 5] {
            let Ok(lifted) = lift::lift(&forward, &graph, budget, None) else { continue };
            for method in [Method::Chain(Algorithm::Auto), Method::Graph(remat::graph::GraphAlgorithm::Checkmate)] {
                let Outcome::Graph { solution, why, .. } = solve(&file, budget, method, &opts).unwrap() else {
                    panic!("not a path")
                };
                let s = &solution.schedule;
                assert!(
                    s.makespan <= lifted.replay.makespan + 1e-9,
                    "{} > {}: {why}",
                    s.makespan,
                    lifted.replay.makespan
                );
                assert!(simulate_within(&graph, &s.operations, budget).is_ok());
                if method == Method::Chain(Algorithm::Auto) {
                    // Joint graphs this small are searched exhaustively.
                    assert!(why.starts_with("exhaustive search"), "{why}");
                    assert_eq!(Some(s.makespan), exhaustive::fastest(&graph, budget).map(|f| f.0), "{why}");
                    compared += 1;
                    continue;
                }
                assert!(why.contains("lifted"), "{why}");
                if s.algorithm == LIFT_NAME {
                    assert!(why.contains("the lifted schedule is kept") || why.contains("no MILP"), "{why}");
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 20, "{compared}");
}

#[test]
fn a_store_all_budget_is_answered_by_the_lift_without_a_milp() {
    // Ample memory: the lifted store-all schedule costs the total, a proven
    // optimum, so no MILP runs (even one far too large to build).
    let mut rng = Rng::new(164);
    let forward = small_forward_graph(&mut rng, 700, true, Figures::Random);
    let graph = backward::derive(&forward).unwrap();
    let opts = Options::default();
    let Outcome::Graph { solution, why, .. } =
        solve(&Problem::Graph(GraphFile::Forward(forward)), u64::MAX / 4, Method::Chain(Algorithm::Auto), &opts)
            .unwrap()
    else {
        panic!("not a path")
    };
    assert_eq!(solution.schedule.status, remat::graph::Status::Optimal);
    assert_eq!(solution.schedule.makespan, graph.total_cost());
    assert!(why.contains("no MILP needed"), "{why}");
}
