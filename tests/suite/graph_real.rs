//! The graph solvers on the small real networks of `chains/graphs/` (a 3-level
//! U-Net and ResNet basic blocks): valid schedules within budget, the time
//! limit, LP rounding, and the MILP never worse than its warm start.

use std::time::Duration;

use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{
    CheckmateGraph, GraphFile, GraphSolveError, Status, backward, baselines, min_budget, simulate_within,
    solve_checkmate,
};

const MIB: u64 = 1 << 20;

fn load(name: &str) -> CheckmateGraph {
    let path = format!("{}/chains/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let GraphFile::Forward(forward) = GraphFile::from_json(&std::fs::read_to_string(path).unwrap()).unwrap() else {
        panic!("{name} is a forward graph")
    };
    assert!(forward.as_chain().is_err(), "{name} has skips");
    backward::derive(&forward).unwrap()
}

fn cases() -> [(CheckmateGraph, [u64; 3]); 2] {
    [(load("unet-tiny"), [350 * MIB, 300 * MIB, 250 * MIB]), (load("resnet-blocks"), [200 * MIB, 175 * MIB, 150 * MIB])]
}

fn opts(backend: Backend, seconds: f64) -> MilpOptions<'static> {
    MilpOptions { backend, time_limit: Some(Duration::from_secs_f64(seconds)), ticker: None }
}

#[test]
fn the_real_graphs_have_the_expected_shape() {
    let [(unet, _), (resnet, _)] = cases();
    assert_eq!((unet.len(), resnet.len()), (31, 35));
    // The smallest budget is the widest working set: grad:dec1 with its inputs.
    let m = min_budget(&unet, &opts(Backend::Microlp, 60.0)).unwrap();
    assert!(m.proven && m.bytes == unet.working_set_bound(), "{m:?}");
    let e = solve_checkmate(&unet, m.bytes - 1, remat::graph::GraphAlgorithm::Checkmate, &opts(Backend::Microlp, 60.0))
        .unwrap_err();
    assert!(matches!(e, GraphSolveError::Infeasible { min_budget: Some(b), .. } if b == m), "{e}");
}

#[test]
fn a_time_limit_returns_the_best_schedule_known() {
    let [(unet, budgets), _] = cases();
    let budget = budgets[1];
    // Far too short for the root LP: the warm start is the answer.
    let sol =
        solve_checkmate(&unet, budget, remat::graph::GraphAlgorithm::Checkmate, &opts(Backend::Microlp, 1e-9)).unwrap();
    assert_eq!(sol.schedule.status, Status::TimeLimit);
    let warm = baselines::best_fitting(&unet, budget).unwrap();
    assert!((sol.schedule.makespan - warm.cost).abs() < 1e-9 * warm.cost, "{} vs {}", sol.schedule.makespan, warm.cost);
    assert_eq!(sol.warm_start.unwrap().0, warm.name);
    assert!(sol.notes[0].contains("time limit"), "{:?}", sol.notes);
    simulate_within(&unet, &sol.schedule.operations, budget).unwrap();
}

#[test]
fn rounding_fits_the_budget_or_says_so() {
    for (graph, budgets) in cases() {
        for budget in budgets {
            match solve_checkmate(
                &graph,
                budget,
                remat::graph::GraphAlgorithm::CheckmateApprox,
                &opts(Backend::Microlp, 60.0),
            ) {
                Ok(sol) => {
                    assert_eq!(sol.schedule.status, Status::Rounded);
                    assert!(sol.schedule.peak_memory <= budget);
                    assert!(sol.schedule.makespan + 1e-9 >= sol.bound.unwrap(), "never below the LP bound");
                    simulate_within(&graph, &sol.schedule.operations, budget).unwrap();
                }
                Err(GraphSolveError::Rounding(e)) => assert!(e.to_string().contains("exceeds the budget")),
                Err(e) => panic!("{}: {e}", graph.name()),
            }
        }
    }
}

/// With HiGHS the MILP closes these graphs in seconds (see docs/results.md); here
/// only what does not depend on speed is checked: a valid schedule within
/// budget, no worse than the warm start, no better than the LP bound, and the
/// rounding never below a proven optimum.
#[cfg(feature = "highs")]
#[test]
fn highs_solves_the_real_graphs() {
    for (graph, budgets) in cases() {
        for budget in budgets {
            let sol =
                solve_checkmate(&graph, budget, remat::graph::GraphAlgorithm::Checkmate, &opts(Backend::Highs, 300.0))
                    .unwrap();
            simulate_within(&graph, &sol.schedule.operations, budget).unwrap();
            let warm = baselines::best_fitting(&graph, budget).unwrap();
            assert!(sol.schedule.makespan <= warm.cost + 1e-9);
            let approx = solve_checkmate(
                &graph,
                budget,
                remat::graph::GraphAlgorithm::CheckmateApprox,
                &opts(Backend::Highs, 300.0),
            );
            if let Ok(approx) = approx {
                assert!(approx.bound.unwrap() <= sol.schedule.makespan + 1e-6);
                if sol.schedule.status == Status::Optimal {
                    assert!(approx.schedule.makespan + 1e-9 >= sol.schedule.makespan);
                }
            }
        }
    }
}

/// The full-layer Inception v3 joint graph (443 nodes): far beyond what
/// microlp solves, so what comes back must still be honest.
#[test]
fn a_large_graph_gets_a_proven_gap_and_store_all_needs_no_milp() {
    let inception = load("inception_v3-299-b1-layers");
    assert_eq!(inception.len(), 443);
    let all = baselines::candidates(&inception);
    let store_all = all[0].peak;
    // At the checkpoint-all peak nothing needs recomputing: optimal, proven by
    // the total-cost bound, without building the MILP (which would not finish
    // within this limit: see the tight budget below).
    let sol =
        solve_checkmate(&inception, store_all, remat::graph::GraphAlgorithm::Checkmate, &opts(Backend::Microlp, 0.5))
            .unwrap();
    assert_eq!((sol.schedule.status, sol.schedule.gap), (Status::Optimal, Some(0.0)));
    assert_eq!(sol.schedule.makespan, inception.total_cost());
    // Halfway to the recompute-all peak, microlp stops at the limit with the
    // warm start; its gap is proven against at least the total cost.
    let lowest = all.iter().map(|b| b.peak).min().unwrap();
    let budget = lowest + (store_all - lowest) / 2;
    let sol =
        solve_checkmate(&inception, budget, remat::graph::GraphAlgorithm::Checkmate, &opts(Backend::Microlp, 0.5))
            .unwrap();
    assert_ne!(sol.schedule.status, Status::Optimal);
    let bound = sol.bound.expect("a proven bound");
    assert!(bound >= inception.total_cost() - 1e-9 && bound <= sol.schedule.makespan, "{bound}");
    let gap = sol.schedule.gap.expect("a proven gap");
    assert!((gap - (sol.schedule.makespan - bound) / sol.schedule.makespan).abs() < 1e-9, "{gap}");
    simulate_within(&inception, &sol.schedule.operations, budget).unwrap();
}
