//! `remat min-memory`: the smallest budget that works.

use std::path::PathBuf;

use crate::size::format_size;
use crate::solve::{
    Algorithm, DEFAULT_SLOTS, SolveOptions, any_min_budget, limits, min_budget, min_budget_for_makespan,
};

use super::output::outln;
use super::solve::parse_algorithm;
use super::{CliResult, Progress, load_chain};

/// Print the smallest memory budget any schedule can meet, and the smallest the
/// chosen algorithm meets (with its slot rounding, and exactly).
///
/// The any-schedule minimum is exact when the floating DP's nested minimum
/// meets a lower bound every schedule obeys (usual; any length up to 500
/// stages) or the chain is small enough for exhaustive search (14 stages);
/// otherwise both bounds are printed.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file.
    chain: PathBuf,
    /// Algorithm whose smallest budget to report; auto (the default) is what
    /// `remat solve` runs.
    #[arg(short, long, default_value = "auto", value_parser = parse_algorithm)]
    algorithm: Algorithm,
    /// Memory slots S the algorithm would use.
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N", value_parser = super::slots_arg)]
    slots: std::num::NonZeroUsize,
    /// Also find the smallest budget at which `remat solve` (with this
    /// --algorithm and --slots) meets a makespan at most PCT percent above
    /// store-all's (no recomputation): `--max-overhead 10` or `10%`. A
    /// bisection over bytes that solves at each step: `solve` meets the
    /// overhead at the budget printed and not one byte below it.
    #[arg(long, value_name = "PCT", value_parser = percent_arg)]
    max_overhead: Option<f64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Parses a percentage, `10` or `10%`: finite and not negative.
fn percent_arg(s: &str) -> Result<f64, String> {
    let p: f64 = s.trim().trim_end_matches('%').parse().map_err(|_| format!("`{s}` is not a percentage"))?;
    if !p.is_finite() || p < 0.0 {
        return Err(format!("`{s}` is not a percentage of at least 0"));
    }
    Ok(p)
}

pub fn run(args: Args) -> CliResult {
    let chain = load_chain(&args.chain, "`remat min-memory`")?;
    let any_opts = SolveOptions { slots: args.slots, ..SolveOptions::default() };
    if matches!(args.algorithm, Algorithm::Persistent | Algorithm::Revolve | Algorithm::Auto) {
        // Allowed, but long: say so before the wait (2,000 stages: minutes).
        let seconds = limits::seconds_for(limits::min_budget_steps(&chain, &any_opts));
        if seconds > 30.0 {
            eprintln!(
                "note: the smallest {} budget of this {}-stage chain takes about {:.0} s to find; --algorithm \
                 chen-sqrt answers at once, and a chain with fewer, larger stages sooner",
                args.algorithm,
                chain.len(),
                seconds
            );
        }
    }
    let any = any_min_budget(&chain)?;
    let any_exact = (any.lower == any.upper).then_some(any.upper);
    let with_slots =
        min_budget(&chain, args.algorithm, &SolveOptions { slots: args.slots, ..SolveOptions::default() })?;
    let exact = min_budget(
        &chain,
        args.algorithm,
        &SolveOptions { slots: std::num::NonZeroUsize::MAX, ..SolveOptions::default() },
    )?;
    let within = match args.max_overhead {
        Some(pct) => {
            let limit = chain.store_all_time() * (1.0 + pct / 100.0);
            let progress = Progress::new("bisection over budgets");
            let update = |done, total| progress.update(done, total);
            let opts = SolveOptions { slots: args.slots, progress: Some(&update), ..SolveOptions::default() };
            Some((pct, min_budget_for_makespan(&chain, limit, args.algorithm, &opts)?))
        }
        None => None,
    };
    let base = chain.store_all_time();
    if args.json {
        let out = serde_json::json!({
            "chain": chain.name(),
            "any_schedule": any_exact,
            "any_schedule_lower": any.lower,
            "any_schedule_upper": any.upper,
            "any_schedule_method": any.method,
            "algorithm": args.algorithm.name(),
            "slots": args.slots.get(),
            "algorithm_min": with_slots,
            "algorithm_min_exact": exact,
            "max_overhead": within.as_ref().map(|(pct, sol)| serde_json::json!({
                "percent": pct,
                "budget": sol.as_ref().map(|s| s.schedule.budget),
                "makespan": sol.as_ref().map(|s| s.schedule.makespan),
                "peak_memory": sol.as_ref().map(|s| s.schedule.peak_memory),
            })),
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return Ok(());
    }
    let show = |b: Option<u64>| match b {
        Some(b) => format!("{} ({b} bytes)", format_size(b)),
        None => "none (no budget works with these options)".to_string(),
    };
    match any_exact {
        Some(bytes) => outln!("any schedule:            {} [{}]", show(Some(bytes)), any.method),
        None => outln!(
            "any schedule:            between {} and {} [{}]",
            show(Some(any.lower)),
            show(Some(any.upper)),
            any.method
        ),
    }
    outln!("{:<24} {}", format!("{}, {} slots:", args.algorithm, args.slots), show(with_slots));
    outln!("{:<24} {}", format!("{}, exact:", args.algorithm), show(exact));
    if let Some((pct, sol)) = within {
        let label = format!("{}, within +{pct}%:", args.algorithm);
        match sol {
            Some(sol) => {
                let s = &sol.schedule;
                let over = super::overhead(s.makespan, base).unwrap_or_else(|| "+0.0%".into());
                outln!(
                    "{label:<24} {} (makespan {:.2}, {over}; the schedule's peak: {} ({} bytes))",
                    show(Some(s.budget)),
                    s.makespan,
                    format_size(s.peak_memory),
                    s.peak_memory
                );
            }
            None => outln!("{label:<24} none (no schedule is that fast)"),
        }
    }
    Ok(())
}
