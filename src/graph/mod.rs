//! General graphs (Checkmate): forward graphs, joint forward+backward graphs,
//! their JSON forms, chain detection, the graph simulator and the solvers.
//!
//! Two file forms (see the README's "Graphs" section):
//! - a *forward graph* ([`ForwardGraph`]): the network's layers with the stage
//!   fields of a chain and the names of their inputs. remat derives the
//!   backward nodes itself ([`joint::derive`]); a forward graph that is a path
//!   is solved as a [`Chain`] by the chain solvers.
//! - a *joint graph* ([`Graph`]): Checkmate's own form, every forward and
//!   backward operation a node with a cost and an output size, in topological
//!   order, the last node the final result.
//!
//! Both are validated on construction: names are unique, every input names an
//! earlier node, times are finite and non-negative and the sizes add up to
//! less than `u64::MAX`, so the solvers and the simulator never overflow.

pub mod approx;
pub mod baselines;
pub mod exhaustive;
pub mod joint;
pub mod milp;
pub mod plan;
pub mod schedule;
pub mod simulate;
mod solve;

pub use schedule::{GraphOp, GraphSchedule, Status};
pub use simulate::{GraphReplay, GraphSimulateError, simulate, simulate_within};
pub use solve::{GraphOptions, GraphSolution, GraphSolveError, MinBudget, Outcome, min_budget, solve, solve_joint};

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::chain::{Chain, Stage};

/// One node of a joint graph: an operation that produces one value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// Unique name (forward nodes keep the forward graph's names).
    pub name: String,
    /// C_i: time of one evaluation (ms by convention).
    pub cost: f64,
    /// M_i: bytes of the value it produces, held until freed.
    pub size: u64,
    /// Transient bytes while it runs (freed when it ends); 0 in Checkmate.
    #[serde(skip_serializing_if = "is_zero")]
    pub overhead: u64,
    /// Indices of the nodes whose values it reads, all smaller than its own.
    #[serde(skip)]
    pub inputs: Vec<usize>,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// What a node of a derived joint graph stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The forward of forward-graph node `v` (its value: everything a recorded
    /// forward keeps, `saved_size` bytes).
    Forward(usize),
    /// The gradient of the loss with respect to the last node's output.
    Loss,
    /// The backward of forward-graph node `v` (its value: the gradients of
    /// `v`'s inputs).
    Backward(usize),
    /// A node of a joint graph read from a file (no forward graph behind it).
    Given,
}

/// A validated joint graph (Checkmate's `G = (V, E)`).
///
/// Nodes are in topological order (every input of node `i` is below `i`); the
/// last node is the final result. `input_size` bytes (the network input) are
/// resident throughout and count against every budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    name: String,
    input_size: u64,
    nodes: Vec<Node>,
    users: Vec<Vec<usize>>,
    roles: Vec<Role>,
    metadata: Option<serde_json::Value>,
}

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

/// The JSON shape of a joint graph.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JointJson {
    name: String,
    #[allow(dead_code)]
    joint: bool,
    /// Bytes always resident (the network input); not part of Checkmate's form.
    #[serde(default)]
    input_size: u64,
    nodes: Vec<JointNodeJson>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JointNodeJson {
    name: String,
    cost: f64,
    size: u64,
    #[serde(default)]
    overhead: u64,
    inputs: Vec<String>,
}

/// The JSON shape of a forward graph.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForwardJson {
    name: String,
    /// Tolerated when `false`, so a file can say which form it is.
    #[serde(default)]
    #[allow(dead_code)]
    joint: bool,
    input_size: u64,
    nodes: Vec<ForwardNodeJson>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForwardNodeJson {
    name: String,
    inputs: Vec<String>,
    forward_time: f64,
    backward_time: f64,
    output_size: u64,
    saved_size: u64,
    #[serde(default)]
    gradient_size: Option<u64>,
    #[serde(default)]
    forward_overhead: u64,
    #[serde(default)]
    backward_overhead: u64,
}

fn parse_value(text: &str) -> Result<serde_json::Value, GraphError> {
    serde_json::from_str(text).map_err(|e| GraphError::Format { path: "graph".into(), message: e.to_string() })
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
pub fn looks_like_graph(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.get("nodes").is_some())
}

/// A graph file of either form.
#[derive(Clone, Debug)]
pub enum GraphFile {
    /// A forward graph (remat derives the backward).
    Forward(ForwardGraph),
    /// A joint forward+backward graph in Checkmate's form.
    Joint(Graph),
}

impl GraphFile {
    /// Parses either form: `"joint": true` selects the joint form, anything
    /// else is read as a forward graph.
    pub fn from_json(text: &str) -> Result<GraphFile, GraphError> {
        let value = parse_value(text)?;
        if value.get("joint").and_then(serde_json::Value::as_bool) == Some(true) {
            Ok(GraphFile::Joint(Graph::from_parsed(deserialize(&value)?)?))
        } else {
            Ok(GraphFile::Forward(ForwardGraph::from_parsed(deserialize(&value)?)?))
        }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        match self {
            GraphFile::Forward(f) => f.name(),
            GraphFile::Joint(g) => g.name(),
        }
    }

    /// Validation warnings (e.g. a raised `saved_size`).
    pub fn warnings(&self) -> &[String] {
        match self {
            GraphFile::Forward(f) => f.warnings(),
            GraphFile::Joint(_) => &[],
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

impl Graph {
    /// Builds and validates a joint graph. `nodes[i].inputs` must all be below `i`.
    pub fn new(name: impl Into<String>, input_size: u64, nodes: Vec<Node>) -> Result<Graph, GraphError> {
        let roles = vec![Role::Given; nodes.len()];
        Graph::with_roles(name.into(), input_size, nodes, roles)
    }

    pub(crate) fn with_roles(
        name: String,
        input_size: u64,
        nodes: Vec<Node>,
        roles: Vec<Role>,
    ) -> Result<Graph, GraphError> {
        if nodes.is_empty() {
            return Err(GraphError::Empty);
        }
        let mut seen: HashMap<&str, usize> = HashMap::new();
        // Every figure the simulator or a solver adds up is at most this total.
        let mut total = input_size;
        for (i, node) in nodes.iter().enumerate() {
            if node.name.is_empty() {
                return Err(GraphError::EmptyName { index: i });
            }
            if let Some(&first) = seen.get(node.name.as_str()) {
                return Err(GraphError::DuplicateName { name: node.name.clone(), first, second: i });
            }
            seen.insert(&node.name, i);
            check_time(&node.name, i, "cost", node.cost)?;
            for (k, &u) in node.inputs.iter().enumerate() {
                if u >= i {
                    let input = nodes.get(u).map_or_else(|| format!("#{u}"), |n| n.name.clone());
                    return Err(GraphError::UnknownInput { node: node.name.clone(), index: i, input, later: true });
                }
                if node.inputs[..k].contains(&u) {
                    return Err(GraphError::RepeatedInput {
                        node: node.name.clone(),
                        index: i,
                        input: nodes[u].name.clone(),
                    });
                }
            }
            for size in [node.size, node.overhead] {
                total = total.checked_add(size).ok_or_else(|| GraphError::Overflow { node: node.name.clone() })?;
            }
        }
        let inputs: Vec<Vec<usize>> = nodes.iter().map(|n| n.inputs.clone()).collect();
        let users = users_of(&inputs);
        Ok(Graph { name, input_size, nodes, users, roles, metadata: None })
    }

    /// Parses and validates the joint form (`"joint": true`).
    pub fn from_json(text: &str) -> Result<Graph, GraphError> {
        Graph::from_parsed(deserialize(&parse_value(text)?)?)
    }

    fn from_parsed(parsed: JointJson) -> Result<Graph, GraphError> {
        let inputs = resolve_inputs(parsed.nodes.iter().map(|n| (n.name.as_str(), n.inputs.as_slice())))?;
        let nodes = parsed
            .nodes
            .into_iter()
            .zip(inputs)
            .map(|(n, inputs)| Node { name: n.name, cost: n.cost, size: n.size, overhead: n.overhead, inputs })
            .collect();
        let mut graph = Graph::new(parsed.name, parsed.input_size, nodes)?;
        graph.metadata = parsed.metadata;
        Ok(graph)
    }

    /// The joint form, readable again by [`Graph::from_json`].
    pub fn to_json(&self) -> String {
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| {
                let mut v = serde_json::to_value(n).expect("a node serializes");
                let inputs: Vec<&str> = n.inputs.iter().map(|&u| self.nodes[u].name.as_str()).collect();
                v["inputs"] = serde_json::json!(inputs);
                v
            })
            .collect();
        let mut out = serde_json::json!({"name": self.name, "joint": true});
        if self.input_size > 0 {
            out["input_size"] = self.input_size.into();
        }
        out["nodes"] = nodes.into();
        if let Some(m) = &self.metadata {
            out["metadata"] = m.clone();
        }
        serde_json::to_string_pretty(&out).expect("a graph serializes")
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes resident throughout (the network input).
    pub fn input_size(&self) -> u64 {
        self.input_size
    }

    /// Number of nodes n.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: validation rejects empty graphs.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// The nodes that read node `i`'s value, in increasing order.
    pub fn users(&self, i: usize) -> &[usize] {
        &self.users[i]
    }

    /// What node `i` stands for ([`Role::Given`] for nodes read from a joint file).
    pub fn role(&self, i: usize) -> Role {
        self.roles[i]
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Sum of every node's cost: the makespan when nothing is recomputed.
    pub fn total_cost(&self) -> f64 {
        self.nodes.iter().map(|n| n.cost).sum()
    }

    /// The smallest budget that can work at all: the input, plus the largest
    /// node with its own inputs and transient. Every schedule reaches it when
    /// computing that node, so no schedule fits below it. O(n + |E|).
    pub fn working_set_bound(&self) -> u64 {
        let widest = (0..self.len())
            .map(|i| {
                let n = &self.nodes[i];
                n.size + n.overhead + n.inputs.iter().map(|&u| self.nodes[u].size).sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        self.input_size + widest
    }

    /// Free-form metadata of the file, if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.metadata.as_ref()
    }
}

/// A validated forward graph: the network's layers with their stage fields
/// (as in a chain) and the names of their inputs.
///
/// Stored as a [`Chain`] of its nodes in file order (with a zero loss) plus the
/// input lists: when the graph is a path, that chain *is* its chain form.
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardGraph {
    chain: Chain,
    inputs: Vec<Vec<usize>>,
    users: Vec<Vec<usize>>,
    warnings: Vec<String>,
}

/// Why a forward graph is not a chain (a path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotAPath(String);

impl fmt::Display for NotAPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ForwardGraph {
    /// Parses and validates the forward form.
    ///
    /// Errors name the node and field (`nodes[2].output_size (node 3): ...`,
    /// `nodes[4] (`up1`): input `down9` is not the name of any node`).
    pub fn from_json(text: &str) -> Result<ForwardGraph, GraphError> {
        ForwardGraph::from_parsed(deserialize(&parse_value(text)?)?)
    }

    fn from_parsed(parsed: ForwardJson) -> Result<ForwardGraph, GraphError> {
        if parsed.nodes.is_empty() {
            return Err(GraphError::Empty);
        }
        let inputs = resolve_inputs(parsed.nodes.iter().map(|n| (n.name.as_str(), n.inputs.as_slice())))?;
        let mut warnings = Vec::new();
        let mut stages = Vec::with_capacity(parsed.nodes.len());
        for (i, n) in parsed.nodes.into_iter().enumerate() {
            check_time(&n.name, i, "forward_time", n.forward_time)?;
            check_time(&n.name, i, "backward_time", n.backward_time)?;
            let mut saved_size = n.saved_size;
            if saved_size < n.output_size {
                warnings.push(format!(
                    "nodes[{i}] (`{}`): saved_size {} is below output_size {}; using output_size \
                     (what a recorded forward keeps includes its output)",
                    n.name, n.saved_size, n.output_size
                ));
                saved_size = n.output_size;
            }
            stages.push(Stage {
                name: Some(n.name),
                forward_time: n.forward_time,
                backward_time: n.backward_time,
                output_size: n.output_size,
                saved_size,
                gradient_size: n.gradient_size.unwrap_or(n.output_size),
                forward_overhead: n.forward_overhead,
                backward_overhead: n.backward_overhead,
            });
        }
        let mut graph = ForwardGraph::new(parsed.name, parsed.input_size, stages, inputs)?;
        graph.warnings = warnings;
        if let Some(m) = parsed.metadata {
            graph.chain.set_metadata(m);
        }
        Ok(graph)
    }

    /// Builds a forward graph from named stages (every `name` set and unique)
    /// and, for each, the indices of its inputs (all earlier; empty = the
    /// network input).
    pub fn new(
        name: impl Into<String>,
        input_size: u64,
        stages: Vec<Stage>,
        inputs: Vec<Vec<usize>>,
    ) -> Result<ForwardGraph, GraphError> {
        assert_eq!(stages.len(), inputs.len(), "one input list per stage");
        if stages.is_empty() {
            return Err(GraphError::Empty);
        }
        let label = |i: usize| stages[i].name.clone().unwrap_or_default();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, s) in stages.iter().enumerate() {
            let name = label(i);
            if name.is_empty() {
                return Err(GraphError::EmptyName { index: i });
            }
            if let Some(&first) = seen.get(&name) {
                return Err(GraphError::DuplicateName { name, first, second: i });
            }
            seen.insert(name.clone(), i);
            check_time(&name, i, "forward_time", s.forward_time)?;
            check_time(&name, i, "backward_time", s.backward_time)?;
            for &u in &inputs[i] {
                if u >= i {
                    return Err(GraphError::UnknownInput { node: name, index: i, input: label(u), later: true });
                }
            }
        }
        let users = users_of(&inputs);
        let last = stages.len() - 1;
        if let Some(i) = (0..last).find(|&i| users[i].is_empty()) {
            return Err(GraphError::Unused { node: label(i), index: i });
        }
        let chain = Chain::new(name, input_size, stages, Stage::zero_loss()).map_err(|e| match e {
            crate::chain::ChainError::Overflow { stage } => GraphError::Overflow { node: stage },
            // Each time is finite, but (nodes + 2) x their sum is not.
            e @ crate::chain::ChainError::TimeOverflow { .. } => {
                GraphError::Format { path: "nodes".into(), message: e.to_string().replace("stage ", "node ") }
            }
            other => unreachable!("names, times and emptiness are checked above: {other}"),
        })?;
        Ok(ForwardGraph { chain, inputs, users, warnings: Vec::new() })
    }

    /// A chain as a forward graph: stage l becomes node l-1 reading node l-2
    /// (stage 1 reads the input). A loss with any non-zero field becomes a last
    /// node of its own; a zero loss is left out (it changes nothing). Unnamed
    /// or repeated stage names get a `stage l` name (the loss `loss`), numbered
    /// `loss (2)`... when that too is taken.
    pub fn from_chain(chain: &Chain) -> ForwardGraph {
        let loss = chain.loss();
        let keep_loss = *loss != Stage { name: loss.name.clone(), ..Stage::zero_loss() };
        let count = chain.len() + usize::from(keep_loss);
        let mut seen = std::collections::HashSet::new();
        let stages: Vec<Stage> = (1..=count)
            .map(|l| {
                let mut s = chain.stage(l).clone();
                let fallback = if l == chain.len() + 1 { "loss".to_string() } else { format!("stage {l}") };
                let mut name = s.name.take().filter(|n| !n.is_empty() && !seen.contains(n)).unwrap_or(fallback);
                // The fallback may itself be taken (a stage named `loss`):
                // number it until it is free, so names stay unique.
                let base = name.clone();
                let mut k = 2;
                while seen.contains(&name) {
                    name = format!("{base} ({k})");
                    k += 1;
                }
                seen.insert(name.clone());
                s.name = Some(name);
                s
            })
            .collect();
        let inputs = (0..count).map(|i| if i == 0 { vec![] } else { vec![i - 1] }).collect();
        let mut graph = ForwardGraph::new(chain.name(), chain.input_size(), stages, inputs)
            .expect("a valid chain is a valid forward graph");
        if let Some(m) = chain.metadata() {
            graph.chain.set_metadata(m.clone());
        }
        graph
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        self.chain.name()
    }

    /// Number of forward nodes.
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Always false: validation rejects empty graphs.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Bytes of the network input.
    pub fn input_size(&self) -> u64 {
        self.chain.input_size()
    }

    /// Node `v`'s stage fields (0-based `v`; its `name` is always set).
    pub fn stage(&self, v: usize) -> &Stage {
        &self.chain.stages()[v]
    }

    /// Node `v`'s name.
    pub fn node_name(&self, v: usize) -> &str {
        self.stage(v).name.as_deref().expect("forward nodes are named")
    }

    /// Node `v`'s inputs (empty: the network input).
    pub fn inputs(&self, v: usize) -> &[usize] {
        &self.inputs[v]
    }

    /// The nodes reading node `v`'s output.
    pub fn users(&self, v: usize) -> &[usize] {
        &self.users[v]
    }

    /// Validation warnings (e.g. a raised `saved_size`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Free-form metadata of the file, if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.chain.metadata()
    }

    /// Replaces the free-form metadata.
    pub fn set_metadata(&mut self, metadata: serde_json::Value) {
        self.chain.set_metadata(metadata);
    }

    /// The chain form, when the graph is a path: node `v`'s only input is node
    /// `v-1` (node 0 reads the network input) and its only user is `v+1`.
    /// Node `v` becomes stage `v+1`, with a zero loss. O(n).
    ///
    /// Otherwise says why not, naming the first node that branches or joins.
    pub fn as_chain(&self) -> Result<&Chain, NotAPath> {
        for v in 0..self.len() {
            let expected: &[usize] = if v == 0 { &[] } else { &[v - 1] };
            if self.inputs[v] != expected {
                let names: Vec<String> = self.inputs[v].iter().map(|&u| format!("`{}`", self.node_name(u))).collect();
                let what = match self.inputs[v].len() {
                    0 => "reads the network input".to_string(),
                    1 => format!("reads {}", names[0]),
                    k => format!("has {k} inputs ({})", names.join(", ")),
                };
                let prev =
                    if v == 0 { "the network input".to_string() } else { format!("`{}`", self.node_name(v - 1)) };
                return Err(NotAPath(format!(
                    "node `{}` {what}, not just the node before it ({prev})",
                    self.node_name(v)
                )));
            }
        }
        Ok(&self.chain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOINT: &str = r#"{"name": "j", "joint": true, "input_size": 5, "nodes": [
        {"name": "x", "cost": 1.5, "size": 2, "inputs": []},
        {"name": "y", "cost": 2, "size": 3, "overhead": 4, "inputs": ["x"]},
        {"name": "z", "cost": 0, "size": 1, "inputs": ["x", "y"]}
    ], "metadata": {"from": "test"}}"#;

    #[test]
    fn joint_graphs_round_trip() {
        let GraphFile::Joint(g) = GraphFile::from_json(JOINT).unwrap() else { panic!("a joint graph") };
        assert_eq!((g.len(), g.input_size(), g.total_cost()), (3, 5, 3.5));
        assert_eq!(g.node(2).inputs, [0, 1]);
        assert_eq!(g.users(0), [1, 2]);
        assert_eq!(g.working_set_bound(), 5 + 3 + 4 + 2, "y with its input x and its transient");
        assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
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
