//! `remat compare`: every algorithm on one chain at one budget.

use std::path::PathBuf;

use crate::report::{Verdict, compare, reported};
use crate::size::format_size;
use crate::solve::{DEFAULT_SLOTS, SolveOptions};

use super::output::{out, outln};
use super::{CliResult, Failure, load_chain};

/// Run every algorithm at one budget and compare them in one table.
///
/// For each algorithm (remat's solvers and the baselines: store-all,
/// PyTorch's checkpoint_sequential, revolve, Chen et al.'s sqrt(L) and greedy)
/// prints the makespan, the overhead over store-all (no recomputation), the
/// peak memory and the solve time, every schedule replayed by the exact
/// simulator, then the gain of the fastest over the best checkpoint_sequential
/// within the budget. Infeasible algorithms give the smallest budget they can meet
/// (exit code 1 when none fits); exhaustive search is skipped on chains over
/// 12 stages.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file.
    chain: PathBuf,
    /// Memory budget: bytes, a size with a unit (90MiB, 8GiB, 1.5GB), or a
    /// share of the chain's store-all peak (90%, above 0 and at most 100). A
    /// plain number is bytes; under 1/1024 of store-all's peak it gets a note
    /// on stderr, in case a unit is missing.
    #[arg(short, long, value_name = "SIZE|SHARE", value_parser = super::memory_arg)]
    memory: super::MemoryArg,
    /// Memory slots S of the slot-based solvers (persistent, revolve).
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N", value_parser = super::slots_arg)]
    slots: std::num::NonZeroUsize,
    #[command(flatten)]
    exact: super::ExactArgs,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    let chain = load_chain(&args.chain, "`remat compare`")?;
    let memory = args.memory.bytes_for(&chain);
    let opts = SolveOptions { slots: args.slots, exact_memory: args.exact.get()?, ..SolveOptions::default() };
    let cmp = compare(&chain, memory, &reported(), &opts)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&cmp).expect("comparisons serialize"));
    } else {
        out!("{}", cmp.table());
    }
    if cmp.rows.iter().any(|r| matches!(r.verdict, Verdict::Solved { .. })) {
        return Ok(());
    }
    let lowest = cmp
        .rows
        .iter()
        .filter_map(|r| match r.verdict {
            Verdict::Infeasible { min_budget } => min_budget,
            _ => None,
        })
        .min();
    let hint = lowest.map(|m| format!("; the smallest budget one of them meets is {} ({m} bytes)", format_size(m)));
    Err(Failure::infeasible(anyhow::anyhow!(
        "no algorithm fits in {} ({} bytes){}",
        format_size(memory),
        memory,
        hint.unwrap_or_default()
    )))
}
