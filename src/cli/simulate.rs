//! `remat simulate`: replay a schedule on a chain.

use std::path::PathBuf;

use crate::Problem;
use crate::size::format_size;

use super::output::outln;
use super::{CliResult, Failure, in_flight_json, in_flight_line, load_problem, replay_schedule_file};

/// Replay a schedule on a chain with the exact simulator.
///
/// Checks every dependency of the operation table and prints the makespan and
/// the peak memory, or the first invalid operation and why. The schedule file
/// may be JSON written by `remat solve --json`, a JSON array of
/// {"op": "F_ck", "stage": 1} objects, or the paper's notation as text
/// (F_ck^1 F_none^2 F_all^3 ... B^1); the notation may also be given as the
/// argument itself. A schedule planned for micro-batches in flight (`remat
/// solve --in-flight N`, or --in-flight here) is judged by its rank peak:
/// its peak plus N - 1 residues, the residue being what it stores before its
/// first backward. A JSON schedule's recorded figures (peak, residue,
/// makespan) must be its replay's on the chain it names.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file, or graph file (the schedule is then a graph schedule);
    /// `-` reads standard input.
    chain: PathBuf,
    /// Schedule file (JSON or notation, runs such as F_none^2..35 included),
    /// or the notation itself ("F_ck^1 F_none^2..3 ... B^1"); `-` reads
    /// standard input.
    schedule: PathBuf,
    /// Also check the schedule against this budget (exit 1 if over): its
    /// peak, or with micro-batches in flight its rank peak. Bytes, a size
    /// (90MiB) or a share of the chain's store-all peak (90%).
    #[arg(short, long, value_name = "SIZE|SHARE", value_parser = super::memory_arg)]
    memory: Option<super::MemoryArg>,
    /// Micro-batches a pipeline rank holds at once, each running this
    /// schedule (default: the schedule file's `in_flight`, else 1; at most
    /// 1048576). Chains only.
    #[arg(long, value_name = "N", value_parser = super::in_flight_arg)]
    in_flight: Option<std::num::NonZeroUsize>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    super::one_stdin(&[&args.chain, &args.schedule])?;
    let problem = load_problem(&args.chain)?;
    if let (Problem::Graph(_), Some(n)) = (&problem, args.in_flight) {
        return Err(Failure::input(anyhow::anyhow!(
            "--in-flight {n} applies to chain schedules; `{}` is a graph",
            args.chain.display()
        )));
    }
    let memory = args.memory.as_ref().map(|m| m.bytes_of(&problem)).transpose()?;
    if let Problem::Graph(file) = &problem
        && super::graph::simulate_graph(file, &args.chain, &args.schedule, memory, args.json)?
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
        if super::graph::simulate_graph(&file, &args.chain, &args.schedule, memory, args.json)? {
            return Ok(());
        }
    }
    let path = args.chain.display().to_string();
    let chain = problem.into_chain(&path, "`remat simulate` of a chain schedule").map_err(Failure::input)?;
    let file = replay_schedule_file(&chain, &args.schedule)?;
    let (ops, replay) = (&file.ops, &file.replay);
    let in_flight = file.in_flight(args.in_flight);
    // What the budget must hold: the peak, or the rank peak with
    // micro-batches in flight (`None`: past u64::MAX bytes, over any budget).
    let needed = replay.rank_peak(in_flight);
    let within = memory.map(|b| needed.is_some_and(|n| n <= b));
    if args.json {
        let mut out = serde_json::json!({
            "valid": true,
            "operations": ops.len(),
            "makespan": replay.makespan,
            "peak_memory": replay.peak_memory,
            "peak_operation": replay.peak_index + 1,
            "budget": memory,
            "within_budget": within,
        });
        if let (Some(out), serde_json::Value::Object(more)) = (out.as_object_mut(), in_flight_json(in_flight, replay)) {
            out.extend(more);
        }
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
        if in_flight > 1 {
            outln!("{}", in_flight_line(in_flight, replay));
        }
    }
    if let Some(budget) = memory {
        // Reuse the simulator's own budget check for the message; its kind
        // (over the budget: infeasible) is the exit code.
        if let Err(e) = crate::simulate_within(&chain, ops, budget) {
            return Err(Failure::of(e.kind(), anyhow::anyhow!("{e} ({})", format_size(budget))));
        }
        if within != Some(true) {
            let rank = needed.map_or_else(|| "more than a u64 holds".to_string(), |n| format!("{n} bytes"));
            return Err(Failure::infeasible(anyhow::anyhow!(
                "with {in_flight} micro-batches in flight the rank peak, the peak plus {} residues of {} bytes, is \
                 {rank}, over the budget of {} ({budget} bytes)",
                in_flight - 1,
                replay.residue(),
                format_size(budget)
            )));
        }
        if !args.json {
            let what = if in_flight > 1 { "rank peak fits" } else { "fits" };
            outln!("{what} the budget of {} ({budget} bytes)", format_size(budget));
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
