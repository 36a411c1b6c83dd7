//! `remat solve` and `remat simulate` on graph files (forward or joint graphs,
//! recognised by their `nodes` key), and on chain files with a graph-only
//! algorithm. The logic lives in `remat::graph`; this prints.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::schedule::notation;
use remat::graph::{Graph, GraphFile, GraphOptions, GraphSchedule, GraphSolveError, Outcome, looks_like_graph};
use remat::size::format_size;
use remat::solve::Algorithm;

use super::{Failure, Progress, load_chain, write_file};

/// Default MILP time limit, in seconds.
const DEFAULT_TIME_LIMIT: &str = "300";

/// Options of `remat solve` that only matter for graphs.
#[derive(clap::Args)]
pub struct GraphArgs {
    /// Graphs: stop the MILP (or each LP) after this many seconds and keep the
    /// best schedule found, with its proven gap; `none` runs to proven
    /// optimality.
    #[arg(long, value_name = "SECONDS", default_value = DEFAULT_TIME_LIMIT, value_parser = parse_time_limit)]
    time_limit: TimeLimit,
    /// Graphs: the LP/MILP solver, `highs` (when remat is built with
    /// `--features highs`; the default then) or `microlp` (pure Rust, always
    /// there; fine for small graphs).
    #[arg(long, value_name = "NAME", value_parser = parse_backend)]
    lp_solver: Option<Backend>,
}

/// A time limit, or none.
#[derive(Clone, Copy, Debug)]
pub struct TimeLimit(Option<Duration>);

fn parse_time_limit(s: &str) -> Result<TimeLimit, String> {
    if s == "none" {
        return Ok(TimeLimit(None));
    }
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(TimeLimit(Some(Duration::from_secs_f64(x)))),
        _ => Err(format!("`{s}` is not a time limit: give a positive number of seconds, or `none`")),
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

/// What `remat solve` asked for.
pub struct Request<'a> {
    /// The chain or graph file.
    pub path: &'a Path,
    /// The budget in bytes.
    pub memory: u64,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Memory slots for the chain solvers.
    pub slots: usize,
    /// JSON on stdout.
    pub json: bool,
    /// Also write the JSON here.
    pub output: Option<&'a PathBuf>,
    /// The graph options.
    pub graph: &'a GraphArgs,
}

fn read(path: &Path, what: &str) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure::input(anyhow::anyhow!("cannot read {what} file `{}`: {e}", path.display())))
}

/// Reads a graph file, printing its warnings.
fn load_graph(path: &Path, text: &str) -> Result<GraphFile, Failure> {
    let file = GraphFile::from_json(text)
        .map_err(|e| Failure::input(anyhow::anyhow!("graph file `{}`: {e}", path.display())))?;
    for w in file.warnings() {
        eprintln!("warning: {}: {w}", path.display());
    }
    Ok(file)
}

impl From<GraphSolveError> for Failure {
    fn from(e: GraphSolveError) -> Failure {
        match e {
            GraphSolveError::Chain(e) => e.into(),
            GraphSolveError::Infeasible { .. } | GraphSolveError::Rounding(_) | GraphSolveError::NoSolution { .. } => {
                Failure::infeasible(e)
            }
            GraphSolveError::Rejected { .. } | GraphSolveError::Backend(_) => Failure { code: 70, error: e.into() },
            _ => Failure::input(e),
        }
    }
}

/// The `--json` object on stdout for an infeasible budget: `status`,
/// `algorithm`, `budget` and `min_budget` (bytes, null when unknown) as for a
/// chain, plus for a graph `min_budget_proven` and `min_budget_lower` (no
/// schedule fits below it) when a time limit stopped the search early.
fn infeasible_json(e: &GraphSolveError) -> Option<serde_json::Value> {
    match e {
        GraphSolveError::Chain(remat::SolveError::Infeasible { algorithm, budget, min_budget }) => {
            Some(serde_json::json!({
                "status": "infeasible", "algorithm": algorithm.name(), "budget": budget, "min_budget": min_budget,
            }))
        }
        GraphSolveError::Infeasible { algorithm, budget, min_budget } => Some(serde_json::json!({
            "status": "infeasible", "algorithm": algorithm.name(), "budget": budget,
            "min_budget": min_budget.map(|m| m.bytes),
            "min_budget_proven": min_budget.is_some_and(|m| m.proven),
            "min_budget_lower": min_budget.map(|m| m.lower),
        })),
        _ => None,
    }
}

/// A spinner with the elapsed time against the time limit, on stderr when it
/// is a terminal, shown only once the solve lasts over 300 ms.
struct Ticker {
    bar: Option<ProgressBar>,
}

impl Ticker {
    fn new(what: String, limit: Option<Duration>) -> Ticker {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::hidden();
            let limit = limit.map_or("no time limit".to_string(), |l| format!("time limit {:.0} s", l.as_secs_f64()));
            bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed} elapsed").expect("valid template"));
            bar.set_message(format!("{what} ({limit})"));
            bar
        });
        Ticker { bar }
    }

    fn tick(&self, elapsed: Duration) {
        if let Some(bar) = &self.bar {
            if bar.is_hidden() && elapsed > Duration::from_millis(300) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
            bar.tick();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Solves `req.path` if it is a graph file, or a chain file asked for a
/// graph-only algorithm (solved through its forward graph). Returns false,
/// having done nothing, when the chain path of `remat solve` should run.
pub fn try_solve(req: Request) -> Result<bool, Failure> {
    let text = read(req.path, "chain or graph")?;
    let file = if looks_like_graph(&text) {
        load_graph(req.path, &text)?
    } else if req.algorithm.is_graph_only() {
        GraphFile::Forward(remat::graph::ForwardGraph::from_chain(&load_chain(req.path)?))
    } else {
        return Ok(false);
    };
    let backend = req.graph.lp_solver.unwrap_or_else(Backend::best_available);
    let limit = req.graph.time_limit.0;
    let what = match req.algorithm {
        Algorithm::CheckmateApprox => "LP relaxation and rounding",
        Algorithm::Exhaustive => "exhaustive search",
        _ => "Checkmate MILP",
    };
    let ticker = Ticker::new(format!("{what} via {backend}"), limit);
    let tick = |elapsed| ticker.tick(elapsed);
    let chain_progress = Progress::new("chain DP");
    let chain_update = |done, total| chain_progress.update(done, total);
    let opts = GraphOptions {
        milp: MilpOptions { backend, time_limit: limit, ticker: Some(&tick) },
        slots: req.slots,
        chain_progress: Some(&chain_update),
    };
    let outcome = remat::graph::solve(&file, req.memory, req.algorithm, &opts);
    drop(ticker);
    drop(chain_progress);
    if req.json
        && let Err(e) = &outcome
        && let Some(out) = infeasible_json(e)
    {
        // Scripts sweeping budgets get the answer on stdout too, as for chains.
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    }
    let outcome = outcome?;
    if let Outcome::Graph { solution, .. } = &outcome {
        for note in &solution.notes {
            eprintln!("warning: {note}");
        }
    }
    let json = match &outcome {
        Outcome::Chain { solution, .. } => {
            serde_json::to_string_pretty(&solution.schedule).expect("schedules serialize")
        }
        Outcome::Graph { graph, solution, .. } => solution.schedule.to_json(graph),
    };
    if let Some(path) = req.output {
        write_file(path, &(json.clone() + "\n"))?;
    }
    if req.json {
        if req.algorithm == Algorithm::Auto {
            let why = match &outcome {
                Outcome::Chain { why, .. } | Outcome::Graph { why, .. } => why,
            };
            eprintln!("note: auto chose the {why}");
        }
        println!("{json}");
        return Ok(true);
    }
    print_outcome(&file, &outcome, limit);
    Ok(true)
}

fn percent_over(makespan: f64, base: f64) -> String {
    super::overhead(makespan, base).map(|o| format!(", {o}")).unwrap_or_default()
}

fn print_outcome(file: &GraphFile, outcome: &Outcome, limit: Option<Duration>) {
    let kind = match file {
        GraphFile::Forward(f) => format!("forward graph, {} nodes", f.len()),
        GraphFile::Joint(g) => format!("joint graph, {} nodes", g.len()),
    };
    println!("graph:       {} ({kind})", file.name());
    match outcome {
        Outcome::Chain { chain, solution, why } => {
            println!("path:        {why}");
            let s = &solution.schedule;
            println!("algorithm:   {}", s.algorithm);
            println!("budget:      {} ({} bytes)", format_size(s.budget), s.budget);
            let base = chain.store_all_time();
            println!("makespan:    {:.2} (no recomputation: {base:.2}{})", s.makespan, percent_over(s.makespan, base));
            println!("peak memory: {} ({} bytes)", format_size(s.peak_memory), s.peak_memory);
            println!("schedule:    {} operations", s.operations.len());
            println!("{}", remat::schedule::notation(&s.operations));
        }
        Outcome::Graph { graph, solution, why } => {
            println!("path:        {why}");
            let s = &solution.schedule;
            let solver = match solution.backend {
                Some(b) => {
                    let limit =
                        limit.map_or("no time limit".into(), |l| format!("time limit {:.0} s", l.as_secs_f64()));
                    format!("{} via {b} in {:.2} s ({limit})", s.algorithm, solution.seconds)
                }
                None => format!("{} in {:.2} s", s.algorithm, solution.seconds),
            };
            println!("solver:      {solver}");
            if let Some((name, cost)) = &solution.warm_start {
                println!("warm start:  baseline {name} (makespan {cost:.2})");
            }
            println!("budget:      {} ({} bytes)", format_size(s.budget), s.budget);
            let gap = s.gap.map_or("unknown".to_string(), |g| format!("{:.2}%", 100.0 * g));
            let status = match s.status {
                remat::graph::Status::Optimal => "optimal (proven)".to_string(),
                remat::graph::Status::TimeLimit => {
                    format!(
                        "time limit reached: best schedule found, proven gap {gap} (raise --time-limit to close it)"
                    )
                }
                remat::graph::Status::Rounded => {
                    format!("rounded from the LP relaxation, within {gap} of optimal (proven)")
                }
                remat::graph::Status::Feasible => {
                    format!("feasible, not proven optimal: within {gap} of optimal (proven)")
                }
            };
            println!("status:      {status}");
            let base = graph.total_cost();
            println!("makespan:    {:.2} (no recomputation: {base:.2}{})", s.makespan, percent_over(s.makespan, base));
            let peak = &solution.replay;
            let at = s.operations.get(peak.peak_index).map(|op| graph.node(op.node()).name.as_str()).unwrap_or("-");
            println!(
                "peak memory: {} ({} bytes) after computing `{at}` (operation {})",
                format_size(s.peak_memory),
                s.peak_memory,
                peak.peak_index + 1
            );
            println!(
                "schedule:    {} operations, {} recomputations (-x frees x)",
                s.operations.len(),
                peak.recomputations
            );
            println!("{}", notation(graph, &s.operations));
        }
    }
}

/// `remat simulate` on a graph file: replays a graph schedule (JSON as written
/// by `remat solve --json`) on the joint graph (derived for a forward graph).
/// Returns false when `graph_path` is not a graph file.
pub fn try_simulate(graph_path: &Path, schedule_path: &Path, budget: Option<u64>, json: bool) -> Result<bool, Failure> {
    let text = read(graph_path, "chain or graph")?;
    if !looks_like_graph(&text) {
        return Ok(false);
    }
    let file = load_graph(graph_path, &text)?;
    let is_path = matches!(&file, GraphFile::Forward(f) if f.as_chain().is_ok());
    let graph: Graph = match file {
        GraphFile::Joint(g) => g,
        GraphFile::Forward(f) => remat::graph::joint::derive(&f)
            .map_err(|e| Failure::input(anyhow::anyhow!("graph file `{}`: {e}", graph_path.display())))?,
    };
    let schedule_text = read(schedule_path, "schedule")?;
    let schedule = match GraphSchedule::from_json(&schedule_text, &graph) {
        Ok(schedule) => schedule,
        // A chain schedule of a path graph (what `auto` returns for one): the
        // chain simulator replays it on the chain form.
        Err(_) if is_path && remat::schedule::parse_operations(&schedule_text).is_ok() => return Ok(false),
        Err(e) => return Err(Failure::input(anyhow::anyhow!("schedule file `{}`: {e}", schedule_path.display()))),
    };
    let replay = remat::graph::simulate(&graph, &schedule.operations).map_err(|e| {
        Failure::input(anyhow::anyhow!(
            "schedule `{}` is not valid on graph `{}`: {e}",
            schedule_path.display(),
            graph.name()
        ))
    })?;
    let at = graph.node(schedule.operations[replay.peak_index].node()).name.clone();
    if json {
        let out = serde_json::json!({
            "valid": true,
            "operations": schedule.operations.len(),
            "makespan": replay.makespan,
            "peak_memory": replay.peak_memory,
            "peak_operation": replay.peak_index + 1,
            "recomputations": replay.recomputations,
            "budget": budget,
            "within_budget": budget.map(|b| replay.peak_memory <= b),
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        println!("valid schedule of {} operations on graph {}", schedule.operations.len(), graph.name());
        println!("makespan:    {:.2} (no recomputation: {:.2})", replay.makespan, graph.total_cost());
        println!(
            "peak memory: {} ({} bytes) after computing `{at}` (operation {})",
            format_size(replay.peak_memory),
            replay.peak_memory,
            replay.peak_index + 1
        );
    }
    if let Some(budget) = budget {
        if let Err(e) = remat::graph::simulate_within(&graph, &schedule.operations, budget) {
            return Err(Failure::infeasible(anyhow::anyhow!("{e} ({})", format_size(budget))));
        }
        if !json {
            println!("fits the budget of {} ({budget} bytes)", format_size(budget));
        }
    }
    Ok(true)
}

/// The chain of a chain file, or of a forward graph file that is a path (its
/// chain form, as `remat solve` solves it).
pub fn load_chain_or_path(path: &Path) -> Result<remat::Chain, Failure> {
    let text = read(path, "chain or graph")?;
    if !looks_like_graph(&text) {
        return load_chain(path);
    }
    match load_graph(path, &text)? {
        GraphFile::Forward(f) => f
            .as_chain()
            .cloned()
            .map_err(|why| Failure::input(anyhow::anyhow!("graph file `{}` is not a chain: {why}", path.display()))),
        GraphFile::Joint(_) => {
            Err(Failure::input(anyhow::anyhow!("graph file `{}` is a joint graph, not a chain", path.display())))
        }
    }
}
