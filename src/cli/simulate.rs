//! `remat simulate`: replay a schedule on a chain.

use std::path::PathBuf;

use crate::Problem;
use crate::size::format_size;

use super::output::outln;
use super::{CliResult, Failure, load_problem, replay_schedule_file, size_arg};

/// Replay a schedule on a chain with the exact simulator.
///
/// Checks every dependency of the operation table and prints the makespan and
/// the peak memory, or the first invalid operation and why. The schedule file
/// may be JSON written by `remat solve --json`, a JSON array of
/// {"op": "F_ck", "stage": 1} objects, or the paper's notation as text
/// (F_ck^1 F_none^2 F_all^3 ... B^1).
#[derive(clap::Args)]
pub struct Args {
    /// Chain file, or graph file (the schedule is then a graph schedule);
    /// `-` reads standard input.
    chain: PathBuf,
    /// Schedule file (JSON or notation, runs such as F_none^2..35 included);
    /// `-` reads standard input.
    schedule: PathBuf,
    /// Also check the schedule against this budget (exit 1 if over).
    #[arg(short, long, value_name = "SIZE", value_parser = size_arg)]
    memory: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    super::one_stdin(&[&args.chain, &args.schedule])?;
    let problem = load_problem(&args.chain)?;
    if let Problem::Graph(file) = &problem
        && super::graph::simulate_graph(file, &args.chain, &args.schedule, args.memory, args.json)?
    {
        return Ok(());
    }
    // `remat solve -a checkmate` on a chain file writes a graph schedule (of
    // the chain's forward graph): replay it on that graph.
    if let Problem::Chain(chain) = &problem
        && args.schedule.as_os_str() != "-"
        && is_graph_schedule(&args.schedule)
    {
        let file = crate::graph::GraphFile::Forward(crate::graph::ForwardGraph::from_chain(chain));
        if super::graph::simulate_graph(&file, &args.chain, &args.schedule, args.memory, args.json)? {
            return Ok(());
        }
    }
    let path = args.chain.display().to_string();
    let chain = problem.into_chain(&path, "`remat simulate` of a chain schedule").map_err(Failure::input)?;
    let (_, ops, replay) = replay_schedule_file(&chain, &args.schedule)?;
    let within = args.memory.map(|b| replay.peak_memory <= b);
    if args.json {
        let out = serde_json::json!({
            "valid": true,
            "operations": ops.len(),
            "makespan": replay.makespan,
            "peak_memory": replay.peak_memory,
            "peak_operation": replay.peak_index + 1,
            "budget": args.memory,
            "within_budget": within,
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        outln!("valid schedule of {} operations on chain {}", ops.len(), chain.name());
        outln!("makespan:    {:.2} (no recomputation: {:.2})", replay.makespan, chain.store_all_time());
        outln!(
            "peak memory: {} ({} bytes) during operation {} ({})",
            format_size(replay.peak_memory),
            replay.peak_memory,
            replay.peak_index + 1,
            ops[replay.peak_index]
        );
    }
    if let Some(budget) = args.memory {
        // Reuse the simulator's own budget check for the message; its kind
        // (over the budget: infeasible) is the exit code.
        if let Err(e) = crate::simulate_within(&chain, &ops, budget) {
            return Err(Failure::of(e.kind(), anyhow::anyhow!("{e} ({})", format_size(budget))));
        }
        if !args.json {
            outln!("fits the budget of {} ({budget} bytes)", format_size(budget));
        }
    }
    Ok(())
}

/// True when the file at `path` is a graph schedule (a JSON object with a
/// `status` key, as `remat solve` writes for graphs; chain schedules have
/// none). Unreadable files are not: the chain path reports them.
fn is_graph_schedule(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v.get("status").is_some())
}
