//! Solve times and proven gaps of `remat solve` on general graphs: every
//! graph of `chains/graphs/` at three budgets each, solved as `auto` does
//! (the chain DP lifted to the graph first, then the Checkmate MILP
//! warm-started from the better of it and the baselines), with the lifted
//! schedule's own makespan beside the answer, so that "never slower than the
//! chain DP" can be read off each row. With `--milp-only`, the MILP alone
//! (`solve_checkmate`, warm-started from the baselines only), as before the lift.
//!
//! The hand-built `unet-tiny` and `resnet-blocks` are solved at fixed
//! budgets; the graphs `remat zoo` wrote (U-Net, ResNet-50 and Inception v3 at
//! block or full layer granularity, and parts of them) at 3/4, 1/2 and 1/4 of
//! the way from their lowest baseline peak (recompute-all or every-k; the
//! smallest budget is at most this) to their checkpoint-all peak.
//!
//! ```text
//! cargo run --release --example milp_timings [TIME_LIMIT_SECONDS] [--milp-only]
//! cargo run --release --features highs --example milp_timings 60
//! ```
//!
//! Times are wall-clock seconds of the whole call (lift, baselines, model,
//! solver, plan and replay) on this machine; rough on a shared machine. The
//! gap is proven: against the solver's bound, or at least the total cost.

use std::time::{Duration, Instant};

use remat::graph::baselines::candidates;
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{GraphAlgorithm, GraphFile, WhenRefused, backward, checkmate_forward, lift, solve_checkmate};
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
    let milp_only = args.iter().any(|a| a == "--milp-only");
    let limit: f64 =
        args.iter().find(|a| !a.starts_with("--")).map_or(60.0, |s| s.parse().expect("a time limit in seconds"));
    let backend = Backend::best_available();
    println!(
        "| graph | joint nodes | budget | seconds | answer | status | gap | makespan | chain DP lifted | best baseline | no recomputation |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, budgets) in CASES {
        let path = format!("{}/chains/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("graph file");
        let file = GraphFile::from_json(&text).expect("valid graph");
        let GraphFile::Forward(forward) = &file else { panic!("{path} is a forward graph") };
        let graph = backward::derive(forward).expect("derivable");
        let all = candidates(&graph);
        let budgets: Vec<u64> = match budgets {
            Budgets::Mib(mib) => mib.iter().map(|m| m << 20).collect(),
            Budgets::Between(fractions) => {
                let store_all = all.first().expect("checkpoint-all").peak;
                let none = all.iter().map(|b| b.peak).min().expect("baselines");
                fractions.iter().map(|f| none + ((store_all - none) as f64 * f) as u64).collect()
            }
        };
        for budget in budgets {
            let milp = MilpOptions { backend, time_limit: Some(Duration::from_secs_f64(limit)), ticker: None };
            let lifted = lift::lift(forward, &graph, budget, None)
                .map_or("none fits".to_string(), |l| format!("{:.4} ({} blocks)", l.replay.makespan, l.blocks));
            let baseline = all
                .iter()
                .filter(|b| b.peak <= budget)
                .min_by(|a, b| a.cost.total_cmp(&b.cost))
                .map_or("none fits".to_string(), |b| format!("{:.4} ({})", b.cost, b.name));
            let start = Instant::now();
            let result = if milp_only {
                solve_checkmate(&graph, budget, GraphAlgorithm::Checkmate, &milp)
            } else {
                // What `auto` runs on a forward graph that is not a path and
                // whose joint graph is too large for exhaustive search.
                checkmate_forward(forward, &graph, budget, WhenRefused::KeepBestKnown, &milp)
                    .map(|(solution, _)| solution)
            };
            let seconds = start.elapsed().as_secs_f64();
            let row = match result {
                Ok(sol) => {
                    let s = &sol.schedule;
                    let gap = s.gap.map_or("-".to_string(), |g| format!("{:.2}%", 100.0 * g));
                    format!("{seconds:.2} | {} | {} | {gap} | {:.4}", s.algorithm, s.status, s.makespan)
                }
                Err(e) => format!("{seconds:.2} | error: {e} | - | - | -"),
            };
            println!(
                "| {name} | {} | {} | {row} | {lifted} | {baseline} | {:.4} |",
                graph.len(),
                format_size(budget),
                graph.total_cost()
            );
        }
    }
}
