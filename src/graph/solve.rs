//! The graph solvers' entry points, every result replayed by the graph
//! simulator: [`solve_checkmate`] on a Checkmate graph (the MILP, LP rounding
//! or exhaustive search), [`checkmate_forward`] on a forward graph (the chain
//! DP lifted to it, then the MILP warm-started from it), and the smallest
//! budgets. Which of them an input goes to is decided above, by
//! [`crate::problem::solve`]: this module knows nothing of chains' algorithms.

use std::fmt;

use thiserror::Error;

use crate::error::ErrorKind;
use crate::graph::approx::{self, ApproxError};
use crate::graph::baselines;
use crate::graph::lift::{self, Lifted};
use crate::graph::milp::{self, Backend, MilpError, MilpOptions};
use crate::graph::schedule::{GraphOp, GraphSchedule, Status};
use crate::graph::simulate::{GraphReplay, GraphSimulateError, simulate_within};
use crate::graph::staged::Staged;
use crate::graph::{CheckmateGraph, ForwardGraph, GraphAlgorithm, GraphError, exhaustive};
use crate::size::format_size;

/// A graph schedule the graph simulator has replayed within the budget.
#[derive(Clone, Debug)]
pub struct GraphSolution {
    /// The schedule, with the simulator's makespan and peak.
    pub schedule: GraphSchedule,
    /// Its replay.
    pub replay: GraphReplay,
    /// A proven lower bound on the makespan of any schedule the algorithm
    /// considers, when known.
    pub bound: Option<f64>,
    /// Seconds the solver ran.
    pub seconds: f64,
    /// The LP/MILP backend (None for exhaustive search).
    pub backend: Option<Backend>,
    /// The baseline the MILP was warm-started from: (name, makespan).
    pub warm_start: Option<(String, f64)>,
    /// What the user should know about how it was found (a solver that
    /// stopped early...).
    pub notes: Vec<String>,
}

/// The smallest budget an algorithm can meet, as far as it is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MinBudget {
    /// A budget that works (the smallest when `proven`).
    pub bytes: u64,
    /// Whether `bytes` is proven to be the smallest.
    pub proven: bool,
    /// A proven lower bound: no schedule fits below it.
    pub lower: u64,
}

impl fmt::Display for MinBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.proven {
            write!(f, "the smallest budget it can meet is {} ({} bytes)", format_size(self.bytes), self.bytes)
        } else {
            write!(
                f,
                "{} ({} bytes) works; the smallest budget is at least {} ({} bytes) (not proven the smallest)",
                format_size(self.bytes),
                self.bytes,
                format_size(self.lower),
                self.lower
            )
        }
    }
}

/// Why no graph schedule came back.
#[derive(Debug, Error)]
pub enum GraphSolveError {
    /// The derived Checkmate graph is invalid (a name collision, overflow).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// No schedule of this algorithm fits the budget.
    #[error("no {algorithm} schedule fits in {} ({budget} bytes){}", format_size(*budget), min_budget.map(|m| format!("; {m}")).unwrap_or_default())]
    Infeasible {
        /// The algorithm asked.
        algorithm: GraphAlgorithm,
        /// The budget in bytes.
        budget: u64,
        /// The smallest budget, as far as it could be found.
        min_budget: Option<MinBudget>,
    },
    /// LP rounding found no schedule within the budget.
    #[error(transparent)]
    Rounding(ApproxError),
    /// The time limit passed before any schedule was found.
    #[error("no schedule found within the time limit ({seconds:.1} s): raise --time-limit")]
    NoSolution {
        /// Seconds spent.
        seconds: f64,
    },
    /// The LP/MILP solver failed.
    #[error("the LP solver failed: {0}")]
    Backend(String),
    /// The graph is too large for the algorithm.
    #[error("{0}")]
    TooLarge(String),
    /// The solver's schedule failed its replay: a bug in remat.
    #[error("internal error: the {algorithm} schedule failed its replay ({source}); please report this")]
    Rejected {
        /// The algorithm at fault.
        algorithm: GraphAlgorithm,
        /// What the simulator said.
        source: GraphSimulateError,
    },
    /// The solver's objective is below its schedule's replay: a bug in remat.
    #[error(
        "internal error: {algorithm} predicted makespan {predicted} but its schedule replays at {replayed}; please report this"
    )]
    Mispredicted {
        /// The algorithm at fault.
        algorithm: GraphAlgorithm,
        /// What the solver claimed.
        predicted: f64,
        /// What the simulator measured.
        replayed: f64,
    },
}

impl GraphSolveError {
    /// What kind of failure this is: no schedule within the budget (also
    /// every LP rounding over it) is [`ErrorKind::Infeasible`]; the time
    /// limit [`ErrorKind::TimeLimit`]; a schedule its replay rejects, a
    /// mispredicted makespan and a failed LP solver [`ErrorKind::Internal`];
    /// an invalid graph and a graph too large for the algorithm
    /// [`ErrorKind::Input`].
    pub fn kind(&self) -> ErrorKind {
        // No wildcard: a new variant must choose its kind here (a wildcard
        // once sent `Mispredicted`, a bug in remat, to "bad input").
        match self {
            GraphSolveError::Rounding(e) => e.kind(),
            GraphSolveError::Infeasible { .. } => ErrorKind::Infeasible,
            GraphSolveError::NoSolution { .. } => ErrorKind::TimeLimit,
            GraphSolveError::Rejected { .. } | GraphSolveError::Mispredicted { .. } | GraphSolveError::Backend(_) => {
                ErrorKind::Internal
            }
            GraphSolveError::Graph(_) | GraphSolveError::TooLarge(_) => ErrorKind::Input,
        }
    }
}

impl From<MilpError> for GraphSolveError {
    fn from(e: MilpError) -> Self {
        match e {
            MilpError::NoSolution { seconds } => GraphSolveError::NoSolution { seconds },
            other => GraphSolveError::Backend(other.to_string()),
        }
    }
}

/// Replays `ops` within `budget` and wraps them as a checked [`GraphSolution`].
/// `predicted` is the solver's makespan: the replay may only be cheaper (a plan
/// skips recomputing a value it holds).
#[allow(clippy::too_many_arguments)]
fn checked(
    graph: &CheckmateGraph,
    budget: u64,
    algorithm: GraphAlgorithm,
    ops: Vec<GraphOp>,
    status: Status,
    predicted: f64,
    bound: Option<f64>,
    seconds: f64,
) -> Result<GraphSolution, GraphSolveError> {
    let replay =
        simulate_within(graph, &ops, budget).map_err(|source| GraphSolveError::Rejected { algorithm, source })?;
    if replay.makespan > predicted + 1e-6 * predicted.abs().max(1.0) {
        return Err(GraphSolveError::Mispredicted { algorithm, predicted, replayed: replay.makespan });
    }
    let gap = bound.map(|b| milp::relative_gap(replay.makespan, b));
    let schedule = GraphSchedule {
        algorithm: algorithm.name().to_string(),
        budget,
        makespan: replay.makespan,
        peak_memory: replay.peak_memory,
        status,
        gap,
        operations: ops,
    };
    Ok(GraphSolution { schedule, replay, bound, seconds, backend: None, warm_start: None, notes: Vec::new() })
}

/// A schedule known before (or instead of) the MILP's: the lifted chain
/// schedule or the best fitting baseline.
enum Known<'a> {
    Lift(&'a Lifted),
    Baseline(baselines::Baseline),
}

impl Known<'_> {
    fn makespan(&self) -> f64 {
        match self {
            Known::Lift(l) => l.replay.makespan,
            Known::Baseline(b) => b.cost,
        }
    }

    /// The name a warm start is reported by: [`LIFT_NAME`] or the baseline's.
    fn name(&self) -> String {
        match self {
            Known::Lift(_) => LIFT_NAME.to_string(),
            Known::Baseline(b) => b.name.clone(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Known::Lift(l) => format!("the chain DP's schedule lifted from {} blocks ({})", l.blocks, l.cuts),
            Known::Baseline(b) => format!("baseline {}", b.name),
        }
    }

    /// The checked solution for this schedule, named [`LIFT_NAME`] for a
    /// lifted one (the algorithm that made it).
    fn solution(
        &self,
        graph: &CheckmateGraph,
        budget: u64,
        status: Status,
        bound: f64,
        start: std::time::Instant,
    ) -> Result<GraphSolution, GraphSolveError> {
        let seconds = start.elapsed().as_secs_f64();
        let algorithm = GraphAlgorithm::Checkmate;
        let (ops, predicted) = match self {
            Known::Lift(l) => (l.ops.clone(), l.replay.makespan),
            Known::Baseline(b) => (b.staged.operations(graph), b.cost),
        };
        let mut out = checked(graph, budget, algorithm, ops, status, predicted, Some(bound), seconds)?;
        if matches!(self, Known::Lift(_)) {
            out.schedule.algorithm = LIFT_NAME.to_string();
        }
        Ok(out)
    }
}

/// The `algorithm` of a schedule lifted from the chain DP (`lift`).
pub const LIFT_NAME: &str = "chain-lift";

/// What [`checkmate_forward`] does when the guard refuses the MILP (its model
/// is too large, `guard::milp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenRefused {
    /// Fail with [`GraphSolveError::TooLarge`]: the MILP was asked for by
    /// name (`checkmate`), so its refusal is the answer.
    Fail,
    /// Return the best schedule known without it (the lifted chain schedule
    /// or a baseline) with a note, or [`GraphSolveError::Infeasible`] when
    /// none fits: what `auto` does.
    KeepBestKnown,
}

/// The Checkmate MILP on a forward graph that is not a path, `graph` being
/// its derived Checkmate graph ([`crate::graph::backward::derive`]): the
/// chain DP over its blocks lifted to the graph first (milliseconds), then
/// the MILP warm-started from the better of that and the baselines, never
/// returning a slower schedule than the lifted one. A known schedule that
/// recomputes nothing is optimal (no MILP). A MILP whose build alone would
/// outlast the time limit is skipped and the best known schedule returned
/// with a note; one the guard refuses is handled by `when_refused`.
///
/// Returns the replayed solution and a sentence on which schedule was kept
/// and why. `opts.time_limit` covers the lift, the baselines, the model's
/// build and the solver. Deterministic except where the time limit stops a
/// solver.
///
/// # Examples
///
/// ```
/// use remat::graph::{ForwardGraph, GraphFile, WhenRefused, backward, checkmate_forward, simulate_within};
/// use remat::graph::milp::MilpOptions;
///
/// let GraphFile::Forward(forward) = GraphFile::from_json(r#"{"name": "skip", "input_size": 100, "nodes": [
///     {"name": "a", "inputs": [], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100},
///     {"name": "b", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100},
///     {"name": "c", "inputs": ["b", "a"], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 200}
/// ]}"#)? else { unreachable!() };
/// let graph = backward::derive(&forward)?;
/// let (solution, why) = checkmate_forward(&forward, &graph, 10_000, WhenRefused::Fail, &MilpOptions::default())?;
/// // Replayed by the graph simulator: the same makespan, within the budget.
/// let replay = simulate_within(&graph, &solution.schedule.operations, 10_000)?;
/// assert_eq!(replay.makespan, solution.schedule.makespan);
/// assert!(!why.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn checkmate_forward(
    forward: &ForwardGraph,
    graph: &CheckmateGraph,
    budget: u64,
    when_refused: WhenRefused,
    opts: &MilpOptions,
) -> Result<(GraphSolution, String), GraphSolveError> {
    let start = std::time::Instant::now();
    let deadline = opts.time_limit.and_then(|l| start.checked_add(l));
    let lifted = lift::lift(forward, graph, budget, deadline);
    checkmate(graph, budget, Some(&lifted), when_refused, start, opts)
}

/// The Checkmate MILP of `graph` under `budget`, never returning worse than
/// the lifted schedule (`lifted`, for a forward graph) or the best baseline:
/// - a known schedule that recomputes nothing is optimal: no MILP;
/// - a MILP the guard refuses (`guard::milp`) or whose build alone is
///   estimated to outlast the time limit (`guard::milp_build_seconds`)
///   is skipped, and the best known schedule returned with a note (for a
///   refused MILP only with [`WhenRefused::KeepBestKnown`]); otherwise the
///   guard's refusal;
/// - else the MILP, warm-started from the cheaper known schedule whose MILP
///   accounting fits; its answer, or the lifted one when that is faster.
///
/// Returns the solution and a sentence on which schedule was kept and why.
/// `opts.time_limit` is counted from `start` and covers the lift, the
/// baselines, the model's build and the solver.
fn checkmate(
    graph: &CheckmateGraph,
    budget: u64,
    lifted: Option<&Result<Lifted, lift::NoLift>>,
    when_refused: WhenRefused,
    start: std::time::Instant,
    opts: &MilpOptions,
) -> Result<(GraphSolution, String), GraphSolveError> {
    let keep_known = when_refused == WhenRefused::KeepBestKnown;
    let algorithm = GraphAlgorithm::Checkmate;
    let remaining = || MilpOptions { time_limit: opts.time_limit.map(|l| l.saturating_sub(start.elapsed())), ..*opts };
    // Every node is computed at least once, so the total cost is a lower
    // bound on any schedule's makespan.
    let floor = graph.total_cost();
    let lift_ok = lifted.and_then(|l| l.as_ref().ok());
    let lift_line = match lifted {
        Some(Ok(l)) => format!("the chain DP over {} blocks, lifted, replays at {:.4}", l.blocks, l.replay.makespan),
        Some(Err(_)) => "no lifted chain schedule fits the budget".to_string(),
        None => String::new(),
    };
    let joined = |rest: String| if lift_line.is_empty() { rest } else { format!("{lift_line}; {rest}") };
    if let Some(l) = lift_ok.filter(|l| l.replay.makespan <= floor) {
        let out = Known::Lift(l).solution(graph, budget, Status::Optimal, floor, start)?;
        return Ok((out, joined("it recomputes nothing: optimal, no MILP needed".into())));
    }
    let refused = crate::guard::milp(graph.len()).err();
    let skip = refused.clone().or_else(|| {
        let estimate = crate::guard::milp_build_seconds(graph.len());
        remaining().time_limit.filter(|left| left.as_secs_f64() < estimate).map(|left| {
            format!(
                "building the Checkmate MILP of {} joint nodes takes about {estimate:.0} s, more than the {:.1} s left \
                 of the time limit",
                graph.len(),
                left.as_secs_f64()
            )
        })
    });
    // The baselines take O(n^2 log n) time and O(n^2) memory each: only
    // for graphs whose MILP the guard allows, and not when the time limit is
    // too short for the MILP and a lifted schedule is already there.
    let baseline = if refused.is_none() && (skip.is_none() || lift_ok.is_none()) {
        baselines::best_fitting(graph, budget)
    } else {
        None
    };
    let base_warm = baseline.as_ref().map(|b| (b.staged.clone(), b.cost, b.name.clone()));
    let best_known: Option<Known> = match (lift_ok, baseline) {
        (Some(l), Some(b)) if b.cost < l.replay.makespan => Some(Known::Baseline(b)),
        (Some(l), _) => Some(Known::Lift(l)),
        (None, Some(b)) => Some(Known::Baseline(b)),
        (None, None) => None,
    };
    if let Some(w) = best_known.as_ref().filter(|w| w.makespan() <= floor) {
        let out = w.solution(graph, budget, Status::Optimal, floor, start)?;
        return Ok((out, joined(format!("{} recomputes nothing: optimal, no MILP needed", w.describe()))));
    }
    if let Some(reason) = skip {
        return match best_known {
            Some(known) if keep_known || refused.is_none() => {
                // Skipped for time: the time limit decided; refused: the size.
                let status = if refused.is_none() { Status::TimeLimit } else { Status::Feasible };
                let mut out = known.solution(graph, budget, status, floor, start)?;
                out.notes.push(format!("the MILP was skipped: {reason}"));
                out.warm_start = Some((known.name(), known.makespan()));
                let rest = format!(
                    "the MILP was skipped ({reason}), so this is {}, with its gap against the total cost",
                    known.describe()
                );
                Ok((out, joined(rest)))
            }
            None if refused.is_none() => Err(GraphSolveError::NoSolution { seconds: start.elapsed().as_secs_f64() }),
            None if keep_known => {
                let lowest = match lifted {
                    Some(Err(no)) => no.lowest_peak,
                    _ => None,
                };
                let lower = graph.working_set_bound();
                let min_budget =
                    lowest.map(|bytes| MinBudget { bytes, proven: bytes <= lower, lower: lower.min(bytes) });
                Err(GraphSolveError::Infeasible { algorithm, budget, min_budget })
            }
            _ => Err(GraphSolveError::TooLarge(reason)),
        };
    }
    // The warm start: the cheaper known schedule whose staged form fits the
    // MILP's own accounting (a lifted schedule may fit the simulator's and
    // not the MILP's, which frees later).
    let lift_staged = lift_ok
        .and_then(|l| lift::staged_form(graph, &l.ops))
        .filter(|st| st.accounting(graph).peak <= budget)
        .map(|st| {
            let cost = st.cost(graph);
            (st, cost, LIFT_NAME.to_string())
        });
    let warm: Option<(Staged, f64, String)> = match (lift_staged, base_warm) {
        (Some(l), Some(b)) => Some(if l.1 <= b.1 { l } else { b }),
        (l, b) => l.or(b),
    };
    let warm_start = warm.as_ref().map(|w| (w.2.clone(), w.1));
    let fall_back = |reason: String, status: Status, bound: f64| -> Result<(GraphSolution, String), GraphSolveError> {
        let Some(known) = &best_known else {
            return Err(GraphSolveError::NoSolution { seconds: start.elapsed().as_secs_f64() });
        };
        let mut out = known.solution(graph, budget, status, bound.max(floor), start)?;
        out.backend = Some(opts.backend);
        out.notes.push(format!(
            "the {} solver {reason}; this is {}, the best schedule known{}",
            opts.backend,
            known.describe(),
            if cfg!(feature = "highs") { "" } else { "; HiGHS (remat built with --features highs) solves more graphs" }
        ));
        out.warm_start = warm_start.clone();
        Ok((out, joined(format!("the MILP {reason}, so this is {}", known.describe()))))
    };
    let sol = match milp::solve_milp(graph, budget, warm.as_ref().map(|w| &w.0), &remaining()) {
        Ok(sol) => sol,
        Err(MilpError::Infeasible) => {
            if best_known.is_some() {
                let why = "found no staged schedule within its memory accounting".to_string();
                return fall_back(why, Status::Feasible, floor);
            }
            let min_budget = min_budget(graph, &remaining());
            return Err(GraphSolveError::Infeasible { algorithm, budget, min_budget });
        }
        Err(MilpError::NoSolution { .. }) => {
            let why = "reached the time limit (model build included) before a solution of its own".to_string();
            return fall_back(why, Status::TimeLimit, floor);
        }
        Err(e @ MilpError::Backend { .. }) => {
            if best_known.is_none() {
                return Err(e.into());
            }
            // The LP bound only when time is left for it; the total cost is
            // a lower bound in any case.
            let left = remaining();
            let lp = match left.time_limit {
                Some(l) if l.is_zero() => None,
                _ => milp::relaxation(graph, budget, &left).ok().map(|(b, _)| b),
            };
            return fall_back(format!("stopped with an error ({e})"), Status::Feasible, lp.unwrap_or(floor));
        }
    };
    let status = if sol.optimal { Status::Optimal } else { Status::TimeLimit };
    // The solver's bound, or at least the total cost (see above).
    let bound = if sol.optimal { sol.objective } else { sol.bound.map_or(floor, |b| b.max(floor)) };
    let seconds = start.elapsed().as_secs_f64();
    let mut out =
        checked(graph, budget, algorithm, sol.staged.operations(graph), status, sol.objective, Some(bound), seconds)?;
    out.backend = Some(opts.backend);
    out.warm_start = warm_start;
    let proven = if sol.optimal {
        "proven optimal".to_string()
    } else {
        format!("stopped at the time limit, proven gap {:.2}%", 100.0 * out.schedule.gap.unwrap_or(0.0))
    };
    if let Some(l) = lift_ok.filter(|l| l.replay.makespan < out.schedule.makespan) {
        // The lifted schedule is faster than the MILP's (the MILP stopped
        // early, or the lifted one is not a staged schedule it considers).
        let milp_makespan = out.schedule.makespan;
        let status = if sol.optimal { Status::Feasible } else { Status::TimeLimit };
        // The MILP's bound holds over the staged schedules of its model; the
        // lifted one beat its answer, so only a bound below it is kept.
        let bound = if bound < l.replay.makespan { bound } else { floor };
        let mut kept = Known::Lift(l).solution(graph, budget, status, bound, start)?;
        kept.backend = Some(opts.backend);
        kept.warm_start = out.warm_start.take();
        kept.notes.push(format!(
            "the MILP's schedule ({proven}) replays at {milp_makespan:.4}, slower than the lifted chain schedule's {:.4}",
            l.replay.makespan
        ));
        return Ok((
            kept,
            joined(format!("the MILP ({proven}) found {milp_makespan:.4}, so the lifted schedule is kept")),
        ));
    }
    let rest = format!("the MILP ({proven}) found {:.4}, so its schedule is kept", out.schedule.makespan);
    Ok((out, joined(rest)))
}

/// Solves a Checkmate graph with `checkmate`, `checkmate-approx` or
/// `exhaustive`, and replays the result within `budget`.
pub fn solve_checkmate(
    graph: &CheckmateGraph,
    budget: u64,
    algorithm: GraphAlgorithm,
    opts: &MilpOptions,
) -> Result<GraphSolution, GraphSolveError> {
    if algorithm == GraphAlgorithm::CheckmateApprox {
        crate::guard::milp(graph.len()).map_err(GraphSolveError::TooLarge)?;
    }
    match algorithm {
        GraphAlgorithm::Checkmate => checkmate(graph, budget, None, WhenRefused::Fail, std::time::Instant::now(), opts)
            .map(|(solution, _)| solution),
        GraphAlgorithm::CheckmateApprox => match approx::round_relaxation(graph, budget, opts) {
            Ok(r) => {
                let predicted = r.replay.makespan;
                let mut out = checked(
                    graph,
                    budget,
                    algorithm,
                    r.operations,
                    Status::Rounded,
                    predicted,
                    Some(r.lp_bound),
                    r.seconds,
                )?;
                out.backend = Some(opts.backend);
                Ok(out)
            }
            Err(ApproxError::Lp(MilpError::Infeasible)) => {
                Err(GraphSolveError::Infeasible { algorithm, budget, min_budget: approx_min_budget(graph, opts) })
            }
            Err(ApproxError::Lp(e)) => Err(e.into()),
            Err(e) => Err(GraphSolveError::Rounding(e)),
        },
        GraphAlgorithm::Exhaustive => {
            if graph.len() > exhaustive::MAX_NODES {
                return Err(GraphSolveError::TooLarge(format!(
                    "exhaustive search is limited to joint graphs of at most {} nodes (its state space grows as 3^n); \
                     this one has {}. Use --algorithm checkmate",
                    exhaustive::MAX_NODES,
                    graph.len()
                )));
            }
            let start = std::time::Instant::now();
            match exhaustive::fastest(graph, budget) {
                Some((cost, ops)) => checked(
                    graph,
                    budget,
                    algorithm,
                    ops,
                    Status::Optimal,
                    cost,
                    Some(cost),
                    start.elapsed().as_secs_f64(),
                ),
                None => {
                    let peak = exhaustive::min_peak(graph).0;
                    let min_budget = Some(MinBudget { bytes: peak, proven: true, lower: peak });
                    Err(GraphSolveError::Infeasible { algorithm, budget, min_budget })
                }
            }
        }
    }
}

/// The smallest budget known at which `checkmate-approx` itself finds a
/// schedule: the MILP's smallest budget ([`min_budget`]) when the rounding
/// meets it, else the first budget above it where it does (a doubling search,
/// then a bisection that keeps "fails at `lo`, works at `hi`"). The rounding
/// is not monotone in the budget, so a budget found above the MILP's is not
/// proven the smallest; the MILP's proven lower bound stays the lower bound.
/// An infeasible verdict must name a budget that then works. Within `opts`'
/// time limit in all; `None` when none was found. O(log(peak)) LP solves.
pub fn approx_min_budget(graph: &CheckmateGraph, opts: &MilpOptions) -> Option<MinBudget> {
    let start = std::time::Instant::now();
    let exact = min_budget(graph, opts)?;
    let remaining = || opts.time_limit.map(|limit| limit.saturating_sub(start.elapsed()));
    let works = |b: u64| -> Option<bool> {
        let time_limit = remaining();
        if time_limit.is_some_and(|t| t.is_zero()) {
            return None;
        }
        Some(approx::round_relaxation(graph, b, &MilpOptions { time_limit, ..*opts }).is_ok())
    };
    if works(exact.bytes)? {
        return Some(exact);
    }
    // Store-all's peak bounds the search: the rounding of an LP with room to
    // spare for everything keeps everything.
    let ceiling = baselines::candidates(graph).iter().map(|b| b.peak).max()?;
    let (mut lo, mut step) = (exact.bytes, (exact.bytes / 16).max(1));
    let mut hi = loop {
        let cand = lo.saturating_add(step).min(ceiling.max(lo.saturating_add(1)));
        if works(cand)? {
            break cand;
        }
        if cand >= ceiling {
            return None;
        }
        lo = cand;
        step = step.saturating_mul(2);
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match works(mid) {
            Some(true) => hi = mid,
            Some(false) => lo = mid,
            None => break,
        }
    }
    Some(MinBudget { bytes: hi, proven: false, lower: exact.lower })
}

/// The smallest budget the MILP can meet, by bisection between the
/// working-set lower bound and the lowest baseline peak, each step a
/// feasibility MILP (much easier for a solver than minimising the peak).
/// Within `opts`' time limit in all; when it runs out, the best budget known
/// to work and the best lower bound.
pub fn min_budget(graph: &CheckmateGraph, opts: &MilpOptions) -> Option<MinBudget> {
    let start = std::time::Instant::now();
    // Invariant: every budget below `lo` is infeasible, `hi` is feasible.
    let mut hi = baselines::candidates(graph).iter().map(|b| b.peak).min()?;
    let mut lo = graph.working_set_bound().min(hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let time_limit = opts.time_limit.map(|limit| limit.saturating_sub(start.elapsed()));
        if time_limit.is_some_and(|t| t.is_zero()) {
            break;
        }
        match milp::feasible(graph, mid, &MilpOptions { time_limit, ..*opts }) {
            Ok(Some(staged)) => {
                let peak = staged.accounting(graph).peak;
                if peak >= hi {
                    break; // a solver tolerance slip: stop rather than loop
                }
                hi = peak;
            }
            Ok(None) => lo = mid + 1,
            Err(_) => break,
        }
    }
    Some(MinBudget { bytes: hi, proven: lo == hi, lower: lo })
}
