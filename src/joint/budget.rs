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

use super::graph::{JointGraph, OpClass, Role};
use super::maxflow::INFINITE;
use super::mincut::{Analysis, CutRule, cut, recompute_set};

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
pub fn budget_bytes(graph: &JointGraph, i: usize) -> u64 {
    let node = &graph.nodes()[i];
    if node.role == Role::Primal { 0 } else { node.bytes }
}

/// Whether node `i` may be recomputed under a budget.
fn recomputable(graph: &JointGraph, i: usize) -> bool {
    let node = &graph.nodes()[i];
    node.role != Role::Primal && !node.banned && node.op != Some(OpClass::Random)
}

/// The smallest activation bytes of any valid saved set that never
/// recomputes a random op, and that set. One max-flow.
pub fn smallest_budget(graph: &JointGraph, analysis: &Analysis) -> (u64, Vec<bool>) {
    let saved = cut(graph, analysis, |i| CutRule {
        banned: !recomputable(graph, i),
        weight: if graph.nodes()[i].tuple { INFINITE } else { budget_bytes(graph, i) as u128 },
    })
    .expect("saving what the backward reads is a finite cut");
    let bytes = (0..saved.len()).filter(|&i| saved[i]).map(|i| budget_bytes(graph, i)).sum();
    (bytes, saved)
}

/// The saved set of least recompute cost within `budget` activation bytes (`None`: no
/// limit), the fewest bytes among those. Exact (branch and bound); worst case
/// exponential in the number of V_f nodes the backward needs.
pub fn solve(graph: &JointGraph, analysis: &Analysis, budget: Option<u64>) -> Result<BudgetSolution, BudgetError> {
    if let Some(m) = budget {
        let (smallest, _) = smallest_budget(graph, analysis);
        if smallest > m {
            return Err(BudgetError::Infeasible { budget: m, smallest });
        }
    }
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
    // coefficients near 1 for the solver's tolerances.
    let scale = budget.map_or(1.0, |m| (m as f64).max(1.0));
    // A backward node computable from forward values costs nothing extra:
    // the backward runs it whatever is saved.
    let cost_ns: Vec<f64> =
        (0..n).map(|i| if analysis.required_forward[i] { roofline.seconds(graph, i) * 1e9 } else { 0.0 }).collect();
    let build = |cost_cap: Option<f64>| {
        let mut vars = ProblemVariables::new();
        let mut s: Vec<Option<Variable>> = vec![None; n];
        let mut r: Vec<Option<Variable>> = vec![None; n];
        for i in (0..n).filter(|&i| relevant[i]) {
            if !nodes[i].tuple {
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
        if budget.is_some() {
            constraints.push(bytes.clone().leq(1.0));
        }
        if let Some(cap) = cost_cap {
            constraints.push(cost.clone().leq(cap));
        }
        (vars, s, constraints, bytes, cost)
    };
    let run = |vars: ProblemVariables, objective: Expression, constraints: Vec<good_lp::Constraint>| {
        let mut model = vars.minimise(objective).using(good_lp::solvers::microlp::microlp);
        for c in constraints {
            model.add_constraint(c);
        }
        match model.solve() {
            Ok(solution) => Ok(solution),
            Err(ResolutionError::Infeasible) => Err(BudgetError::Solver("the ILP is infeasible".to_string())),
            Err(e) => Err(BudgetError::Solver(e.to_string())),
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
        return Err(BudgetError::Solver("the ILP's answer fails the exact check (round-off)".to_string()));
    }
    Ok(BudgetSolution { saved, optimal, bound_seconds: bound_ns.unwrap_or(best_cost) / 1e9 })
}

/// The Pareto front of (saved bytes, recompute cost), most bytes first: each
/// point is the least cost within the previous point's bytes minus one, so
/// every point is optimal and none dominates another. At most `max_points`
/// points (the front can be long); the last is the smallest budget's.
pub fn pareto(graph: &JointGraph, analysis: &Analysis, max_points: usize) -> Result<Vec<BudgetSolution>, BudgetError> {
    let (smallest, _) = smallest_budget(graph, analysis);
    let mut points: Vec<BudgetSolution> = Vec::new();
    let mut budget: Option<u64> = None;
    while points.len() < max_points {
        let point = solve(graph, analysis, budget)?;
        let bytes: u64 = (0..point.saved.len()).filter(|&i| point.saved[i]).map(|i| budget_bytes(graph, i)).sum();
        points.push(point);
        if bytes <= smallest {
            break;
        }
        budget = Some(bytes - 1);
    }
    Ok(points)
}
