//! `remat show`: the memory timeline of one schedule.

use std::path::PathBuf;

use crate::report::timeline_svg;
use crate::size::format_size;

use super::output::outln;
use super::{CliResult, Failure, in_flight_json, in_flight_line, load_chain, replay_schedule_file, write_file};

/// Show the memory timeline of a schedule, operation by operation.
///
/// Replays the schedule with the exact simulator and prints, for each
/// operation, its time and the memory in use while it runs, by kind
/// (activations, recorded activations, gradients, transient workspace), and
/// once it ends. --plot draws the same as a stacked SVG chart with the budget
/// as a line (the schedule file's budget, or --memory). A schedule planned
/// for micro-batches in flight (its file's `in_flight`, or --in-flight) is
/// judged by its rank peak, its peak plus N - 1 residues, which is printed.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file.
    chain: PathBuf,
    /// Schedule file: JSON from `remat solve --json`, a JSON array of
    /// operations, or the paper's notation (F_ck^1 F_none^2 ... B^1), which
    /// may also be given as the argument itself; `-` reads standard input.
    schedule: PathBuf,
    /// Budget to draw and check (default: the one recorded in a JSON
    /// schedule): the peak, or with micro-batches in flight the rank peak,
    /// must fit it (exit 1 if not). Bytes, a size (90MiB) or a share of the
    /// chain's store-all peak (90%).
    #[arg(short, long, value_name = "SIZE|SHARE", value_parser = super::memory_arg)]
    memory: Option<super::MemoryArg>,
    /// Micro-batches a pipeline rank holds at once, each running this
    /// schedule (default: the schedule file's `in_flight`, else 1; at most
    /// 1048576).
    #[arg(long, value_name = "N", value_parser = super::in_flight_arg)]
    in_flight: Option<std::num::NonZeroUsize>,
    /// Write the timeline chart to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print the timeline as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    super::one_stdin(&[&args.chain, &args.schedule])?;
    if let Some(path) = &args.plot {
        super::output::refuse_input(path, "--plot", &[&args.chain, &args.schedule])?;
    }
    let chain = load_chain(&args.chain, "`remat show`")?;
    let file = replay_schedule_file(&chain, &args.schedule)?;
    let (recorded, replay) = (&file.recorded, &file.replay);
    let in_flight = file.in_flight(args.in_flight);
    let budget = args.memory.as_ref().map(|m| m.bytes_for(&chain)).or(recorded.as_ref().map(|s| s.budget));
    if let Some(path) = &args.plot {
        let who = recorded.as_ref().map(|s| format!(" ({})", s.algorithm)).unwrap_or_default();
        let title = format!("{}{who}: memory timeline", chain.name());
        write_file(path, &timeline_svg(replay, budget, &title))?;
        eprintln!("wrote {}", path.display());
    }
    if args.json {
        let mut out = serde_json::json!({ "budget": budget, "replay": replay });
        if let (Some(out), serde_json::Value::Object(more)) = (out.as_object_mut(), in_flight_json(in_flight, replay)) {
            out.extend(more);
        }
        outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        outln!(
            "{:>5}  {:<10} {:>8}  {:>12} {:>12} {:>12} {:>12}  {:>12}",
            "#",
            "operation",
            "time",
            "activations",
            "recorded",
            "gradients",
            "transient",
            "after"
        );
        for (i, s) in replay.steps.iter().enumerate() {
            let d = &s.during;
            let mark = if i == replay.peak_index { "  <- peak" } else { "" };
            outln!(
                "{:>5}  {:<10} {:>8.2}  {:>12} {:>12} {:>12} {:>12}  {:>12}{mark}",
                i + 1,
                s.op.to_string(),
                op_time(&chain, s.op),
                format_size(d.activations),
                format_size(d.saved),
                format_size(d.gradients),
                format_size(d.transient),
                format_size(s.after.total()),
            );
        }
        outln!(
            "makespan {:.2}; peak {} ({} bytes) during operation {}",
            replay.makespan,
            format_size(replay.peak_memory),
            replay.peak_memory,
            replay.peak_index + 1
        );
        if in_flight > 1 {
            outln!("{}", in_flight_line(in_flight, replay));
        }
    }
    if let Some(b) = budget {
        if replay.peak_memory > b {
            return Err(Failure::infeasible(anyhow::anyhow!(
                "the schedule's peak {} is over the budget of {} ({b} bytes)",
                format_size(replay.peak_memory),
                format_size(b)
            )));
        }
        if replay.rank_peak(in_flight).is_none_or(|r| r > b) {
            return Err(Failure::infeasible(anyhow::anyhow!(
                "with {in_flight} micro-batches in flight the schedule's rank peak (its peak plus {} residues of {}) \
                 is over the budget of {} ({b} bytes)",
                in_flight - 1,
                format_size(replay.residue()),
                format_size(b)
            )));
        }
    }
    Ok(())
}

fn op_time(chain: &crate::Chain, op: crate::Op) -> f64 {
    if op.is_forward() { chain.forward_time(op.stage()) } else { chain.backward_time(op.stage()) }
}
