//! `remat pipeline`: a chain split into pipeline ranks, each rank's plan for
//! the micro-batches it holds, against checkpointing every block.

use std::path::PathBuf;

use crate::report::pipeline::{PipelinePlan, PipelineSchedule, balanced_split, memory_aware_split, plan};
use crate::schedule::notation;
use crate::size::format_size;
use crate::solve::{DEFAULT_SLOTS, SolveOptions};

use super::output::outln;
use super::{CliResult, Failure, load_chain, size_arg};

/// Plan a pipeline: split a chain into ranks and plan each for the
/// micro-batches it holds in flight.
///
/// Checkpointing every block runs on the split of --ranks contiguous ranges
/// of balanced time; remat chooses its own split, the one whose slowest rank
/// is fastest within the budget (--split fixes one for both). Rank k holds all micro-batches under GPipe and
/// min(P - k, M) under 1F1B, so each rank's schedule is planned for its own
/// count (`remat solve --in-flight N`): its peak plus N - 1 residues fits the
/// budget. Printed per rank: stages, micro-batches in flight, the rank peak
/// and time per micro-batch of remat's plan and of checkpointing every block
/// (what HF's gradient_checkpointing_enable does), then each pipeline's step
/// time, (M + P - 1) x the slowest rank. Without --memory the budget is the
/// largest rank peak of checkpointing every block, so the two are compared at
/// the same memory. Communication buffers, parameters, their gradients and
/// the optimizer are not counted: subtract them from the device first.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (the whole network).
    chain: PathBuf,
    /// Pipeline ranks P (stages of the pipeline), from 1 to the chain's stages.
    #[arg(short = 'p', long, value_name = "P", required_unless_present = "split")]
    ranks: Option<usize>,
    /// The stages of each rank, as their counts: `--split 4,4,5` (overrides
    /// --ranks).
    #[arg(long, value_name = "N,N,..", value_delimiter = ',')]
    split: Option<Vec<usize>>,
    /// Micro-batches per step M (at most 1048576).
    #[arg(long, default_value = "8", value_name = "M", value_parser = super::micro_batches_count_arg)]
    micro_batches: std::num::NonZeroUsize,
    /// The pipeline schedule: 1f1b or gpipe.
    #[arg(long, default_value = "1f1b", value_name = "KIND")]
    schedule: PipelineSchedule,
    /// Memory of each rank for activations: bytes or a size (8GiB), one for
    /// every rank or one per rank (`8GiB,8GiB,6GiB,6GiB`). Default: the
    /// largest rank peak of checkpointing every block.
    #[arg(short, long, value_name = "SIZE[,SIZE..]", value_parser = size_arg, value_delimiter = ',')]
    memory: Option<Vec<u64>>,
    /// Memory slots S of the slot-based solvers.
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N", value_parser = super::slots_arg)]
    slots: std::num::NonZeroUsize,
    #[command(flatten)]
    exact: super::ExactArgs,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    let chain = load_chain(&args.chain, "`remat pipeline`")?;
    let micro_batches = args.micro_batches.get();
    let given = match &args.split {
        Some(counts) => {
            // Summed exactly: a count near usize::MAX once wrapped the sum
            // around to the chain's length (issue 36).
            let total: u128 = counts.iter().map(|&c| c as u128).sum();
            if counts.contains(&0) || total != chain.len() as u128 {
                return Err(Failure::input(anyhow::anyhow!(
                    "--split {} must give every rank at least one stage and add up to the chain's {} stages (it \
                     adds up to {total})",
                    counts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
                    chain.len()
                )));
            }
            let mut first = 1;
            Some(
                counts
                    .iter()
                    .map(|&c| {
                        first += c;
                        first - c..=first - 1
                    })
                    .collect::<Vec<_>>(),
            )
        }
        None => None,
    };
    let input = |e| Failure::input(anyhow::Error::from(e));
    let ranks = given.as_ref().map_or(args.ranks.unwrap_or(1), Vec::len);
    let balanced = match &given {
        Some(split) => split.clone(),
        None => balanced_split(&chain, ranks).map_err(input)?,
    };
    let opts = SolveOptions { slots: args.slots, exact_memory: args.exact.get()?, ..SolveOptions::default() };
    // Checkpointing every block on the time-balanced split fixes the budget
    // when none is given.
    if let Some(m) = &args.memory
        && m.len() != 1
        && m.len() != ranks
    {
        return Err(Failure::input(anyhow::anyhow!(
            "--memory gives {} sizes for {ranks} ranks: give one for every rank or one per rank",
            m.len()
        )));
    }
    let baseline =
        plan(&chain, &balanced, args.schedule, micro_batches, args.memory.as_deref(), &opts).map_err(input)?;
    let budgets = baseline.budgets.clone();
    let split = match given {
        Some(split) => split,
        None => memory_aware_split(&chain, ranks, args.schedule, micro_batches, &budgets, &opts)
            .map_err(input)?
            .unwrap_or(balanced),
    };
    let remat = plan(&chain, &split, args.schedule, micro_batches, Some(&budgets), &opts).map_err(input)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&json(&remat, &baseline)).expect("json"));
    } else {
        print(&remat, &baseline, chain.name(), args.split.is_some());
    }
    for (k, r) in remat.ranks.iter().enumerate() {
        if let Err(e) = &r.remat {
            let what = anyhow::anyhow!("rank {k} (stages {}-{}): {e}", r.stages.start(), r.stages.end());
            return Err(Failure::of(e.kind(), what));
        }
    }
    Ok(())
}

fn print(remat: &PipelinePlan, baseline: &PipelinePlan, name: &str, given: bool) {
    let budgets = &remat.budgets;
    let same = budgets.windows(2).all(|w| w[0] == w[1]);
    let each = if same { format!("{} a rank", format_size(budgets[0])) } else { "budgets per rank".to_string() };
    outln!(
        "pipeline:    {name}, {} ranks, {} micro-batches, {}; {each}",
        remat.ranks.len(),
        remat.micro_batches,
        remat.schedule
    );
    let header = || {
        outln!(
            "{:>6}  {:>9}  {:>9}  {:>10}  {:>10}  {:>16}  {:>10}",
            "rank",
            "stages",
            "in flight",
            "budget",
            "residue",
            "rank peak",
            "time"
        )
    };
    let split = if given { "the split given" } else { "split for the slowest rank under the budget" };
    outln!("remat ({split}):");
    header();
    for (k, r) in remat.ranks.iter().enumerate() {
        let (residue, peak, time) = match &r.remat {
            Ok(s) => (
                format_size(s.replay.residue()),
                rank_peak_text(s.replay.rank_peak(r.in_flight)),
                format!("{:.2}", s.schedule.makespan),
            ),
            Err(_) => ("-".to_string(), "does not fit".to_string(), "-".to_string()),
        };
        let stages = format!("{}-{}", r.stages.start(), r.stages.end());
        let budget = format_size(budgets[k]);
        outln!("{k:>6}  {stages:>9}  {:>9}  {budget:>10}  {residue:>10}  {peak:>16}  {time:>10}", r.in_flight);
    }
    let split = if given { "the split given" } else { "time-balanced split" };
    outln!("checkpointing every block ({split}):");
    header();
    for (k, r) in baseline.ranks.iter().enumerate() {
        let e = &r.every_block;
        let peak = e.replay.rank_peak(r.in_flight);
        let over = if peak.is_none_or(|p| p > budgets[k]) { " (over)" } else { "" };
        let stages = format!("{}-{}", r.stages.start(), r.stages.end());
        outln!(
            "{k:>6}  {stages:>9}  {:>9}  {:>10}  {:>10}  {:>16}  {:>10.2}",
            r.in_flight,
            format_size(budgets[k]),
            format_size(e.replay.residue()),
            format!("{}{over}", rank_peak_text(peak)),
            e.schedule.makespan
        );
    }
    let every = baseline.every_block_step_time();
    match remat.step_time() {
        Some(step) => outln!(
            "step time:   remat {step:.2}, checkpointing every block {every:.2}{}; (M + P - 1) x the slowest rank, \
             communication not counted",
            // No share of a zero time (it printed "NaN%").
            super::overhead(step, every).map(|o| format!(" ({o})")).unwrap_or_default()
        ),
        None => outln!("step time:   checkpointing every block {every:.2}; remat has no plan for every rank"),
    }
    outln!("schedules (one micro-batch, stages numbered within the rank):");
    for (k, r) in remat.ranks.iter().enumerate() {
        if let Ok(s) = &r.remat {
            outln!("  rank {k}: {}", notation(&s.schedule.operations));
        }
    }
}

/// A rank peak for people; one past `u64::MAX` bytes says so.
fn rank_peak_text(peak: Option<u64>) -> String {
    peak.map_or_else(|| format!("over {}", format_size(u64::MAX)), format_size)
}

fn json(remat: &PipelinePlan, baseline: &PipelinePlan) -> serde_json::Value {
    let ranks: Vec<serde_json::Value> = remat
        .ranks
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let plan = match &r.remat {
                Ok(s) => serde_json::json!({
                    "status": "solved", "algorithm": s.schedule.algorithm, "makespan": s.schedule.makespan,
                    "peak_memory": s.schedule.peak_memory, "residue": s.replay.residue(),
                    "rank_peak": s.replay.rank_peak(r.in_flight), "schedule": s.schedule,
                }),
                Err(e) => serde_json::json!({"status": "error", "message": e.to_string()}),
            };
            serde_json::json!({
                "rank": k, "first_stage": r.stages.start(), "last_stage": r.stages.end(), "in_flight": r.in_flight,
                "budget": remat.budgets[k], "plan": plan,
            })
        })
        .collect();
    let every_block: Vec<serde_json::Value> = baseline
        .ranks
        .iter()
        .enumerate()
        .map(|(k, r)| {
            serde_json::json!({
                "rank": k, "first_stage": r.stages.start(), "last_stage": r.stages.end(), "in_flight": r.in_flight,
                "makespan": r.every_block.schedule.makespan, "peak_memory": r.every_block.schedule.peak_memory,
                "residue": r.every_block.replay.residue(), "rank_peak": r.every_block.replay.rank_peak(r.in_flight),
            })
        })
        .collect();
    serde_json::json!({
        "schedule": remat.schedule.name(), "micro_batches": remat.micro_batches, "budgets": remat.budgets,
        "ranks": ranks, "step_time": remat.step_time(),
        "every_block": every_block, "every_block_step_time": baseline.every_block_step_time(),
    })
}
