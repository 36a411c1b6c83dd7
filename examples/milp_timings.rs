//! Solve times and proven gaps of the Checkmate MILP (`checkmate`, and with
//! `--approx` its LP rounding) on every graph of `chains/graphs/`, at three
//! budgets each, with every LP backend this build has: the hand-built
//! `unet-tiny` and `resnet-blocks` at fixed budgets, and the graphs `remat zoo`
//! wrote (U-Net, ResNet-50 and Inception v3 at block or full layer
//! granularity, and parts of them) at 3/4, 1/2 and 1/4 of the way from their
//! lowest baseline peak (recompute-all or every-k; the smallest budget is at
//! most this) to their checkpoint-all peak.
//!
//! ```text
//! cargo run --release --example milp_timings [TIME_LIMIT_SECONDS] [--approx]
//! cargo run --release --features highs --example milp_timings 60 --highs-only
//! ```
//!
//! Times are wall-clock seconds of the whole `solve_joint` call (baselines,
//! model, solver, plan and replay) on this machine; rough on a shared machine.
//! The gap is proven: against the solver's bound, or at least the total cost.

use std::time::{Duration, Instant};

use remat::graph::baselines::candidates;
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{GraphFile, joint, solve_joint};
use remat::size::format_size;

/// Budgets of a case: fixed, in MiB, or fractions of the way from the
/// recompute-all peak to the checkpoint-all peak of its joint graph.
enum Budgets {
    Mib([u64; 3]),
    Between([f64; 3]),
}

const CASES: [(&str, Budgets); 8] = [
    ("unet-tiny", Budgets::Mib([350, 300, 250])),
    ("resnet-blocks", Budgets::Mib([200, 175, 150])),
    ("unet-256-b1-blocks", Budgets::Between([0.75, 0.5, 0.25])),
    ("resnet50-224-b1-layers-part4-6", Budgets::Between([0.75, 0.5, 0.25])),
    ("inception_v3-299-b1-layers-part13-13", Budgets::Between([0.75, 0.5, 0.25])),
    ("unet-256-b1-layers", Budgets::Between([0.75, 0.5, 0.25])),
    ("resnet50-224-b1-layers", Budgets::Between([0.75, 0.5, 0.25])),
    ("inception_v3-299-b1-layers", Budgets::Between([0.75, 0.5, 0.25])),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let approx = args.iter().any(|a| a == "--approx");
    // Only the first backend of the build (HiGHS when built in).
    let first_only = args.iter().any(|a| a == "--highs-only");
    let backends = if first_only { &Backend::ALL[..1] } else { Backend::ALL };
    let limit: f64 =
        args.iter().find(|a| !a.starts_with("--")).map_or(60.0, |s| s.parse().expect("a time limit in seconds"));
    let algorithms: &[remat::graph::GraphAlgorithm] = if approx {
        &[remat::graph::GraphAlgorithm::Checkmate, remat::graph::GraphAlgorithm::CheckmateApprox]
    } else {
        &[remat::graph::GraphAlgorithm::Checkmate]
    };
    println!(
        "| graph | joint nodes | budget | algorithm | backend | seconds | status | gap | makespan (no recomputation) | warm start |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, budgets) in CASES {
        let path = format!("{}/chains/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("graph file");
        let GraphFile::Forward(forward) = GraphFile::from_json(&text).expect("valid graph") else {
            panic!("{path} is a forward graph")
        };
        let graph = joint::derive(&forward).expect("derivable");
        let budgets: Vec<u64> = match budgets {
            Budgets::Mib(mib) => mib.iter().map(|m| m << 20).collect(),
            Budgets::Between(fractions) => {
                let candidates = candidates(&graph);
                let all = candidates.first().expect("checkpoint-all").peak;
                let none = candidates.iter().map(|b| b.peak).min().expect("baselines");
                fractions.iter().map(|f| none + ((all - none) as f64 * f) as u64).collect()
            }
        };
        for budget in budgets {
            let shown = format_size(budget);
            for &algorithm in algorithms {
                for &backend in backends {
                    let opts = MilpOptions { backend, time_limit: Some(Duration::from_secs_f64(limit)), ticker: None };
                    let start = Instant::now();
                    let result = solve_joint(&graph, budget, algorithm, &opts);
                    let seconds = start.elapsed().as_secs_f64();
                    let row = match result {
                        Ok(sol) => {
                            let s = &sol.schedule;
                            let gap = s.gap.map_or("-".to_string(), |g| format!("{:.2}%", 100.0 * g));
                            let warm = sol.warm_start.map_or("-".to_string(), |(n, c)| format!("{n} ({c:.2})"));
                            format!(
                                "{seconds:.2} | {} | {gap} | {:.2} ({:.2}) | {warm}",
                                s.status,
                                s.makespan,
                                graph.total_cost()
                            )
                        }
                        Err(e) => format!("{seconds:.2} | error: {e} | - | - | -"),
                    };
                    println!("| {name} | {} | {shown} | {algorithm} | {backend} | {row} |", graph.len());
                }
            }
        }
    }
}
