//! Graph schedules: sequences of `compute` and `free` operations on a joint
//! graph's nodes, their JSON form and a compact text notation.
//!
//! JSON: `{"algorithm", "budget", "makespan", "peak_memory", "status", "gap",
//! "operations": [{"op": "compute", "node": "conv1"}, {"op": "free", "node": "conv1"}]}`.
//! Node names are resolved against the graph when a schedule is read.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::graph::CheckmateGraph;

/// One operation of a graph schedule, on a node index of its graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GraphOp {
    /// Evaluate the node: its inputs must be resident; its value becomes resident.
    Compute(usize),
    /// Drop the node's value from memory.
    Free(usize),
}

impl GraphOp {
    /// The node the operation acts on.
    pub fn node(self) -> usize {
        match self {
            GraphOp::Compute(i) | GraphOp::Free(i) => i,
        }
    }
}

/// How good a graph schedule is known to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Proven optimal (within the algorithm's search space).
    Optimal,
    /// The time limit was reached: the best schedule found; `gap` bounds how far
    /// from optimal it can be.
    TimeLimit,
    /// Rounded from the LP relaxation; `gap` is measured against the LP bound.
    Rounded,
    /// Valid, but the solver stopped early (an error) without proving anything
    /// better: the best schedule known; `gap` is against the LP bound.
    Feasible,
}

impl Status {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Optimal => "optimal",
            Status::TimeLimit => "time_limit",
            Status::Rounded => "rounded",
            Status::Feasible => "feasible",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A graph schedule as remat prints and reads it. `makespan` and `peak_memory`
/// are the graph simulator's figures for `operations`.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphSchedule {
    /// Which algorithm produced it (`checkmate`, `checkmate-approx`, ...).
    pub algorithm: String,
    /// The budget it was computed for, in bytes.
    pub budget: u64,
    /// Sum of the costs of the computed nodes.
    pub makespan: f64,
    /// Largest memory in use, in bytes.
    pub peak_memory: u64,
    /// How good it is known to be.
    pub status: Status,
    /// Proven relative gap `(makespan - lower bound) / makespan`, when known.
    pub gap: Option<f64>,
    /// The operations.
    pub operations: Vec<GraphOp>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpJson {
    op: String,
    node: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleJson {
    algorithm: String,
    budget: u64,
    makespan: f64,
    peak_memory: u64,
    status: Status,
    gap: Option<f64>,
    operations: Vec<OpJson>,
}

/// Why a graph schedule file could not be read.
#[derive(Debug, Error, PartialEq)]
pub enum GraphScheduleError {
    /// Not JSON of a graph schedule.
    #[error("{path}: {message}")]
    Json {
        /// Where in the file.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// An operation that is not `compute` or `free`.
    #[error("operations[{index}].op is `{op}`; expected `compute` or `free`")]
    UnknownOp {
        /// 0-based position.
        index: usize,
        /// What was written.
        op: String,
    },
    /// A notation token that names no node of the graph.
    #[error(
        "token {index}: `{token}` is not a node of graph `{graph}` (the notation is NAME to compute a node, -NAME \
         to free it; a node whose name has spaces needs the JSON form, `remat solve --json`)"
    )]
    UnknownToken {
        /// 1-based position.
        index: usize,
        /// The token.
        token: String,
        /// The graph's name.
        graph: String,
    },
    /// A node name the graph does not have.
    #[error("operations[{index}].node `{node}` is not a node of graph `{graph}`")]
    UnknownNode {
        /// 0-based position.
        index: usize,
        /// The name written.
        node: String,
        /// The graph's name.
        graph: String,
    },
}

impl GraphSchedule {
    /// The JSON form, naming nodes by `graph`'s names.
    pub fn to_json(&self, graph: &CheckmateGraph) -> String {
        let operations = self
            .operations
            .iter()
            .map(|op| {
                let (kind, i) = match *op {
                    GraphOp::Compute(i) => ("compute", i),
                    GraphOp::Free(i) => ("free", i),
                };
                OpJson { op: kind.to_string(), node: graph.node(i).name.clone() }
            })
            .collect();
        let json = ScheduleJson {
            algorithm: self.algorithm.clone(),
            budget: self.budget,
            makespan: self.makespan,
            peak_memory: self.peak_memory,
            status: self.status,
            gap: self.gap,
            operations,
        };
        serde_json::to_string_pretty(&json).expect("a schedule serializes")
    }

    /// Reads a schedule written by [`GraphSchedule::to_json`], resolving node
    /// names against `graph`.
    pub fn from_json(text: &str, graph: &CheckmateGraph) -> Result<GraphSchedule, GraphScheduleError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let j: ScheduleJson = serde_path_to_error::deserialize(&mut *de).map_err(|e| GraphScheduleError::Json {
            path: if e.path().to_string() == "." { "schedule".into() } else { e.path().to_string() },
            message: e.into_inner().to_string(),
        })?;
        de.end().map_err(|e| GraphScheduleError::Json {
            path: "schedule".into(),
            message: format!("{e} (a file holds one JSON value; remove what follows it)"),
        })?;
        let operations = parse_ops(&j.operations, graph)?;
        Ok(GraphSchedule {
            algorithm: j.algorithm,
            budget: j.budget,
            makespan: j.makespan,
            peak_memory: j.peak_memory,
            status: j.status,
            gap: j.gap,
            operations,
        })
    }
}

/// The operations of a graph schedule in any form remat writes: the JSON of
/// [`GraphSchedule::to_json`] (`remat solve --json`), the notation of
/// [`notation`] (`enc1 pool1 ... -enc1`), or the whole report `remat solve`
/// prints for a graph (its last line is the notation). O(length of `text`).
pub fn parse_graph_operations(text: &str, graph: &CheckmateGraph) -> Result<Vec<GraphOp>, GraphScheduleError> {
    if text.trim_start().starts_with('{') {
        return Ok(GraphSchedule::from_json(text, graph)?.operations);
    }
    crate::schedule::schedule_line(text)
        .split_whitespace()
        .enumerate()
        .map(|(i, token)| {
            let (name, free) = match token.strip_prefix('-') {
                Some(name) if graph.index_of(token).is_none() => (name, true),
                _ => (token, false),
            };
            let node = graph.index_of(name).ok_or_else(|| GraphScheduleError::UnknownToken {
                index: i + 1,
                token: token.to_string(),
                graph: graph.name().to_string(),
            })?;
            Ok(if free { GraphOp::Free(node) } else { GraphOp::Compute(node) })
        })
        .collect()
}

fn parse_ops(ops: &[OpJson], graph: &CheckmateGraph) -> Result<Vec<GraphOp>, GraphScheduleError> {
    ops.iter()
        .enumerate()
        .map(|(index, o)| {
            let i = graph.index_of(&o.node).ok_or_else(|| GraphScheduleError::UnknownNode {
                index,
                node: o.node.clone(),
                graph: graph.name().to_string(),
            })?;
            match o.op.as_str() {
                "compute" => Ok(GraphOp::Compute(i)),
                "free" => Ok(GraphOp::Free(i)),
                other => Err(GraphScheduleError::UnknownOp { index, op: other.to_string() }),
            }
        })
        .collect()
}

/// A compact text form: computed nodes by name, freed ones as `-name`,
/// separated by spaces.
pub fn notation(graph: &CheckmateGraph, ops: &[GraphOp]) -> String {
    ops.iter()
        .map(|op| match *op {
            GraphOp::Compute(i) => graph.node(i).name.clone(),
            GraphOp::Free(i) => format!("-{}", graph.node(i).name),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::CheckmateNode;

    fn graph() -> CheckmateGraph {
        let node = |name: &str, inputs: Vec<usize>| CheckmateNode {
            name: name.into(),
            cost: 1.0,
            size: 1,
            overhead: 0,
            inputs,
        };
        CheckmateGraph::new("g", 0, vec![node("a", vec![]), node("b", vec![0])]).unwrap()
    }

    #[test]
    fn json_round_trip_and_errors() {
        let g = graph();
        let s = GraphSchedule {
            algorithm: "checkmate".into(),
            budget: 2,
            makespan: 2.0,
            peak_memory: 2,
            status: Status::TimeLimit,
            gap: Some(0.25),
            operations: vec![GraphOp::Compute(0), GraphOp::Compute(1), GraphOp::Free(0)],
        };
        let text = s.to_json(&g);
        assert!(text.contains(r#""op": "free""#) && text.contains(r#""status": "time_limit""#), "{text}");
        assert_eq!(GraphSchedule::from_json(&text, &g).unwrap(), s);
        assert_eq!(notation(&g, &s.operations), "a b -a");
        let bad = text.replace(r#""node": "b""#, r#""node": "zz""#);
        let e = GraphSchedule::from_json(&bad, &g).unwrap_err().to_string();
        assert_eq!(e, "operations[1].node `zz` is not a node of graph `g`");
        let bad = text.replace(r#""op": "free""#, r#""op": "drop""#);
        let e = GraphSchedule::from_json(&bad, &g).unwrap_err().to_string();
        assert!(e.contains("`drop`"), "{e}");
    }
}
