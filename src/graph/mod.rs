//! General graphs (Checkmate): forward graphs and *Checkmate graphs* (joint
//! forward+backward graphs in Checkmate's form), their JSON forms, chain
//! detection, the graph simulator and the solvers. (The operator-level graphs
//! of PyTorch's partitioner are another kind: [`crate::joint::OperatorGraph`].)
//!
//! Two file forms (see docs/guide.md, "Graphs"):
//! - a *forward graph* ([`ForwardGraph`]): the network's layers with the stage
//!   fields of a chain and the names of their inputs. remat derives the
//!   backward nodes itself ([`backward::derive`] gives its Checkmate graph); a
//!   forward graph that is a path is a [`Chain`](crate::Chain)
//!   ([`ForwardGraph::as_chain`]), which [`crate::problem::solve`] gives to
//!   the chain solvers.
//! - a *Checkmate graph* ([`CheckmateGraph`], the joint form, `"joint":
//!   true`): Checkmate's own form, every forward and backward operation a node
//!   with a cost and an output size, in topological order, the last node the
//!   final result.
//!
//! Both are validated on construction: names are unique, every input names an
//! earlier node, times are finite and non-negative and the sizes add up to
//! less than `u64::MAX`, so the solvers and the simulator never overflow.
//!
//! Graphs that are not paths are solved by the Checkmate MILP ([`milp`]),
//! which starts from a schedule lifted from the chain DP of the network cut
//! into blocks (`lift`): the answer is never slower than that schedule
//! ([`checkmate_forward`]). Which solver an input goes to (a path to the chain
//! solvers, `auto`'s choice) is [`crate::problem`]'s to decide, not this
//! module's.

mod algorithm;
pub mod approx;
pub mod backward;
pub mod baselines;
mod checkmate;
pub mod exhaustive;
mod forward;
// The chain DP lifted to graphs: public for tests only.
#[doc(hidden)]
pub mod lift;
pub mod milp;
pub mod schedule;
pub mod simulate;
mod solve;
pub(crate) mod staged;

pub use algorithm::GraphAlgorithm;
pub use checkmate::{CheckmateGraph, CheckmateNode, CheckmateRole};
pub use forward::{ForwardGraph, NotAPath};
pub use schedule::{GraphOp, GraphSchedule, Status};
pub use simulate::{GraphReplay, GraphSimulateError, simulate, simulate_within};
pub use solve::{
    GraphSolution, GraphSolveError, LIFT_NAME, MinBudget, WhenRefused, checkmate_forward, min_budget, solve_checkmate,
};

/// The old name of [`CheckmateGraph`] ("joint" also named the operator graph).
#[doc(hidden)]
#[deprecated(note = "renamed `CheckmateGraph` (the operator graph is `joint::OperatorGraph`)")]
pub type Graph = CheckmateGraph;
/// The old name of [`CheckmateNode`].
#[doc(hidden)]
#[deprecated(note = "renamed `CheckmateNode`")]
pub type Node = CheckmateNode;
/// The old name of [`CheckmateRole`].
#[doc(hidden)]
#[deprecated(note = "renamed `CheckmateRole`")]
pub type Role = CheckmateRole;

use std::collections::HashMap;

use thiserror::Error;

/// Why a graph file or graph was rejected. Every variant names the node and
/// field at fault.
#[derive(Debug, Error, PartialEq)]
pub enum GraphError {
    /// Not JSON of either graph form (syntax, unknown or missing field, type).
    #[error("{path}: {message}")]
    Format {
        /// Where in the file (`nodes[2].output_size (node 3)`).
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// No node at all.
    #[error("`nodes` is empty: a graph needs at least one node")]
    Empty,
    /// A node without a name.
    #[error("nodes[{index}].name is empty: every node needs a unique name")]
    EmptyName {
        /// 0-based position in `nodes`.
        index: usize,
    },
    /// Two nodes with one name.
    #[error("nodes[{second}].name `{name}` is already the name of nodes[{first}]; names must be unique")]
    DuplicateName {
        /// The repeated name.
        name: String,
        /// Position of its first use.
        first: usize,
        /// Position of the repeat.
        second: usize,
    },
    /// An input that is not an earlier node.
    #[error("nodes[{index}] (`{node}`): input `{input}` {}", if *later { "comes later in `nodes`; nodes must be in topological order (inputs first)" } else { "is not the name of any node" })]
    UnknownInput {
        /// The node whose `inputs` is wrong.
        node: String,
        /// Its position.
        index: usize,
        /// The input as written.
        input: String,
        /// True when the name exists but at or after this node.
        later: bool,
    },
    /// An input listed twice.
    #[error("nodes[{index}] (`{node}`): input `{input}` is listed twice")]
    RepeatedInput {
        /// The node.
        node: String,
        /// Its position.
        index: usize,
        /// The repeated input.
        input: String,
    },
    /// A time or cost that is negative, NaN or infinite.
    #[error("nodes[{index}] (`{node}`): {field} is {value}; times must be finite and non-negative")]
    BadTime {
        /// The node.
        node: String,
        /// Its position.
        index: usize,
        /// `cost`, `forward_time` or `backward_time`.
        field: &'static str,
        /// The value found.
        value: f64,
    },
    /// A forward node whose output nothing reads (only the last node may be unused).
    #[error(
        "nodes[{index}] (`{node}`) is not an input of any later node; in a forward graph only the last \
         node (the output) may be unused (a dead branch has no gradient to compute)"
    )]
    Unused {
        /// The node.
        node: String,
        /// Its position.
        index: usize,
    },
    /// The sizes add up to more than `u64::MAX` bytes.
    #[error("the sizes of the graph add up to more than {} bytes (u64); at `{node}`", u64::MAX)]
    Overflow {
        /// The node at which the running total overflows.
        node: String,
    },
}

fn parse_value(text: &str) -> Result<serde_json::Value, GraphError> {
    serde_json::from_str(text).map_err(|e| {
        let mut message = e.to_string();
        let at = e.is_syntax().then(|| crate::chain::syntax_context(text, e.line(), e.column())).flatten();
        if let Some((_, value)) = &at {
            message = crate::chain::malformed_value_message(message, value);
        }
        GraphError::Format { path: at.map_or_else(|| "graph".into(), |(key, _)| format!("graph: {key}")), message }
    })
}

/// Deserializes one of the graph forms, naming the field at fault
/// (`nodes[2].cost (node 3)`).
fn deserialize<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, GraphError> {
    // serde reads a struct from a positional array too (fields in declaration
    // order): a node must be an object with named fields.
    let nodes = value.get("nodes").and_then(serde_json::Value::as_array).map_or(&[][..], Vec::as_slice);
    if let Some(i) = nodes.iter().position(|n| !n.is_object()) {
        return Err(GraphError::Format {
            path: format!("nodes[{i}] (node {})", i + 1),
            message: format!("expected an object with named fields, found `{}`", nodes[i]),
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let (path, message) = crate::chain::describe_json_error(e, "nodes", "node", "graph");
        GraphError::Format { path, message }
    })
}

/// True when `text` is JSON whose top level has a `nodes` key: a graph file of
/// either form (chain files have `stages`). Cheap enough to call on every file.
///
/// Text that is not valid JSON is judged by its keys as written: one with a
/// `"nodes"` key and no `"stages"` is a graph with a syntax error (a trailing
/// comma, a hex number), whose error then names the graph, not a chain.
pub fn looks_like_graph(text: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => v.get("nodes").is_some(),
        Err(_) => has_key(text, "nodes") && !has_key(text, "stages"),
    }
}

/// Whether `"key"` followed by `:` appears in `text` (a key as written, in
/// text that may not parse). O(length of `text`).
pub fn has_key(text: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    text.match_indices(&quoted).any(|(i, _)| text[i + quoted.len()..].trim_start().starts_with(':'))
}

/// A graph file of either form.
#[derive(Clone, Debug)]
pub enum GraphFile {
    /// A forward graph (remat derives the backward).
    Forward(ForwardGraph),
    /// A Checkmate graph: the joint forward+backward form (`"joint": true`).
    Checkmate(CheckmateGraph),
}

impl GraphFile {
    /// Parses either form: `"joint": true` selects the joint form, anything
    /// else is read as a forward graph.
    pub fn from_json(text: &str) -> Result<GraphFile, GraphError> {
        let value = parse_value(text)?;
        if value.get("joint").and_then(serde_json::Value::as_bool) == Some(true) {
            Ok(GraphFile::Checkmate(CheckmateGraph::from_parsed(deserialize(&value)?)?))
        } else {
            Ok(GraphFile::Forward(ForwardGraph::from_parsed(deserialize(&value)?)?))
        }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        match self {
            GraphFile::Forward(f) => f.name(),
            GraphFile::Checkmate(g) => g.name(),
        }
    }

    /// Validation warnings (e.g. a raised `saved_size`).
    pub fn warnings(&self) -> &[String] {
        match self {
            GraphFile::Forward(f) => f.warnings(),
            GraphFile::Checkmate(_) => &[],
        }
    }
}

/// Resolves input names to indices of earlier nodes, checking names on the way.
fn resolve_inputs<'a>(names: impl Iterator<Item = (&'a str, &'a [String])>) -> Result<Vec<Vec<usize>>, GraphError> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut all_inputs = Vec::new();
    let named: Vec<(&str, &[String])> = names.collect();
    let all_names: HashMap<&str, usize> = named.iter().enumerate().map(|(i, (n, _))| (*n, i)).collect();
    for (i, (name, inputs)) in named.iter().enumerate() {
        if name.is_empty() {
            return Err(GraphError::EmptyName { index: i });
        }
        if let Some(&first) = index.get(*name) {
            return Err(GraphError::DuplicateName { name: name.to_string(), first, second: i });
        }
        let mut resolved = Vec::with_capacity(inputs.len());
        for input in inputs.iter() {
            let Some(&j) = index.get(input.as_str()) else {
                return Err(GraphError::UnknownInput {
                    node: name.to_string(),
                    index: i,
                    input: input.clone(),
                    later: all_names.contains_key(input.as_str()),
                });
            };
            if resolved.contains(&j) {
                return Err(GraphError::RepeatedInput { node: name.to_string(), index: i, input: input.clone() });
            }
            resolved.push(j);
        }
        index.insert(name.to_string(), i);
        all_inputs.push(resolved);
    }
    Ok(all_inputs)
}

fn users_of(inputs: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut users = vec![Vec::new(); inputs.len()];
    for (v, ins) in inputs.iter().enumerate() {
        for &u in ins {
            users[u].push(v);
        }
    }
    users
}

fn check_time(node: &str, index: usize, field: &'static str, value: f64) -> Result<(), GraphError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(GraphError::BadTime { node: node.to_string(), index, field, value })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Chain, Stage};

    const JOINT: &str = r#"{"name": "j", "joint": true, "input_size": 5, "nodes": [
        {"name": "x", "cost": 1.5, "size": 2, "inputs": []},
        {"name": "y", "cost": 2, "size": 3, "overhead": 4, "inputs": ["x"]},
        {"name": "z", "cost": 0, "size": 1, "inputs": ["x", "y"]}
    ], "metadata": {"from": "test"}}"#;

    #[test]
    #[allow(deprecated)]
    fn the_old_names_still_compile() {
        let GraphFile::Checkmate(g) = GraphFile::from_json(JOINT).unwrap() else { panic!("a Checkmate graph") };
        let old: Graph = Graph::from_json(&g.to_json()).unwrap();
        let node: &Node = old.node(0);
        assert_eq!((node, old.role(0)), (g.node(0), Role::Given));
    }

    #[test]
    fn joint_graphs_round_trip() {
        let GraphFile::Checkmate(g) = GraphFile::from_json(JOINT).unwrap() else { panic!("a joint graph") };
        assert_eq!((g.len(), g.input_size(), g.total_cost()), (3, 5, 3.5));
        assert_eq!(g.node(2).inputs, [0, 1]);
        assert_eq!(g.users(0), [1, 2]);
        assert_eq!(g.working_set_bound(), 5 + 3 + 4 + 2, "y with its input x and its transient");
        assert_eq!(CheckmateGraph::from_json(&g.to_json()).unwrap(), g);
        assert!(looks_like_graph(JOINT) && !looks_like_graph(r#"{"stages": []}"#) && !looks_like_graph("nodes"));
    }

    #[test]
    fn graph_errors_name_the_node_and_field() {
        let cases = [
            (JOINT.replace(r#""cost": 2,"#, r#""cost": -2,"#), "nodes[1] (`y`): cost is -2"),
            (
                JOINT.replace(r#""inputs": ["x", "y"]"#, r#""inputs": ["x", "x"]"#),
                "nodes[2] (`z`): input `x` is listed twice",
            ),
            (JOINT.replace(r#""size": 3,"#, r#""size": "big","#), "nodes[1].size (node 2)"),
            (JOINT.replace(r#""cost": 0,"#, r#""cost": 0, "colour": 1,"#), "unknown field `colour`"),
            (JOINT.replace(r#""name": "z""#, r#""name": """#), "nodes[2].name is empty"),
            (r#"{"name": "e", "joint": true, "nodes": []}"#.to_string(), "`nodes` is empty"),
            (
                r#"{"name": "e", "input_size": 1, "nodes": [{"name": "a"}]}"#.to_string(),
                "nodes[0] (node 1): missing field",
            ),
        ];
        for (text, expected) in cases {
            let e = GraphFile::from_json(&text).unwrap_err().to_string();
            assert!(e.contains(expected), "got `{e}`, expected `{expected}`");
        }
    }

    fn forward(inputs: &[&[&str]]) -> String {
        let nodes: Vec<String> = inputs
            .iter()
            .enumerate()
            .map(|(i, ins)| {
                let ins: Vec<String> = ins.iter().map(|s| format!("\"{s}\"")).collect();
                format!(
                    r#"{{"name": "n{i}", "inputs": [{}], "forward_time": 1, "backward_time": 2, "output_size": 4, "saved_size": 3}}"#,
                    ins.join(", ")
                )
            })
            .collect();
        format!(r#"{{"name": "f", "input_size": 1, "nodes": [{}]}}"#, nodes.join(", "))
    }

    #[test]
    fn chain_detection_says_which_node_branches() {
        let path = ForwardGraph::from_json(&forward(&[&[], &["n0"], &["n1"]])).unwrap();
        let chain = path.as_chain().unwrap();
        assert_eq!((chain.len(), chain.name(), chain.saved_size(2)), (3, "f", 4), "saved_size raised to output_size");
        assert_eq!(path.warnings().len(), 3);
        let cases: [(&[&[&str]], &str); 3] = [
            (&[&[], &["n0"], &["n0", "n1"]], "node `n2` has 2 inputs (`n0`, `n1`), not just the node before it (`n1`)"),
            (&[&[], &["n0"], &["n0"], &["n1", "n2"]], "node `n2` reads `n0`, not just the node before it (`n1`)"),
            (&[&[], &[], &["n0", "n1"]], "node `n1` reads the network input, not just the node before it (`n0`)"),
        ];
        for (inputs, expected) in cases {
            let g = ForwardGraph::from_json(&forward(inputs)).unwrap();
            assert_eq!(g.as_chain().unwrap_err().to_string(), expected);
        }
    }

    #[test]
    fn chains_become_paths_and_keep_a_real_loss() {
        let mut stages = vec![Stage::simple(1.0, 2.0, 3, 4), Stage::simple(1.0, 2.0, 3, 4)];
        stages[1].name = Some("fc".into());
        let zero = Chain::new("c", 2, stages.clone(), Stage::zero_loss()).unwrap();
        let f = ForwardGraph::from_chain(&zero);
        assert_eq!((f.len(), f.node_name(0), f.node_name(1)), (2, "stage 1", "fc"));
        assert_eq!(
            f.as_chain().unwrap().stages(),
            zero.stages()
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, mut s)| {
                    s.name = Some(if i == 0 { "stage 1".into() } else { "fc".into() });
                    s
                })
                .collect::<Vec<_>>()
        );
        let lossy = Chain::new("c", 2, stages, Stage::simple(0.5, 0.5, 1, 1)).unwrap();
        let f = ForwardGraph::from_chain(&lossy);
        assert_eq!((f.len(), f.node_name(2), f.inputs(2)), (3, "loss", &[1][..]));
    }
}
