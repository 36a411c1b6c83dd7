//! The exact byte budget: among saved sets whose bytes fit, one of least
//! recompute cost ([`super::cost`]), as an integer program solved to proven
//! optimality with good_lp (microlp).
//!
//! Variables, for each V_f node i the backward may need: `s_i` (saved) and,
//! unless i may not be recomputed, `r_i` (recomputed in the backward), both
//! binary. A primal, a random op and a node flagged `banned` have no `r_i`
//! (a random op recomputed would draw other numbers: the wrong gradient); a
//! tuple has no `s_i`.
//!
//! ```text
//! minimise    sum_i cost_i r_i
//! subject to  s_i + r_i >= 1     for each input i in V_f of a backward node
//!             s_k + r_k >= r_i   for each input k in V_f of a node i
//!             sum_i bytes_i s_i <= M
//! ```
//!
//! The bytes counted are those of saved *activations*: a saved primal (an
//! input or a parameter) is alive anyway, so it is free (`bytes_i = 0`), as
//! in PyTorch's budget, whose zero point is "save only the inputs".
//!
//! A second solve fixes the cost at its optimum and minimises the bytes, so
//! the answer is never dominated. The smallest feasible budget needs no
//! solver: it is a minimum cut whose weights are the bytes and whose bans
//! are exactly the nodes without `r_i` (the paper's Lemmas 3.3 and 3.4 make
//! valid saved sets and finite cuts the same thing).

use good_lp::{Expression, ProblemVariables, ResolutionError, Solution, SolverModel, Variable, variable};
use thiserror::Error;

use super::graph::{OpClass, OperatorGraph, Role};
use super::maxflow::INFINITE;
use super::mincut::{Analysis, CutRule, cut, cut_with_value, recompute_set};
use crate::error::ErrorKind;

/// Why a budgeted partition has no answer.
#[derive(Debug, Error, PartialEq)]
pub enum BudgetError {
    /// No saved set fits.
    #[error("no saved set fits in {budget} bytes; the smallest that fits needs {smallest} bytes")]
    Infeasible {
        /// The budget asked for.
        budget: u64,
        /// The smallest feasible budget.
        smallest: u64,
    },
    /// The ILP solver failed.
    #[error("the ILP solver failed: {0}")]
    Solver(String),
}

impl BudgetError {
    /// What kind of failure this is: no saved set within the budget is
    /// [`ErrorKind::Infeasible`], a failed ILP solver [`ErrorKind::Internal`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            BudgetError::Infeasible { .. } => ErrorKind::Infeasible,
            BudgetError::Solver(_) => ErrorKind::Internal,
        }
    }
}

/// A budgeted answer.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetSolution {
    /// Saved flag per node.
    pub saved: Vec<bool>,
    /// Whether the solver proved both solves optimal.
    pub optimal: bool,
    /// The solver's bound on the least recompute cost (seconds).
    pub bound_seconds: f64,
}

/// Bytes node `i` costs the budget when saved: primals are free.
pub fn budget_bytes(graph: &OperatorGraph, i: usize) -> u64 {
    let node = &graph.nodes()[i];
    if node.role == Role::Primal { 0 } else { node.bytes }
}

/// Whether node `i` may be recomputed under a budget.
fn recomputable(graph: &OperatorGraph, i: usize) -> bool {
    let node = &graph.nodes()[i];
    node.role != Role::Primal && !node.banned && node.op != Some(OpClass::Random)
}

/// The smallest activation bytes of any valid saved set that never
/// recomputes a random op, and that set. One max-flow.
pub fn smallest_budget(graph: &OperatorGraph, analysis: &Analysis) -> (u64, Vec<bool>) {
    let saved = cut(graph, analysis, |i| CutRule {
        banned: !recomputable(graph, i),
        weight: if graph.nodes()[i].tuple { INFINITE } else { budget_bytes(graph, i) as u128 },
        recompute: 0,
    })
    .expect("saving what the backward reads is a finite cut");
    let bytes = (0..saved.len()).filter(|&i| saved[i]).map(|i| budget_bytes(graph, i)).sum();
    (bytes, saved)
}

/// Options of a budgeted solve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetOptions {
    /// Seconds each of the two ILP solves may take; past it the answer is the
    /// Lagrangian one, reported as not proven optimal. `None`: no limit.
    pub time_limit: Option<f64>,
}

impl Default for BudgetOptions {
    fn default() -> BudgetOptions {
        BudgetOptions { time_limit: Some(60.0) }
    }
}

/// [`least_recompute_with`] with the default options (a 60 s limit per ILP).
pub fn least_recompute(
    graph: &OperatorGraph,
    analysis: &Analysis,
    budget: Option<u64>,
) -> Result<BudgetSolution, BudgetError> {
    least_recompute_with(graph, analysis, budget, &BudgetOptions::default())
}

/// The saved set of least recompute cost within `budget` activation bytes
/// (`None`: no limit).
///
/// First the Lagrangian relaxation (see [`lagrangian`]): a few dozen
/// max-flows give a feasible set and a lower bound; when they meet, that set
/// is optimal and no ILP runs. Otherwise the ILP (branch and bound; worst
/// case exponential in the number of V_f nodes the backward needs) decides,
/// and among sets of least cost returns one of fewest bytes; if it runs past
/// the time limit, the Lagrangian set is returned with `optimal: false` and
/// its bound.
pub fn least_recompute_with(
    graph: &OperatorGraph,
    analysis: &Analysis,
    budget: Option<u64>,
    options: &BudgetOptions,
) -> Result<BudgetSolution, BudgetError> {
    if let Some(m) = budget {
        let (smallest, _) = smallest_budget(graph, analysis);
        if smallest > m {
            return Err(BudgetError::Infeasible { budget: m, smallest });
        }
    }
    let hull = budget.map(|m| lagrangian(graph, analysis, m));
    if let Some(h) = &hull
        && h.proven
    {
        return Ok(BudgetSolution { saved: h.saved.clone(), optimal: true, bound_seconds: h.bound_seconds });
    }
    match ilp(graph, analysis, budget, options.time_limit) {
        Ok(mut solution) => {
            if let Some(h) = &hull {
                solution.bound_seconds = solution.bound_seconds.max(h.bound_seconds);
            }
            Ok(solution)
        }
        // Past the time limit, or the solver failed on the numbers (sizes
        // near 2^48 defeat its tolerances): the Lagrangian answer is a valid
        // saved set that fits, checked in integers; it is marked not proven
        // optimal, with its bound. Without a budget, the least-cost cut is
        // the Lagrangian answer of an unbounded budget.
        Err(IlpError::TimedOut | IlpError::Failed) => {
            let h = hull.unwrap_or_else(|| lagrangian(graph, analysis, u64::MAX));
            Ok(BudgetSolution { saved: h.saved, optimal: false, bound_seconds: h.bound_seconds })
        }
    }
}

/// The result of [`lagrangian`].
#[derive(Clone, Debug, PartialEq)]
pub struct Hull {
    /// A feasible saved set: the cheapest found within the budget.
    pub saved: Vec<bool>,
    /// Its recompute cost (seconds).
    pub cost_seconds: f64,
    /// A lower bound on the least recompute cost within the budget (seconds).
    pub bound_seconds: f64,
    /// Whether the cost meets the bound (so the set is optimal).
    pub proven: bool,
}

/// The Lagrangian relaxation of the budget: for a price `lambda` per byte,
/// the least `cost + lambda * bytes` over valid saved sets is itself a
/// minimum cut (saving node i cuts its in -> out edge of weight
/// `lambda * bytes_i`; recomputing it puts its in-vertex on the sink's side,
/// cutting a source -> in edge of weight `cost_i`), and
/// `min(cost + lambda * bytes) - lambda * budget` bounds the least cost
/// within the budget from below. A bisection on `lambda` finds the sets on the
/// lower convex hull of the Pareto front around the budget: the cheapest
/// that fits is the answer, the best bound its certificate. Weights are
/// rounded to 10^-9 ns; the bound subtracts the rounding's worst case.
/// About 100 max-flows.
pub fn lagrangian(graph: &OperatorGraph, analysis: &Analysis, budget: u64) -> Hull {
    const UNIT_NS: f64 = 1e-9;
    let nodes = graph.nodes();
    let n = nodes.len();
    let roofline = super::cost::Roofline::default();
    let cost_ns: Vec<f64> =
        (0..n).map(|i| if analysis.required_forward[i] { roofline.seconds(graph, i) * 1e9 } else { 0.0 }).collect();
    let slack_ns = 2.0 * n as f64 * UNIT_NS;
    let max_bytes = (0..n).map(|i| budget_bytes(graph, i)).max().unwrap_or(0).max(1) as f64;
    let eval = |lambda: f64| -> (f64, u64, f64, Vec<bool>) {
        let (value, saved) = cut_with_value(graph, analysis, |i| CutRule {
            banned: !recomputable(graph, i),
            weight: if nodes[i].tuple {
                INFINITE
            } else {
                (lambda * budget_bytes(graph, i) as f64 / UNIT_NS).round() as u128
            },
            recompute: (cost_ns[i] / UNIT_NS).round() as u128,
        })
        .expect("saving what the backward reads is a finite cut");
        let bytes: u64 = (0..n).filter(|&i| saved[i]).map(|i| budget_bytes(graph, i)).sum();
        let cost: f64 = recompute_set(graph, analysis, &saved)
            .expect("a finite cut is a valid saved set")
            .iter()
            .map(|&i| cost_ns[i])
            .sum::<f64>()
            + 0.0;
        let bound = value as f64 * UNIT_NS - slack_ns - lambda * budget as f64;
        (cost, bytes, bound, saved)
    };
    let mut best: Option<(f64, Vec<bool>)> = None;
    let mut bound = f64::NEG_INFINITY;
    let consider = |lambda: f64, best: &mut Option<(f64, Vec<bool>)>, bound: &mut f64| -> bool {
        let (cost, bytes, b, saved) = eval(lambda);
        *bound = bound.max(b);
        let fits = bytes <= budget;
        if fits && best.as_ref().is_none_or(|(c, _)| cost < *c) {
            *best = Some((cost, saved));
        }
        fits
    };
    // lambda = 0: the least cost ignoring bytes; if it fits, it is optimal.
    let mut lo = 0.0;
    let mut hi = 1e-12;
    if !consider(lo, &mut best, &mut bound) {
        // Raise the price until the cut fits, then bisect between.
        while !consider(hi, &mut best, &mut bound) {
            lo = hi;
            hi *= 4.0;
            if hi * max_bytes / UNIT_NS > 1e30 {
                break;
            }
        }
        for _ in 0..60 {
            let mid = if lo == 0.0 { hi / 2.0 } else { (lo * hi).sqrt() };
            if consider(mid, &mut best, &mut bound) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
    }
    let (cost_ns_best, saved) = best.unwrap_or_else(|| {
        // Only the smallest budget's set fits (the price search gave up).
        let (_, saved) = smallest_budget(graph, analysis);
        let cost =
            recompute_set(graph, analysis, &saved).expect("valid").iter().map(|&i| cost_ns[i]).sum::<f64>() + 0.0;
        (cost, saved)
    });
    let bound = bound.max(0.0);
    let proven = cost_ns_best <= bound + 1e-9 * cost_ns_best.max(0.0) + slack_ns;
    Hull { saved, cost_seconds: cost_ns_best / 1e9, bound_seconds: bound.min(cost_ns_best) / 1e9, proven }
}

/// Why the ILP gave no answer.
enum IlpError {
    TimedOut,
    /// The solver failed, or its answer failed the exact check (round-off).
    Failed,
}

/// The ILP of the module doc: least cost, then fewest bytes at that cost.
fn ilp(
    graph: &OperatorGraph,
    analysis: &Analysis,
    budget: Option<u64>,
    time_limit: Option<f64>,
) -> Result<BudgetSolution, IlpError> {
    let nodes = graph.nodes();
    let n = nodes.len();
    let roofline = super::cost::Roofline::default();
    // Only V_f ancestors of the backward matter.
    let mut relevant = vec![false; n];
    let mut stack: Vec<usize> = (0..n).filter(|&i| analysis.backward_required[i]).collect();
    for &i in &stack {
        relevant[i] = analysis.forward_computable[i];
    }
    while let Some(i) = stack.pop() {
        for &j in &nodes[i].inputs {
            if analysis.forward_computable[j] && !relevant[j] {
                relevant[j] = true;
                stack.push(j);
            }
        }
    }
    // Costs in nanoseconds and bytes as a fraction of the budget keep the
    // coefficients near 1 for the solver's tolerances: a node whose bytes
    // alone exceed the budget cannot be saved, so it gets no `s_i` (its
    // coefficient would be huge: 2^38 for 2^48 bytes under 1 KiB, which
    // microlp's feasibility check rejects), and without a budget the bytes
    // are scaled by the largest.
    let too_big = |i: usize| budget.is_some_and(|m| budget_bytes(graph, i) > m);
    let largest = (0..n).filter(|&i| relevant[i]).map(|i| budget_bytes(graph, i)).max().unwrap_or(1);
    let scale = budget.map_or(largest, |m| m.min(largest)).max(1) as f64;
    // A backward node computable from forward values costs nothing extra:
    // the backward runs it whatever is saved.
    let cost_ns: Vec<f64> =
        (0..n).map(|i| if analysis.required_forward[i] { roofline.seconds(graph, i) * 1e9 } else { 0.0 }).collect();
    let build = |cost_cap: Option<f64>| {
        let mut vars = ProblemVariables::new();
        let mut s: Vec<Option<Variable>> = vec![None; n];
        let mut r: Vec<Option<Variable>> = vec![None; n];
        for i in (0..n).filter(|&i| relevant[i]) {
            if !nodes[i].tuple && !too_big(i) {
                s[i] = Some(vars.add(variable().binary()));
            }
            if relevant[i] && recomputable(graph, i) {
                r[i] = Some(vars.add(variable().binary()));
            }
        }
        let avail = |i: usize| -> Expression {
            let mut e = Expression::from(0.0);
            if let Some(v) = s[i] {
                e += v;
            }
            if let Some(v) = r[i] {
                e += v;
            }
            e
        };
        let mut constraints = Vec::new();
        for i in 0..n {
            if !analysis.forward_computable[i] {
                // Computed in the backward: its V_f inputs must be at hand.
                for &j in &nodes[i].inputs {
                    if relevant[j] {
                        constraints.push(avail(j).geq(1.0));
                    }
                }
                continue;
            }
            if analysis.backward_required[i] {
                constraints.push(avail(i).geq(1.0));
            }
            if let Some(ri) = r[i] {
                for &k in &nodes[i].inputs {
                    if relevant[k] {
                        constraints.push(avail(k).geq(ri));
                    }
                }
            }
        }
        let bytes: Expression = (0..n).filter_map(|i| s[i].map(|v| (budget_bytes(graph, i) as f64 / scale) * v)).sum();
        let cost: Expression = (0..n).filter_map(|i| r[i].map(|v| cost_ns[i] * v)).sum();
        if let Some(m) = budget {
            constraints.push(bytes.clone().leq(m as f64 / scale));
        }
        if let Some(cap) = cost_cap {
            constraints.push(cost.clone().leq(cap));
        }
        (vars, s, constraints, bytes, cost)
    };
    let run = |vars: ProblemVariables, objective: Expression, constraints: Vec<good_lp::Constraint>| {
        use good_lp::WithTimeLimit;
        let mut model = vars.minimise(objective).using(good_lp::solvers::microlp::microlp);
        for c in constraints {
            model.add_constraint(c);
        }
        if let Some(limit) = time_limit {
            model = model.with_time_limit(limit);
        }
        match model.solve() {
            Ok(solution) => Ok(solution),
            Err(ResolutionError::Infeasible) => Err(IlpError::Failed),
            Err(ResolutionError::Other(m)) if m.contains("Time limit") || m.contains("time limit") => {
                Err(IlpError::TimedOut)
            }
            Err(_) => Err(IlpError::Failed),
        }
    };
    // First: least cost.
    let (vars, _, constraints, _, cost) = build(None);
    let first = run(vars, cost.clone(), constraints)?;
    let best_cost = first.eval(&cost);
    let first = first.into_inner();
    let mut optimal = first.termination_reason() == microlp::TerminationReason::ProvenOptimal;
    let bound_ns = first.stats().best_bound;
    // Second: fewest bytes at that cost (a hair of slack for round-off).
    let (vars, s, constraints, bytes, _) = build(Some(best_cost * (1.0 + 1e-9) + 1e-9));
    let second = run(vars, bytes, constraints)?;
    let saved: Vec<bool> = s.iter().map(|v| v.is_some_and(|v| second.value(v) > 0.5)).collect();
    let second = second.into_inner();
    optimal &= second.termination_reason() == microlp::TerminationReason::ProvenOptimal;
    // Check the answer exactly, in integers, rather than trust the tolerances.
    let fits = budget.is_none_or(|m| (0..n).filter(|&i| saved[i]).map(|i| budget_bytes(graph, i)).sum::<u64>() <= m);
    let valid = recompute_set(graph, analysis, &saved).is_ok_and(|rec| rec.iter().all(|&i| recomputable(graph, i)));
    if !fits || !valid {
        return Err(IlpError::Failed);
    }
    Ok(BudgetSolution { saved, optimal, bound_seconds: bound_ns.unwrap_or(best_cost) / 1e9 })
}

/// The Pareto front of (saved bytes, recompute cost), most bytes first: each
/// point is the least cost within the previous point's bytes minus one, so
/// every point is optimal and none dominates another. At most `max_points`
/// points (the front can be long); the last is the smallest budget's.
pub fn pareto(
    graph: &OperatorGraph,
    analysis: &Analysis,
    max_points: usize,
) -> Result<Vec<BudgetSolution>, BudgetError> {
    Ok(pareto_with(graph, analysis, max_points, &BudgetOptions::default())?.points)
}

/// A Pareto front, possibly cut short.
#[derive(Clone, Debug, PartialEq)]
pub struct Front {
    /// The points found, most bytes first.
    pub points: Vec<BudgetSolution>,
    /// Why the front stops before the smallest budget's point, if it does.
    pub stopped: Option<Stopped>,
}

/// Why [`pareto_with`] stopped before the smallest budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// `max_points` points were found.
    MaxPoints,
    /// The time limit ran out (the points found so far are kept).
    TimeLimit,
}

/// [`pareto`] within `options.time_limit` seconds in all (`None`: no
/// limit): each point's ILP gets what is left, and once the time is spent
/// the front found so far is returned with [`Stopped::TimeLimit`]. A point
/// whose ILP ran out of time is the Lagrangian one, marked not optimal.
pub fn pareto_with(
    graph: &OperatorGraph,
    analysis: &Analysis,
    max_points: usize,
    options: &BudgetOptions,
) -> Result<Front, BudgetError> {
    let start = std::time::Instant::now();
    let left = || options.time_limit.map(|t| t - start.elapsed().as_secs_f64());
    let (smallest, _) = smallest_budget(graph, analysis);
    let mut points: Vec<BudgetSolution> = Vec::new();
    let mut budget: Option<u64> = None;
    loop {
        if points.len() >= max_points {
            return Ok(Front { points, stopped: Some(Stopped::MaxPoints) });
        }
        let time_limit = left();
        if time_limit.is_some_and(|t| t <= 0.0) {
            return Ok(Front { points, stopped: Some(Stopped::TimeLimit) });
        }
        let point = least_recompute_with(graph, analysis, budget, &BudgetOptions { time_limit })?;
        let bytes: u64 = (0..point.saved.len()).filter(|&i| point.saved[i]).map(|i| budget_bytes(graph, i)).sum();
        points.push(point);
        if bytes <= smallest {
            return Ok(Front { points, stopped: None });
        }
        budget = Some(bytes - 1);
    }
}
