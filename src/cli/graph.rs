//! `remat solve` and `remat simulate` on graph files (forward or joint graphs,
//! recognised by their `nodes` key), and on chain files with a graph-only
//! algorithm. The logic lives in `crate::graph`; this prints.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::Problem;
use crate::graph::GraphAlgorithm;
use crate::graph::milp::{Backend, MilpOptions};
use crate::graph::schedule::notation;
use crate::graph::{CheckmateGraph, GraphFile};
use crate::problem::{self, Method, Outcome};
use crate::size::format_size;
use crate::solve::Algorithm;

use super::Failure;
use super::output::outln;

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

impl GraphArgs {
    /// The LP/MILP options these flags ask for, reporting to `ticker`.
    pub fn milp_options<'a>(&self, ticker: Option<&'a (dyn Fn(Duration) + Sync)>) -> MilpOptions<'a> {
        MilpOptions {
            backend: self.lp_solver.unwrap_or_else(Backend::best_available),
            time_limit: self.time_limit.0,
            ticker,
        }
    }

    /// The time limit, if any.
    pub fn time_limit(&self) -> Option<Duration> {
        self.time_limit.0
    }
}

/// A time limit, or none.
#[derive(Clone, Copy, Debug)]
pub struct TimeLimit(Option<Duration>);

/// The longest `--time-limit`, in seconds (about 31 years): anything longer
/// is `none` in practice, and deadlines computed from it (now + limit) stay
/// far inside what the clock can represent.
const MAX_TIME_LIMIT: f64 = 1e9;

fn parse_time_limit(s: &str) -> Result<TimeLimit, String> {
    if s == "none" {
        return Ok(TimeLimit(None));
    }
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX_TIME_LIMIT => Ok(TimeLimit(Some(Duration::from_secs_f64(x)))),
        _ => Err(format!(
            "`{s}` is not a time limit: give a number of seconds above 0 and at most {MAX_TIME_LIMIT:e}, or `none`"
        )),
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

impl From<problem::Error> for Failure {
    fn from(e: problem::Error) -> Failure {
        // The exit code is the error's kind's (`problem::Error::kind`); a
        // chain error, and micro-batches in flight on a graph, also name the
        // flags that change it.
        match e {
            problem::Error::Chain(e) => e.into(),
            e @ problem::Error::InFlight { .. } => Failure::of(
                e.kind(),
                anyhow::anyhow!(
                    "{e}\nhint: drop --in-flight, or give the network as a chain (`remat zoo NAME` without --graph)"
                ),
            ),
            e => Failure::of(e.kind(), e),
        }
    }
}

/// A spinner with the elapsed time against the time limit, on stderr when it
/// is a terminal, shown only once the solve lasts over 300 ms.
pub struct Ticker {
    bar: Option<ProgressBar>,
}

impl Ticker {
    /// A ticker for the graph solver `algorithm` runs with `args`.
    pub fn new(args: &GraphArgs, method: Method) -> Ticker {
        let what = match method {
            Method::Graph(GraphAlgorithm::CheckmateApprox) => "LP relaxation and rounding",
            Method::Chain(Algorithm::Exhaustive) | Method::Graph(GraphAlgorithm::Exhaustive) => "exhaustive search",
            _ => "Checkmate MILP",
        };
        let backend = args.lp_solver.unwrap_or_else(Backend::best_available);
        Ticker::labelled(format!("{what} via {backend}"), args.time_limit.0)
    }

    fn labelled(what: String, limit: Option<Duration>) -> Ticker {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::hidden();
            let limit = limit.map_or("no time limit".to_string(), |l| format!("time limit {:.0} s", l.as_secs_f64()));
            bar.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed} elapsed").expect("valid template"));
            bar.set_message(format!("{what} ({limit})"));
            bar
        });
        Ticker { bar }
    }

    /// Called by the solver as time passes.
    pub fn tick(&self, elapsed: Duration) {
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

fn percent_over(makespan: f64, base: f64) -> String {
    super::overhead(makespan, base).map(|o| format!(", {o}")).unwrap_or_default()
}

/// Prints a graph solution (a chain solution is printed by `remat solve`).
pub fn print_outcome(problem: &Problem, outcome: &Outcome, limit: Option<Duration>) {
    let nodes = match problem {
        Problem::Graph(GraphFile::Forward(f)) => f.len(),
        Problem::Graph(GraphFile::Checkmate(g)) => g.len(),
        Problem::Chain(c) => c.len(),
    };
    outln!("graph:       {} ({}, {nodes} nodes)", problem.name(), problem.kind());
    match outcome {
        Outcome::Chain { .. } => unreachable!("chain solutions are printed by `remat solve`"),
        Outcome::Graph { graph, solution, why } => {
            outln!("path:        {why}");
            let s = &solution.schedule;
            let solver = match solution.backend {
                Some(b) => {
                    let limit =
                        limit.map_or("no time limit".into(), |l| format!("time limit {:.0} s", l.as_secs_f64()));
                    format!("{} via {b} in {:.2} s ({limit})", s.algorithm, solution.seconds)
                }
                None => format!("{} in {:.2} s", s.algorithm, solution.seconds),
            };
            outln!("solver:      {solver}");
            if let Some((name, cost)) = &solution.warm_start {
                let what = if name == crate::graph::LIFT_NAME {
                    "the chain DP's schedule lifted to the graph".to_string()
                } else {
                    format!("baseline {name}")
                };
                outln!("warm start:  {what} (makespan {cost:.2})");
            }
            outln!("budget:      {} ({} bytes)", format_size(s.budget), s.budget);
            let gap = s.gap.map_or("unknown".to_string(), |g| format!("{:.2}%", 100.0 * g));
            let status = match s.status {
                crate::graph::Status::Optimal => "optimal (proven)".to_string(),
                crate::graph::Status::TimeLimit => {
                    format!(
                        "time limit reached: best schedule found, proven gap {gap} (raise --time-limit to close it)"
                    )
                }
                crate::graph::Status::Rounded => {
                    format!("rounded from the LP relaxation, within {gap} of optimal (proven)")
                }
                crate::graph::Status::Feasible => {
                    format!("feasible, not proven optimal: within {gap} of optimal (proven)")
                }
            };
            outln!("status:      {status}");
            let base = graph.total_cost();
            outln!("makespan:    {:.2} (no recomputation: {base:.2}{})", s.makespan, percent_over(s.makespan, base));
            let peak = &solution.replay;
            let at = s.operations.get(peak.peak_index).map(|op| graph.node(op.node()).name.as_str()).unwrap_or("-");
            outln!(
                "peak memory: {} ({} bytes) after computing `{at}` (operation {})",
                format_size(s.peak_memory),
                s.peak_memory,
                peak.peak_index + 1
            );
            outln!(
                "schedule:    {} operations, {} recomputations (-x frees x)",
                s.operations.len(),
                peak.recomputations
            );
            outln!("{}", notation(graph, &s.operations));
        }
    }
}

/// `remat simulate` on a graph file: replays a graph schedule (JSON as written
/// by `remat solve --json`) on the Checkmate graph (derived for a forward graph).
/// Returns false when the schedule is a chain schedule of a path graph (what
/// `auto` returns for one), which the chain simulator replays instead.
pub fn simulate_graph(
    file: &GraphFile,
    graph_path: &Path,
    schedule_path: &Path,
    budget: Option<u64>,
    json: bool,
) -> Result<bool, Failure> {
    let is_path = matches!(file, GraphFile::Forward(f) if f.as_chain().is_ok());
    let graph: CheckmateGraph = match file {
        GraphFile::Checkmate(g) => g.clone(),
        GraphFile::Forward(f) => crate::graph::backward::derive(f)
            .map_err(|e| Failure::input(anyhow::anyhow!("graph file `{}`: {e}", graph_path.display())))?,
    };
    let schedule_text = crate::problem::read_input(schedule_path, "schedule file").map_err(Failure::input)?;
    let operations = match crate::graph::schedule::parse_graph_operations(&schedule_text, &graph) {
        Ok(operations) => operations,
        Err(_) if is_path && crate::schedule::parse_operations(&schedule_text).is_ok() => return Ok(false),
        Err(e) => return Err(Failure::input(anyhow::anyhow!("schedule file `{}`: {e}", schedule_path.display()))),
    };
    if operations.is_empty() {
        return Err(Failure::input(anyhow::anyhow!("schedule file `{}` holds no operations", schedule_path.display())));
    }

    let replay = crate::graph::simulate(&graph, &operations).map_err(|e| {
        Failure::of(
            e.kind(),
            anyhow::anyhow!("schedule `{}` is not valid on graph `{}`: {e}", schedule_path.display(), graph.name()),
        )
    })?;
    let at = graph.node(operations[replay.peak_index].node()).name.clone();
    if json {
        let out = serde_json::json!({
            "valid": true,
            "operations": operations.len(),
            "makespan": replay.makespan,
            "peak_memory": replay.peak_memory,
            "peak_operation": replay.peak_index + 1,
            "recomputations": replay.recomputations,
            "budget": budget,
            "within_budget": budget.map(|b| replay.peak_memory <= b),
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("json"));
    } else {
        outln!("valid schedule of {} operations on graph {}", operations.len(), graph.name());
        outln!("makespan:    {:.2} (no recomputation: {:.2})", replay.makespan, graph.total_cost());
        outln!(
            "peak memory: {} ({} bytes) after computing `{at}` (operation {})",
            format_size(replay.peak_memory),
            replay.peak_memory,
            replay.peak_index + 1
        );
    }
    if let Some(budget) = budget {
        if let Err(e) = crate::graph::simulate_within(&graph, &operations, budget) {
            return Err(Failure::of(e.kind(), anyhow::anyhow!("{e} ({})", format_size(budget))));
        }
        if !json {
            outln!("fits the budget of {} ({budget} bytes)", format_size(budget));
        }
    }
    Ok(true)
}
