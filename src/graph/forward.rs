//! The forward graph ([`ForwardGraph`]): the network's layers with the stage
//! fields of a chain and the names of their inputs; remat derives the
//! backward itself ([`super::backward::derive`]).

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;

use super::{GraphError, check_time, deserialize, parse_value, resolve_inputs, users_of};
use crate::chain::{Chain, Stage};

/// The JSON shape of a forward graph.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ForwardJson {
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

    pub(super) fn from_parsed(parsed: ForwardJson) -> Result<ForwardGraph, GraphError> {
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
                recording_overhead: None,
                backward_overhead: n.backward_overhead,
                backward_frees: 0,
                options: Vec::new(),
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
