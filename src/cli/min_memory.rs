//! `remat min-memory`: the smallest budget that works.

use std::path::PathBuf;

use remat::size::format_size;
use remat::solve::{Algorithm, DEFAULT_SLOTS, SolveOptions, min_budget, min_budget_any};

use super::solve::parse_algorithm;
use super::{CliResult, Failure, load_chain};

/// Print the smallest memory budget any schedule can meet, and the smallest the
/// chosen algorithm meets (with its slot rounding, and exactly).
#[derive(clap::Args)]
pub struct Args {
    /// Chain file.
    chain: PathBuf,
    /// Algorithm whose smallest budget to report.
    #[arg(short, long, default_value = "persistent", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Memory slots S the algorithm would use.
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N")]
    slots: usize,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    if args.slots == 0 {
        return Err(Failure::input(anyhow::anyhow!("--slots must be at least 1")));
    }
    let chain = load_chain(&args.chain)?;
    let any = min_budget_any(&chain);
    let with_slots =
        min_budget(&chain, args.algorithm, &SolveOptions { slots: args.slots, ..SolveOptions::default() })?;
    let exact = min_budget(&chain, args.algorithm, &SolveOptions { slots: usize::MAX, ..SolveOptions::default() })?;
    if args.json {
        let out = serde_json::json!({
            "chain": chain.name(),
            "any_schedule": any.map(|a| a.0),
            "any_schedule_method": any.map(|a| a.1),
            "algorithm": args.algorithm.name(),
            "slots": args.slots,
            "algorithm_min": with_slots,
            "algorithm_min_exact": exact,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return Ok(());
    }
    let show = |b: Option<u64>| match b {
        Some(b) => format!("{} ({b} bytes)", format_size(b)),
        None => "none (no budget works with these options)".to_string(),
    };
    match any {
        Some((bytes, how)) => println!("any schedule:            {} [{how}]", show(Some(bytes))),
        None => println!(
            "any schedule:            not computed exactly for chains over {} stages; \
             at most the {} figure below",
            remat::solve::exhaustive::MAX_STAGES,
            args.algorithm
        ),
    }
    println!("{:<24} {}", format!("{}, {} slots:", args.algorithm, args.slots), show(with_slots));
    println!("{:<24} {}", format!("{}, exact:", args.algorithm), show(exact));
    Ok(())
}
