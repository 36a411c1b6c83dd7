//! `remat mincut`: the fusion-aware min-cut partition of a joint graph, or the
//! least recompute cost within a byte budget, beside the two baselines.

use std::path::PathBuf;

use crate::joint::budget::{BudgetOptions, Stopped};
use crate::joint::{self, Answer, BudgetError, Method, OperatorGraph, Partition};
use crate::size::format_size;

use super::output::outln;
use super::{CliResult, Failure, size_arg};

/// The most points `--pareto` prints.
const MAX_PARETO_POINTS: usize = 200;
/// The largest `--time-limit` (as `remat solve`'s): beyond it a duration
/// overflows.
const MAX_TIME_LIMIT: f64 = 1e9;

/// Choose which forward values a joint (forward + backward) graph saves for
/// the backward: the paper's fusion-aware min-cut (least memory traffic), or
/// with --memory the least recompute cost whose saved bytes fit (an ILP,
/// proven optimal; random ops are never recomputed).
///
/// The joint graph's JSON form is in docs/joint.md (`remat.torch.export_joint`
/// writes it from a PyTorch function).
#[derive(clap::Args)]
pub struct Args {
    /// Joint graph file (JSON).
    joint: PathBuf,
    /// Byte budget for the saved activations (saved primals are free: they
    /// are alive anyway): 64MiB, 1.5GB, 100000.
    #[arg(short, long, value_parser = size_arg, value_name = "SIZE")]
    memory: Option<u64>,
    /// Print the whole front of saved bytes against recompute cost.
    #[arg(long, conflicts_with = "memory")]
    pareto: bool,
    /// Evaluate this saved set instead (comma-separated node names, e.g.
    /// PyTorch's): its bytes, traffic, recomputed nodes and recompute cost.
    #[arg(long, value_delimiter = ',', value_name = "NAMES", conflicts_with_all = ["memory", "pareto"])]
    saved: Option<Vec<String>>,
    /// Seconds each ILP solve of --memory may take, or the whole --pareto front
    /// (0: no limit); past it the answer is the Lagrangian one, marked not
    /// proven optimal, with its bound (--pareto prints the points found so far
    /// and says it stopped).
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    time_limit: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `remat mincut`.
pub fn run(args: Args) -> CliResult {
    let text = std::fs::read_to_string(&args.joint)
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot read joint graph `{}`: {e}", args.joint.display())))?;
    let graph = OperatorGraph::from_json(&text)
        .map_err(|e| Failure::input(anyhow::anyhow!("joint graph `{}`: {e}", args.joint.display())))?;
    if !(args.time_limit.is_finite() && args.time_limit >= 0.0 && args.time_limit <= MAX_TIME_LIMIT) {
        return Err(Failure::input(anyhow::anyhow!(
            "--time-limit must be a number of seconds from 0 to {MAX_TIME_LIMIT:e}, not {}",
            args.time_limit
        )));
    }
    let options = BudgetOptions { time_limit: (args.time_limit > 0.0).then_some(args.time_limit) };
    if args.pareto {
        return pareto(&graph, &options, args.json);
    }
    let answer = match &args.saved {
        Some(names) => joint::partition_saved(&graph, names).map_err(Failure::input)?,
        None => joint::partition_with(&graph, args.memory, &options).map_err(|e| {
            if let BudgetError::Infeasible { budget, smallest } = e
                && args.json
            {
                // Scripts sweeping budgets get the answer on stdout too, as from `remat solve`.
                let out = serde_json::json!({"status": "infeasible", "budget": budget, "min_budget": smallest});
                outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
            }
            Failure::of(e.kind(), e)
        })?,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&answer).expect("serializable"));
    } else {
        print_answer(&answer);
    }
    Ok(())
}

fn seconds(s: f64) -> String {
    if s == 0.0 {
        "0".to_string()
    } else if s < 1e-6 {
        format!("{:.3} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.3} us", s * 1e6)
    } else {
        format!("{:.3} ms", s * 1e3)
    }
}

fn names(list: &[String]) -> String {
    if list.is_empty() { "(none)".to_string() } else { list.join(", ") }
}

fn print_answer(a: &Answer) {
    match a.memory {
        None if a.method == Method::Given => outln!("joint graph `{}`: the given saved set", a.graph),
        None => outln!("joint graph `{}`: fusion-aware min-cut", a.graph),
        Some(m) => outln!(
            "joint graph `{}`: least recompute cost within {} ({})",
            a.graph,
            format_size(m),
            if a.optimal == Some(true) {
                "proven optimal".to_string()
            } else {
                format!("NOT proven optimal: the least cost is at least {}", seconds(a.bound_seconds.unwrap_or(0.0)))
            }
        ),
    }
    outln!(
        "saved ({}, of which activations {}): {}",
        format_size(a.chosen.saved_bytes),
        format_size(a.chosen.activation_bytes),
        names(&a.chosen.saved)
    );
    outln!("recomputed in the backward: {}", names(&a.chosen.recomputed));
    outln!();
    outln!(
        "{:<22} {:>12} {:>12} {:>16} {:>14} {:>7}",
        "",
        "saved",
        "activations",
        "traffic fw<->bw",
        "recompute",
        "nodes"
    );
    let row = |label: &str, p: &Partition| {
        outln!(
            "{:<22} {:>12} {:>12} {:>16} {:>14} {:>7}",
            label,
            format_size(p.saved_bytes),
            format_size(p.activation_bytes),
            format_size(p.traffic_bytes),
            seconds(p.recompute_seconds),
            p.saved.len()
        );
    };
    match a.method {
        Method::Budget => row("within budget", &a.chosen),
        Method::Given => row("given", &a.chosen),
        Method::MinCut => {}
    }
    row("min-cut", &a.min_cut);
    row("save everything", &a.save_all);
    row("recompute everything", &a.recompute_all);
    outln!();
    outln!("smallest budget (activations; random ops never recomputed): {}", format_size(a.smallest_budget));
    if !a.banned.is_empty() {
        let list: Vec<String> = a.banned.iter().map(|b| format!("{} ({:?})", b.node, b.reason)).collect();
        outln!("banned from recompute by the min-cut: {}", list.join(", "));
    }
}

fn pareto(graph: &OperatorGraph, options: &BudgetOptions, json: bool) -> CliResult {
    let (points, stopped) =
        joint::pareto_with(graph, MAX_PARETO_POINTS, options).map_err(|e| Failure::of(e.kind(), e))?;
    if stopped == Some(Stopped::TimeLimit) {
        eprintln!(
            "warning: --pareto stopped at the time limit ({} s) after {} points; the front is incomplete (a larger \
             --time-limit, or 0 for none, finds more)",
            options.time_limit.unwrap_or(0.0),
            points.len()
        );
    }
    if json {
        let rows: Vec<serde_json::Value> =
            points.iter().map(|(p, optimal)| serde_json::json!({ "partition": p, "optimal": optimal })).collect();
        outln!("{}", serde_json::to_string_pretty(&rows).expect("serializable"));
        return Ok(());
    }
    outln!("joint graph `{}`: saved bytes against least recompute cost", graph.name());
    outln!("{:>12} {:>14} {:>8}  saved", "activations", "recompute", "optimal");
    for (p, optimal) in &points {
        outln!(
            "{:>12} {:>14} {:>8}  {}",
            format_size(p.activation_bytes),
            seconds(p.recompute_seconds),
            if *optimal { "yes" } else { "no" },
            names(&p.saved)
        );
    }
    match stopped {
        Some(Stopped::MaxPoints) => outln!("(stopped after {MAX_PARETO_POINTS} points)"),
        Some(Stopped::TimeLimit) => outln!("(stopped at the time limit after {} points)", points.len()),
        None => {}
    }
    Ok(())
}
