//! `remat sweep`: trade-off curves of every algorithm over a range of budgets.

use std::path::PathBuf;

use crate::report::{reported, sweep, tradeoff_svg};
use crate::solve::{DEFAULT_SLOTS, SolveOptions};

use super::output::out;
use super::{CliResult, Progress, load_chain, size_arg, write_file};

/// Trade-off curves: makespan against memory for every algorithm.
///
/// Solves the chain with every algorithm at STEPS budgets evenly spaced from
/// --from to --to (by default from the smallest budget any of them can meet to
/// store-all's peak, above which nothing changes), in parallel, and
/// checkpoint_sequential with every number of segments K. Prints CSV (or JSON
/// with --json); --plot draws makespan against peak memory as SVG, the way the
/// Rotor paper's figures do.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file.
    chain: PathBuf,
    /// Smallest budget of the sweep (default: the smallest any algorithm meets).
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    from: Option<u64>,
    /// Largest budget of the sweep (default: store-all's peak).
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    to: Option<u64>,
    /// Number of budgets, evenly spaced, both ends included.
    #[arg(long, default_value_t = 25, value_name = "N", value_parser = super::steps_arg)]
    steps: usize,
    /// Memory slots S of the slot-based solvers (persistent, revolve).
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N", value_parser = super::slots_arg)]
    slots: std::num::NonZeroUsize,
    #[command(flatten)]
    exact: super::ExactArgs,
    /// Print JSON instead of CSV.
    #[arg(long)]
    json: bool,
    /// Write the trade-off chart (makespan against peak memory) to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Write the CSV or JSON to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> CliResult {
    if let (Some(plot), Some(output)) = (&args.plot, &args.output) {
        super::output::refuse_same_output(&[("--output", output), ("--plot", plot)])?;
    }
    for (flag, path) in [("--plot", &args.plot), ("--output", &args.output)] {
        if let Some(path) = path {
            super::output::refuse_input(path, flag, &[&args.chain])?;
        }
    }
    let chain = load_chain(&args.chain, "`remat sweep`")?;
    let opts = SolveOptions { slots: args.slots, exact_memory: args.exact.get()?, ..SolveOptions::default() };
    if let (Some(from), Some(to)) = (args.from, args.to)
        && from > to
    {
        return Err(super::Failure::input(anyhow::anyhow!("--from ({from} bytes) is above --to ({to} bytes)")));
    }
    let budgets = sweep::budgets(&chain, &reported(), &opts, args.from, args.to, args.steps)?;
    let progress = Progress::new("sweep");
    let update = |done, total| progress.update(done, total);
    let result = sweep(&chain, &budgets, &reported(), &opts, Some(&update))?;
    drop(progress);
    let text =
        if args.json { serde_json::to_string_pretty(&result).expect("sweeps serialize") + "\n" } else { result.csv() };
    if let Some(path) = &args.plot {
        write_file(path, &tradeoff_svg(&result))?;
        eprintln!("wrote {}", path.display());
    }
    match &args.output {
        Some(path) => write_file(path, &text)?,
        None => out!("{text}"),
    }
    Ok(())
}
