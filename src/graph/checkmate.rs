//! The Checkmate graph ([`CheckmateGraph`]): a joint forward+backward graph in
//! Checkmate's form, every operation a node with a cost and an output size, in
//! topological order. Its file form is the joint form (`"joint": true`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{GraphError, check_time, deserialize, parse_value, resolve_inputs, users_of};

/// One node of a Checkmate graph: an operation that produces one value.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckmateNode {
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

/// What a node of a Checkmate graph stands for: the forward or backward of
/// which forward-graph node (when derived by [`super::backward::derive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckmateRole {
    /// The forward of forward-graph node `v` (its value: everything a recorded
    /// forward keeps, `saved_size` bytes).
    Forward(usize),
    /// The gradient of the loss with respect to the last node's output.
    Loss,
    /// The backward of forward-graph node `v` (its value: the gradients of
    /// `v`'s inputs).
    Backward(usize),
    /// A node of a Checkmate graph read from a file (no forward graph behind it).
    Given,
}

/// A validated Checkmate graph (Checkmate's `G = (V, E)`): the joint
/// forward+backward graph the Checkmate MILP, its LP rounding and exhaustive
/// search solve.
///
/// Nodes are in topological order (every input of node `i` is below `i`); the
/// last node is the final result. `input_size` bytes (the network input) are
/// resident throughout and count against every budget.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckmateGraph {
    name: String,
    input_size: u64,
    nodes: Vec<CheckmateNode>,
    users: Vec<Vec<usize>>,
    roles: Vec<CheckmateRole>,
    pub(super) metadata: Option<serde_json::Value>,
}

/// The JSON shape of a Checkmate graph (the joint form).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckmateJson {
    name: String,
    #[allow(dead_code)]
    joint: bool,
    /// Bytes always resident (the network input); not part of Checkmate's form.
    #[serde(default)]
    input_size: u64,
    nodes: Vec<CheckmateNodeJson>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckmateNodeJson {
    name: String,
    cost: f64,
    size: u64,
    #[serde(default)]
    overhead: u64,
    inputs: Vec<String>,
}

impl CheckmateGraph {
    /// Builds and validates a Checkmate graph. `nodes[i].inputs` must all be below `i`.
    pub fn new(
        name: impl Into<String>,
        input_size: u64,
        nodes: Vec<CheckmateNode>,
    ) -> Result<CheckmateGraph, GraphError> {
        let roles = vec![CheckmateRole::Given; nodes.len()];
        CheckmateGraph::with_roles(name.into(), input_size, nodes, roles)
    }

    pub(crate) fn with_roles(
        name: String,
        input_size: u64,
        nodes: Vec<CheckmateNode>,
        roles: Vec<CheckmateRole>,
    ) -> Result<CheckmateGraph, GraphError> {
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
        Ok(CheckmateGraph { name, input_size, nodes, users, roles, metadata: None })
    }

    /// Parses and validates the joint form (`"joint": true`).
    pub fn from_json(text: &str) -> Result<CheckmateGraph, GraphError> {
        CheckmateGraph::from_parsed(deserialize(&parse_value(text)?)?)
    }

    pub(super) fn from_parsed(parsed: CheckmateJson) -> Result<CheckmateGraph, GraphError> {
        let inputs = resolve_inputs(parsed.nodes.iter().map(|n| (n.name.as_str(), n.inputs.as_slice())))?;
        let nodes = parsed
            .nodes
            .into_iter()
            .zip(inputs)
            .map(|(n, inputs)| CheckmateNode { name: n.name, cost: n.cost, size: n.size, overhead: n.overhead, inputs })
            .collect();
        let mut graph = CheckmateGraph::new(parsed.name, parsed.input_size, nodes)?;
        graph.metadata = parsed.metadata;
        Ok(graph)
    }

    /// The joint form, readable again by [`CheckmateGraph::from_json`].
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
    pub fn nodes(&self) -> &[CheckmateNode] {
        &self.nodes
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &CheckmateNode {
        &self.nodes[i]
    }

    /// The nodes that read node `i`'s value, in increasing order.
    pub fn users(&self, i: usize) -> &[usize] {
        &self.users[i]
    }

    /// What node `i` stands for ([`CheckmateRole::Given`] for nodes read from a joint file).
    pub fn role(&self, i: usize) -> CheckmateRole {
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
