//! MILP solve times and gaps of the Checkmate MILP (and of its LP rounding) on
//! the U-Net and ResNet-block graphs of `chains/graphs/`, at three budgets
//! each, with every LP backend this build has: the hand-built `unet-tiny` and
//! `resnet-blocks` at fixed budgets, and `remat zoo`'s U-Net (block graph) and
//! ResNet-50 `layer1` (layer graph) at a quarter, half and three quarters of
//! the way from their recompute-all peak to their checkpoint-all peak.
//!
//! ```text
//! cargo run --release --features highs --example milp_timings [TIME_LIMIT_SECONDS]
//! ```
//!
//! Times are wall-clock seconds of the solver on this machine (the whole
//! `solve_joint` call: warm start, MILP, plan and replay); rough on a shared
//! machine.

use std::time::{Duration, Instant};

use remat::graph::baselines::candidates;
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{GraphFile, joint, solve_joint};
use remat::size::format_size;
use remat::solve::Algorithm;

/// Budgets of a case: fixed, in MiB, or fractions of the way from the
/// recompute-all peak to the checkpoint-all peak of its joint graph.
enum Budgets {
    Mib([u64; 3]),
    Between([f64; 3]),
}

const CASES: [(&str, Budgets); 4] = [
    ("unet-tiny", Budgets::Mib([350, 300, 250])),
    ("resnet-blocks", Budgets::Mib([200, 175, 150])),
    ("unet-256-b1-blocks", Budgets::Between([0.75, 0.5, 0.25])),
    ("resnet50-224-b1-layers-part4-6", Budgets::Between([0.75, 0.5, 0.25])),
];

fn main() {
    let limit: f64 = std::env::args().nth(1).map_or(120.0, |s| s.parse().expect("a time limit in seconds"));
    println!(
        "| graph | joint nodes | budget | algorithm | backend | seconds | status | gap | makespan (no recomputation) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
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
                let none = candidates.last().expect("recompute-all").peak;
                fractions.iter().map(|f| none + ((all - none) as f64 * f) as u64).collect()
            }
        };
        for budget in budgets {
            let shown = format_size(budget);
            for algorithm in [Algorithm::Checkmate, Algorithm::CheckmateApprox] {
                for &backend in Backend::ALL {
                    let opts = MilpOptions { backend, time_limit: Some(Duration::from_secs_f64(limit)), ticker: None };
                    let start = Instant::now();
                    let result = solve_joint(&graph, budget, algorithm, &opts);
                    let seconds = start.elapsed().as_secs_f64();
                    let row = match result {
                        Ok(sol) => {
                            let s = &sol.schedule;
                            let gap = s.gap.map_or("-".to_string(), |g| format!("{:.2}%", 100.0 * g));
                            format!(
                                "{seconds:.2} | {} | {gap} | {:.2} ({:.2})",
                                s.status,
                                s.makespan,
                                graph.total_cost()
                            )
                        }
                        Err(e) => format!("{seconds:.2} | error: {e} | - | -"),
                    };
                    println!("| {name} | {} | {shown} | {algorithm} | {backend} | {row} |", graph.len());
                }
            }
        }
    }
}
