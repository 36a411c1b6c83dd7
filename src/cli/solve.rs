//! `remat solve`: the fastest schedule of a chain under a budget.

use std::path::PathBuf;

use crate::graph::GraphSolveError;
use crate::problem::{self, Method, Options, Outcome};
use crate::schedule::{summary, wrapped_notation};
use crate::size::format_size;
use crate::solve::{Algorithm, DEFAULT_SLOTS, Solution, SolveError, SolveOptions, memory_estimate};
use crate::{Chain, Problem};

use super::output::outln;
use super::{CliResult, Failure, Progress, load_problem, write_file};

/// Compute the fastest schedule of a chain that fits a memory budget.
///
/// Prints the schedule in the paper's notation (F_ck^1 F_none^2 F_all^3 ... B^1)
/// with its makespan and peak memory as replayed by the exact simulator.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (JSON: name, input_size, stages[], optional loss), or graph
    /// file (JSON with nodes[]: a forward graph, or a joint graph with
    /// "joint": true; see docs/guide.md). `-` reads standard input.
    chain: PathBuf,
    /// Memory budget: bytes, a size with a unit (90MiB, 8GiB, 1.5GB), or a
    /// share of the chain's store-all peak (90%, above 0 and at most 100). A
    /// plain number is bytes; under 1/1024 of store-all's peak it gets a note
    /// on stderr, in case a unit is missing.
    #[arg(short, long, value_name = "SIZE|SHARE", value_parser = super::memory_arg)]
    memory: super::MemoryArg,
    /// Solver. On a chain, auto (the default) runs exhaustive search on chains
    /// of at most 10 stages, else the floating DP when its tables are modest (a
    /// few GiB and seconds at most), else persistent, and says which it ran.
    /// floating: the fastest nested schedule, never slower than persistent,
    /// O(S L^4) time and O(S L^3) memory. persistent: Rotor's persistent DP,
    /// O(S L^3). exhaustive: exact in bytes over every schedule, at most 14
    /// stages. Baselines to compare with: store-all, sequential (PyTorch's
    /// checkpoint_sequential), revolve, chen-sqrt, chen-greedy; `remat compare`
    /// runs them all. On a graph file, auto solves a path as a chain and any
    /// other graph with the chain DP of its blocks lifted to the graph, then
    /// checkmate (the Checkmate MILP) warm-started from it, keeping the
    /// faster; checkmate-approx: its LP relaxation with two-phase rounding.
    #[arg(short, long, default_value = "auto", value_parser = parse_method)]
    algorithm: Method,
    /// With --algorithm sequential: the number of segments K (1 to the number
    /// of stages), as given to checkpoint_sequential. Default: the fastest K
    /// that fits the budget.
    #[arg(long, value_name = "K")]
    segments: Option<usize>,
    /// Memory slots S: sizes are rounded up to budget/S bytes. More slots are
    /// closer to exact and slower (time and table memory grow linearly).
    #[arg(long, default_value_t = DEFAULT_SLOTS, value_name = "N", value_parser = super::slots_arg)]
    slots: std::num::NonZeroUsize,
    #[command(flatten)]
    exact: super::ExactArgs,
    /// Micro-batches a pipeline rank holds at once (GPipe: all of them;
    /// 1F1B: P - k on rank k of P, at most the micro-batches; `remat pipeline`
    /// works it out per rank). The schedule of one micro-batch is then planned
    /// so that its peak plus N - 1 residues fits the budget, the residue being
    /// what it keeps between its forward and its backward. Chains only; every
    /// algorithm (a baseline at the largest budget of its own that fits).
    /// Default 1: no pipeline; at most 1048576.
    #[arg(long, default_value_t = std::num::NonZeroUsize::MIN, value_name = "N", value_parser = super::in_flight_arg)]
    in_flight: std::num::NonZeroUsize,
    /// Print the schedule as JSON on stdout instead of text (on an infeasible
    /// budget: {"status": "infeasible", "min_budget": bytes, ...}, exit 1).
    #[arg(long)]
    json: bool,
    /// Also write the schedule as JSON to this file.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    graph: super::graph::GraphArgs,
}

/// Tables from this size on are announced on stderr before solving.
const LARGE_TABLE: u64 = 256 << 20;

/// Parses a chain algorithm (what the chain-only commands take); a
/// graph-only name is told apart ([`Method::chain_algorithm`]).
pub fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    Method::chain_algorithm(s)
}

/// Parses any algorithm `remat solve` takes: a chain algorithm or a
/// graph-only one (`checkmate`, `checkmate-approx`).
fn parse_method(s: &str) -> Result<Method, String> {
    s.parse()
}

pub fn run(args: Args) -> CliResult {
    if args.segments.is_some() && args.algorithm != Method::Chain(Algorithm::Sequential) {
        return Err(Failure::input(anyhow::anyhow!(
            "--segments applies to --algorithm sequential only (got --algorithm {})",
            args.algorithm
        )));
    }
    if let Some(path) = &args.output {
        super::output::refuse_input(path, "--output", &[&args.chain])?;
    }
    let problem = load_problem(&args.chain)?;
    let memory = args.memory.bytes_of(&problem)?;
    let algorithm = args.algorithm;
    let progress = Progress::new(&format!("{algorithm} DP"));
    let update = |done, total| progress.update(done, total);
    let ticker = super::graph::Ticker::new(&args.graph, algorithm);
    let tick = |elapsed| ticker.tick(elapsed);
    let opts = Options {
        chain: SolveOptions {
            slots: args.slots,
            progress: Some(&update),
            segments: args.segments,
            exact_memory: args.exact.get()?,
            in_flight: args.in_flight,
        },
        milp: args.graph.milp_options(Some(&tick)),
    };
    if let (Problem::Chain(chain), Method::Chain(chain_algorithm)) = (&problem, algorithm)
        && let Some(bytes) = memory_estimate(chain, memory, chain_algorithm, &opts.chain)
        && bytes >= LARGE_TABLE
    {
        eprintln!("note: the {algorithm} solver's table will take about {}", format_size(bytes));
    }
    let result = crate::problem::solve(&problem, memory, algorithm, &opts);
    drop(progress);
    drop(ticker);
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            if args.json
                && let Some(out) = infeasible_json(&e).or_else(|| time_limit_json(&e, memory))
            {
                // Scripts sweeping budgets get the answer on stdout too.
                outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
            }
            return Err(e.into());
        }
    };
    let json = match &outcome {
        Outcome::Chain { solution, .. } => {
            serde_json::to_string_pretty(&solution.schedule).expect("schedules serialize")
        }
        Outcome::Graph { graph, solution, .. } => {
            for note in &solution.notes {
                eprintln!("warning: {note}");
            }
            solution.schedule.to_json(graph)
        }
    };
    if let Some(path) = &args.output {
        write_file(path, &(json.clone() + "\n"))?;
    }
    if args.json {
        let why = match &outcome {
            Outcome::Chain { why, .. } | Outcome::Graph { why, .. } => why,
        };
        if algorithm == Method::Chain(Algorithm::Auto) && !why.is_empty() {
            eprintln!("note: auto chose the {why}");
        }
        outln!("{json}");
        return Ok(());
    }
    match &outcome {
        Outcome::Chain { chain, solution, why } => print_chain_solution(chain, solution, why, args.slots),
        Outcome::Graph { .. } => super::graph::print_outcome(&problem, &outcome, args.graph.time_limit()),
    }
    Ok(())
}

/// The `{"status": "infeasible", ...}` object `--json` prints for a budget
/// no schedule of the algorithm meets, chain or graph alike.
fn infeasible_json(e: &problem::Error) -> Option<serde_json::Value> {
    // (algorithm, budget, a budget that works, proven smallest, proven lower bound)
    let (algorithm, budget, min_budget, proven, lower) = match e {
        problem::Error::Chain(SolveError::Infeasible { algorithm, budget, min_budget }) => {
            (algorithm.name(), *budget, *min_budget, true, *min_budget)
        }
        problem::Error::Graph(GraphSolveError::Infeasible { algorithm, budget, min_budget }) => (
            algorithm.name(),
            *budget,
            min_budget.map(|m| m.bytes),
            min_budget.is_some_and(|m| m.proven),
            min_budget.map(|m| m.lower),
        ),
        _ => return None,
    };
    Some(serde_json::json!({
        "status": "infeasible", "algorithm": algorithm, "budget": budget, "min_budget": min_budget,
        "min_budget_proven": proven, "min_budget_lower": lower,
    }))
}

/// The `{"status": "time_limit", ...}` object `--json` prints when the time
/// limit passed before any schedule was found (exit 3): neither a schedule
/// nor a verdict on the budget.
fn time_limit_json(e: &problem::Error, budget: u64) -> Option<serde_json::Value> {
    let problem::Error::Graph(GraphSolveError::NoSolution { seconds }) = e else { return None };
    Some(serde_json::json!({"status": "time_limit", "budget": budget, "seconds": seconds, "message": e.to_string()}))
}

/// Prints a chain schedule: what ran and why, its figures as replayed, what
/// it keeps, and the schedule in compact notation.
fn print_chain_solution(chain: &Chain, solution: &Solution, why: &str, slots: std::num::NonZeroUsize) {
    let s = &solution.schedule;
    let base = chain.store_all_time();
    outln!("chain:       {} ({} stages + loss)", chain.name(), chain.len());
    if !why.is_empty() {
        outln!("path:        {why}");
    }
    let slots = if solution.slot_size == 1 {
        "exact bytes".to_string()
    } else {
        format!("{slots} slots of {} bytes", solution.slot_size)
    };
    let detail = solution.detail.as_deref().map(|d| format!(", {d}")).unwrap_or_default();
    match &solution.reason {
        Some(why) => outln!("algorithm:   {} ({slots}{detail}); chosen by auto: {why}", s.algorithm),
        None => outln!("algorithm:   {} ({slots}{detail})", s.algorithm),
    }
    outln!("budget:      {} ({} bytes)", format_size(s.budget), s.budget);
    let overhead = super::overhead(s.makespan, base).map(|o| format!(", {o}")).unwrap_or_default();
    outln!("makespan:    {:.2} (no recomputation: {:.2}{overhead})", s.makespan, base);
    let peak_op = solution.replay.steps[solution.replay.peak_index].op;
    outln!(
        "peak memory: {} ({} bytes) during operation {} ({peak_op})",
        format_size(s.peak_memory),
        s.peak_memory,
        solution.replay.peak_index + 1
    );
    if s.in_flight > 1 {
        outln!("{}", super::in_flight_line(s.in_flight, &solution.replay));
    }
    outln!("schedule:    {} operations", s.operations.len());
    outln!("first pass:  {}", summary(&s.operations, chain.len()));
    outln!("{}", wrapped_notation(&s.operations, NOTATION_WIDTH));
}

/// Width of the printed schedule's lines.
const NOTATION_WIDTH: usize = 100;
