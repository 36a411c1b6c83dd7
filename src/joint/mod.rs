//! Operator graphs ([`OperatorGraph`]: operator-level joint graphs, a forward
//! and its backward as AOTAutograd traces them; not Checkmate's layer-level
//! [`CheckmateGraph`](crate::graph::CheckmateGraph)) and the fusion-aware
//! min-cut partitioner that chooses which forward values to save for the
//! backward, with an exact byte budget.
//!
//! - [`graph`]: the [`OperatorGraph`], its JSON form (`docs/joint.md`) and
//!   validation with named errors.
//! - [`mincut`]: the paper's Algorithms 1 and 2 and section 3.4 heuristics;
//!   the "save everything" and "recompute everything" baselines; the figures
//!   every partition is judged by.
//! - [`maxflow`]: Dinic's max-flow and the documented choice among equal cuts.
//! - [`cost`]: the roofline that defines a recompute's cost.
//! - [`budget`]: least recompute cost within a byte budget (an ILP), the
//!   smallest feasible budget (a min-cut), the Pareto front.
//!
//! [`partition_json`] is the one-call entry point (the Python bindings use it).
//!
//! | step | complexity |
//! |---|---|
//! | parse + validate | O((V + E) log V) |
//! | min-cut | one max-flow on 2V + 2 vertices (Dinic: O(V^2 E) worst case) |
//! | byte budget | two ILPs (exponential worst case) + one max-flow |

pub mod budget;
pub mod cost;
pub mod graph;
pub mod maxflow;
pub mod mincut;

use serde::Serialize;
use thiserror::Error;

use crate::error::ErrorKind;

pub use budget::BudgetError;
pub use graph::{Node, OpClass, OperatorGraph, OperatorGraphError, Role};
pub use mincut::{Analysis, BanReason, Partition};

/// The old name of [`OperatorGraph`] ("joint" also named the Checkmate graph).
#[doc(hidden)]
#[deprecated(note = "renamed `OperatorGraph` (the Checkmate graph is `graph::CheckmateGraph`)")]
pub type JointGraph = OperatorGraph;
/// The old name of [`OperatorGraphError`].
#[doc(hidden)]
#[deprecated(note = "renamed `OperatorGraphError`")]
pub type JointError = OperatorGraphError;

/// A node the min-cut bans from recompute, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ban {
    /// The node's name.
    pub node: String,
    /// The rule that bans it.
    pub reason: BanReason,
}

/// How the chosen partition was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The paper's min-cut (least memory traffic, fusion-aware bans).
    MinCut,
    /// The byte budget's ILP (least recompute cost within the budget).
    Budget,
    /// A saved set given by the caller ([`partition_saved`]).
    Given,
}

/// Everything `remat mincut` reports: the chosen partition and the baselines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    /// The graph's name.
    pub graph: String,
    /// How `chosen` was found.
    pub method: Method,
    /// The byte budget, when one was given.
    pub memory: Option<u64>,
    /// The partition to use: the min-cut's, the budget's, or the given one.
    pub chosen: Partition,
    /// With a budget: whether the ILP proved its answer optimal.
    pub optimal: Option<bool>,
    /// With a budget: the ILP's lower bound on the recompute cost (seconds).
    pub bound_seconds: Option<f64>,
    /// The min-cut's partition (the same as `chosen` without a budget).
    pub min_cut: Partition,
    /// Save every forward value the backward reads; recompute nothing.
    pub save_all: Partition,
    /// Recompute every forward value from the primals (random ops saved).
    pub recompute_all: Partition,
    /// The smallest activation bytes any partition fits in (random ops never recomputed).
    pub smallest_budget: u64,
    /// The min-cut's bans, in the file's order.
    pub banned: Vec<Ban>,
}

/// A failure of [`partition_json`].
#[derive(Debug, Error, PartialEq)]
pub enum PartitionError {
    /// The graph was rejected.
    #[error(transparent)]
    Graph(#[from] OperatorGraphError),
    /// The budget has no answer.
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

impl PartitionError {
    /// What kind of failure this is: a rejected graph is
    /// [`ErrorKind::Input`], a budget's failure that of [`BudgetError::kind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            PartitionError::Graph(_) => ErrorKind::Input,
            PartitionError::Budget(e) => e.kind(),
        }
    }
}

/// Partitions a validated graph: the min-cut, or with `memory` the least
/// recompute cost within that many saved activation bytes; with the baselines
/// beside it.
///
/// # Examples
///
/// ```
/// use remat::joint::{BudgetError, OperatorGraph, partition};
///
/// // y = tanh(tanh(x)) and its backward, as `remat.torch.export_joint` writes it.
/// let graph = OperatorGraph::from_json(r#"{"name": "tanh_tanh", "nodes": [
///   {"name": "x", "role": "primal", "bytes": 4096},
///   {"name": "dy", "role": "tangent", "bytes": 4096},
///   {"name": "t1", "role": "forward", "op": "pointwise", "inputs": ["x"], "bytes": 4096},
///   {"name": "t2", "role": "forward", "op": "pointwise", "inputs": ["t1"], "bytes": 4096},
///   {"name": "g2", "role": "backward", "op": "pointwise", "inputs": ["dy", "t2"], "bytes": 4096},
///   {"name": "g1", "role": "backward", "op": "pointwise", "inputs": ["g2", "t1"], "bytes": 4096}
/// ], "outputs": ["t2"], "gradients": ["g1"]}"#)?;
/// let answer = partition(&graph, None)?;
/// assert!(answer.chosen.saved_bytes <= answer.save_all.saved_bytes);
/// // Within the smallest budget the saved activations fit; below it, no answer.
/// let smallest = answer.smallest_budget;
/// assert!(partition(&graph, Some(smallest))?.chosen.activation_bytes <= smallest);
/// if smallest > 0 {
///     assert!(matches!(partition(&graph, Some(smallest - 1)), Err(BudgetError::Infeasible { .. })));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn partition(graph: &OperatorGraph, memory: Option<u64>) -> Result<Answer, BudgetError> {
    partition_with(graph, memory, &budget::BudgetOptions::default())
}

/// [`partition`] with the budget's solver options (its ILP time limit).
pub fn partition_with(
    graph: &OperatorGraph,
    memory: Option<u64>,
    options: &budget::BudgetOptions,
) -> Result<Answer, BudgetError> {
    let analysis = Analysis::new(graph);
    let (method, saved, optimal, bound_seconds) = match memory {
        None => (Method::MinCut, mincut::min_cut(graph, &analysis), None, None),
        Some(m) => {
            let solution = budget::least_recompute_with(graph, &analysis, Some(m), options)?;
            (Method::Budget, solution.saved, Some(solution.optimal), Some(solution.bound_seconds))
        }
    };
    let chosen = mincut::evaluate(graph, &analysis, &saved);
    Ok(answer(graph, &analysis, method, memory, chosen, optimal, bound_seconds))
}

/// Why a given saved set cannot be evaluated.
#[derive(Debug, Error, PartialEq)]
pub enum SavedSetError {
    /// A name that is no node.
    #[error("saved node `{0}` is not a node of the graph")]
    UnknownNode(String),
    /// A node that depends on a tangent.
    #[error("saved node `{0}` depends on a tangent: the forward cannot compute it")]
    NotInForward(String),
    /// The backward needs a primal the set does not hold.
    #[error("the backward needs primal `{0}`, which the saved set does not hold")]
    MissingPrimal(String),
}

/// The figures of a saved set given by name (e.g. PyTorch's), beside the
/// min-cut and the baselines. The set may recompute anything, random ops
/// included (the answer's `chosen.recomputed` shows it). O(V + E) + one max-flow.
pub fn partition_saved(graph: &OperatorGraph, names: &[String]) -> Result<Answer, SavedSetError> {
    let analysis = Analysis::new(graph);
    let mut saved = vec![false; graph.nodes().len()];
    for name in names {
        let i = graph.index_of(name).ok_or_else(|| SavedSetError::UnknownNode(name.clone()))?;
        if !analysis.forward_computable[i] {
            return Err(SavedSetError::NotInForward(name.clone()));
        }
        saved[i] = true;
    }
    mincut::recompute_set(graph, &analysis, &saved)
        .map_err(|j| SavedSetError::MissingPrimal(graph.nodes()[j].name.clone()))?;
    let chosen = mincut::evaluate(graph, &analysis, &saved);
    Ok(answer(graph, &analysis, Method::Given, None, chosen, None, None))
}

fn answer(
    graph: &OperatorGraph,
    analysis: &Analysis,
    method: Method,
    memory: Option<u64>,
    chosen: Partition,
    optimal: Option<bool>,
    bound_seconds: Option<f64>,
) -> Answer {
    let min_cut = mincut::evaluate(graph, analysis, &mincut::min_cut(graph, analysis));
    let save_all = mincut::evaluate(graph, analysis, &mincut::save_all(graph, analysis));
    let recompute_all = mincut::evaluate(graph, analysis, &mincut::recompute_all(graph, analysis));
    let (smallest_budget, _) = budget::smallest_budget(graph, analysis);
    let banned = mincut::bans(graph, analysis)
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| analysis.forward_computable[i])
        .filter_map(|(i, reason)| reason.map(|reason| Ban { node: graph.nodes()[i].name.clone(), reason }))
        .collect();
    Answer {
        graph: graph.name().to_string(),
        method,
        memory,
        chosen,
        optimal,
        bound_seconds,
        min_cut,
        save_all,
        recompute_all,
        smallest_budget,
        banned,
    }
}

/// Parses a joint graph from JSON and partitions it (see [`partition`]).
pub fn partition_json(text: &str, memory: Option<u64>) -> Result<Answer, PartitionError> {
    let graph = OperatorGraph::from_json(text)?;
    Ok(partition(&graph, memory)?)
}

/// The Pareto front of saved bytes against recompute cost, most bytes first,
/// at most `max_points` points, within [`budget::BudgetOptions::default`]'s
/// time limit in all (see [`budget::pareto_with`]).
pub fn pareto(graph: &OperatorGraph, max_points: usize) -> Result<Vec<(Partition, bool)>, BudgetError> {
    Ok(pareto_with(graph, max_points, &budget::BudgetOptions::default())?.0)
}

/// [`pareto`] within `options.time_limit` seconds in all; with the reason it
/// stopped before the smallest budget, if it did (see [`budget::pareto_with`]).
#[allow(clippy::type_complexity)]
pub fn pareto_with(
    graph: &OperatorGraph,
    max_points: usize,
    options: &budget::BudgetOptions,
) -> Result<(Vec<(Partition, bool)>, Option<budget::Stopped>), BudgetError> {
    let analysis = Analysis::new(graph);
    let front = budget::pareto_with(graph, &analysis, max_points, options)?;
    let points = front.points.into_iter().map(|p| (mincut::evaluate(graph, &analysis, &p.saved), p.optimal)).collect();
    Ok((points, front.stopped))
}
