//! The operator graph ([`OperatorGraph`]): the operator-level joint graph,
//! every node of one forward and its backward as AOTAutograd traces them, with what the min-cut needs to know about each
//! (op class, size, role). Read from JSON (documented in `docs/joint.md`) and
//! validated once, so the partitioners may assume a well-formed graph.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What kind of operator a node is, as far as fusion and recomputation care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Element-wise arithmetic (add, mul, tanh, erf, where, casts): memory-bound
    /// and fusible with its producers and consumers.
    Pointwise,
    /// A view or a projection of a multi-output op (`view`, `permute`,
    /// `expand`, `getitem`): moves no data, fusible, never banned.
    View,
    /// A reduction (`sum`, `mean`, `var`, `amax`): fusible; banned from
    /// recompute when its output is over 4x smaller than its inputs.
    Reduction,
    /// Matmul, convolution, attention: compute-bound, not fusible, never
    /// recomputed by the min-cut.
    ComputeIntensive,
    /// A random op (`rand_like`, `native_dropout`): fusible but never
    /// recomputed, since a recompute would draw different numbers.
    Random,
    /// Anything else (layer norm kernels, `cat` producers, custom ops): not
    /// fusible and not recomputed by the min-cut.
    Other,
}

impl OpClass {
    /// Whether the op can be fused into a neighbouring kernel (PyTorch's
    /// `fusible_ops`: the recomputable ops and the random ops).
    pub fn is_fusible(self) -> bool {
        matches!(self, OpClass::Pointwise | OpClass::View | OpClass::Reduction | OpClass::Random)
    }

    /// The JSON spelling.
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Pointwise => "pointwise",
            OpClass::View => "view",
            OpClass::Reduction => "reduction",
            OpClass::ComputeIntensive => "compute_intensive",
            OpClass::Random => "random",
            OpClass::Other => "other",
        }
    }
}

/// Where a node lives in the operator graph (PyTorch's partitioner's terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// An input of the forward (an input or a parameter).
    Primal,
    /// An input of the backward: the gradient of a forward output.
    Tangent,
    /// A node the forward outputs need.
    Forward,
    /// Any other node: what the backward computes.
    Backward,
}

impl Role {
    /// The JSON spelling.
    pub fn name(self) -> &'static str {
        match self {
            Role::Primal => "primal",
            Role::Tangent => "tangent",
            Role::Forward => "forward",
            Role::Backward => "backward",
        }
    }

    /// Primals and tangents are the graph's inputs (placeholders).
    pub fn is_input(self) -> bool {
        matches!(self, Role::Primal | Role::Tangent)
    }
}

/// One validated node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// Unique name (the fx node name when exported from PyTorch).
    pub name: String,
    /// Where the node lives.
    pub role: Role,
    /// Its op class; `None` for primals and tangents.
    pub op: Option<OpClass>,
    /// The operator it runs, for people (`aten.tanh.default`); not interpreted.
    pub target: Option<String>,
    /// Indices of its inputs in [`OperatorGraph::nodes`], in argument order, with
    /// repeats (`mul(x, x)` lists `x` twice).
    pub inputs: Vec<usize>,
    /// Shape, when known.
    pub shape: Option<Vec<u64>>,
    /// Element type, when known (`float32`, `bool`, ...).
    pub dtype: Option<String>,
    /// Bytes of its output (0 for a tuple).
    pub bytes: u64,
    /// Floating-point operations of one run, when known.
    pub flops: Option<f64>,
    /// A multi-output op whose results are taken by `view` nodes: it has no
    /// tensor of its own and can never be saved.
    pub tuple: bool,
    /// Banned from recompute by the user (PyTorch's `MUST_SAVE`).
    pub banned: bool,
}

impl Node {
    /// Number of elements: the product of the shape, or bytes / element size.
    pub fn numel(&self) -> u64 {
        match (&self.shape, self.dtype.as_deref().and_then(dtype_size)) {
            (Some(shape), _) => shape.iter().product(),
            (None, Some(size)) if size > 0 => self.bytes / size,
            _ => self.bytes / 4,
        }
    }
}

/// A validated operator graph: the operator-level joint graph of one forward
/// and its backward, as AOTAutograd traces them. `nodes` keeps the file's order (which need not be
/// topological); [`OperatorGraph::order`] is a topological order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperatorGraph {
    name: String,
    nodes: Vec<Node>,
    outputs: Vec<usize>,
    gradients: Vec<usize>,
    #[serde(skip)]
    order: Vec<usize>,
    #[serde(skip)]
    users: Vec<Vec<usize>>,
}

/// Why an operator graph was rejected; every variant names the node or field at fault.
#[derive(Debug, Error, PartialEq)]
pub enum OperatorGraphError {
    /// Not JSON of the joint format (syntax, unknown or missing field, wrong type).
    #[error("invalid joint graph JSON at `{path}`: {message}")]
    Json {
        /// Where in the document (`nodes[3].role`), or `.` for the whole.
        path: String,
        /// What serde said.
        message: String,
    },
    /// No nodes at all.
    #[error("the joint graph has no nodes")]
    Empty,
    /// Two nodes share a name.
    #[error("node name `{name}` is used twice (nodes[{first}] and nodes[{second}])")]
    DuplicateName {
        /// The name.
        name: String,
        /// Index of its first use.
        first: usize,
        /// Index of the repeat.
        second: usize,
    },
    /// An input names no node.
    #[error("node `{node}` has input `{input}`, which is not a node of the graph")]
    UnknownInput {
        /// The node.
        node: String,
        /// The unknown name.
        input: String,
    },
    /// The inputs form a cycle.
    #[error("the graph has a cycle: {cycle}")]
    Cycle {
        /// The cycle, as `a -> b -> a`.
        cycle: String,
    },
    /// A primal or tangent with inputs.
    #[error("node `{node}` is a {role} (a graph input) but has inputs")]
    InputWithInputs {
        /// The node.
        node: String,
        /// Its role.
        role: &'static str,
    },
    /// A forward or backward node without `op`.
    #[error("node `{node}` ({role}) has no `op` (one of pointwise, view, reduction, compute_intensive, random, other)")]
    MissingOp {
        /// The node.
        node: String,
        /// Its role.
        role: &'static str,
    },
    /// A forward node (or primal) reads a backward node or a tangent.
    #[error(
        "backward node `{input}` ({input_role}) feeds forward node `{node}`: the forward cannot depend on the backward"
    )]
    BackwardFeedsForward {
        /// The forward node.
        node: String,
        /// The backward node or tangent it reads.
        input: String,
        /// That input's role.
        input_role: &'static str,
    },
    /// Neither `bytes` nor a shape with a known dtype.
    #[error("node `{node}` has no size: give `bytes`, or `shape` and a known `dtype`")]
    MissingSize {
        /// The node.
        node: String,
    },
    /// A dtype remat does not know the size of, with no `bytes`.
    #[error("node `{node}` has dtype `{dtype}`, whose element size remat does not know; give `bytes`")]
    UnknownDtype {
        /// The node.
        node: String,
        /// The dtype.
        dtype: String,
    },
    /// Sizes that do not fit in 64 bits.
    #[error("node `{node}`: its size overflows 64 bits")]
    SizeOverflow {
        /// The node.
        node: String,
    },
    /// `flops` negative or not finite.
    #[error("node `{node}` has flops = {value}; it must be a finite number >= 0")]
    InvalidFlops {
        /// The node.
        node: String,
        /// The value.
        value: f64,
    },
    /// A name in `outputs` or `gradients` that is no node.
    #[error("`{field}` names `{name}`, which is not a node of the graph")]
    UnknownOutput {
        /// `outputs` or `gradients`.
        field: &'static str,
        /// The name.
        name: String,
    },
    /// A forward output that is not a primal or forward node.
    #[error("forward output `{name}` is a {role} node; forward outputs must be primal or forward nodes")]
    OutputNotForward {
        /// The name.
        name: String,
        /// Its role.
        role: &'static str,
    },
    /// An empty `gradients` list.
    #[error("the joint graph lists no `gradients`: there is no backward to partition")]
    NoGradients,
    /// A backward node whose result reaches no gradient (dead code, or a
    /// missing name in `gradients`).
    #[error("backward node `{node}` has no path to the gradients (list it in `gradients` or remove it)")]
    NoPathToGradients {
        /// The node.
        node: String,
    },
    /// A tuple node used directly by a node that is not a view.
    #[error("node `{node}` is a tuple; only `view` nodes (getitem) may read it, but `{user}` does")]
    TupleUse {
        /// The tuple node.
        node: String,
        /// The non-view user.
        user: String,
    },
}

/// The JSON form of a node.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeJson {
    name: String,
    role: Role,
    #[serde(default)]
    op: Option<OpClass>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    shape: Option<Vec<u64>>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    flops: Option<f64>,
    #[serde(default)]
    tuple: bool,
    #[serde(default)]
    banned: bool,
}

/// The JSON form of a joint graph.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GraphJson {
    #[serde(default)]
    name: Option<String>,
    nodes: Vec<NodeJson>,
    #[serde(default)]
    outputs: Vec<String>,
    #[serde(default)]
    gradients: Vec<String>,
    /// Free-form provenance (exporter, torch version); kept out of the model.
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_json::Value>,
}

/// Bytes per element of the dtypes PyTorch names, `None` for others.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "float64" | "int64" | "complex64" | "uint64" => 8,
        "float32" | "int32" | "uint32" => 4,
        "float16" | "bfloat16" | "int16" | "uint16" => 2,
        "int8" | "uint8" | "bool" | "float8_e4m3fn" | "float8_e5m2" | "float8_e4m3fnuz" | "float8_e5m2fnuz" => 1,
        "complex128" => 16,
        _ => return None,
    })
}

impl OperatorGraph {
    /// Parses and validates the JSON form (see `docs/joint.md`).
    ///
    /// Guarantees on success: unique names, known inputs, no cycle, an op class
    /// on every computed node, no forward node reading a tangent or a backward
    /// node, at least one gradient, every backward node reaching a gradient,
    /// sizes whose total fits in `u64`. O(V + E) after parsing.
    pub fn from_json(text: &str) -> Result<OperatorGraph, OperatorGraphError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let parsed: GraphJson = serde_path_to_error::deserialize(de)
            .map_err(|e| OperatorGraphError::Json { path: e.path().to_string(), message: e.inner().to_string() })?;
        OperatorGraph::validate(parsed)
    }

    fn validate(parsed: GraphJson) -> Result<OperatorGraph, OperatorGraphError> {
        if parsed.nodes.is_empty() {
            return Err(OperatorGraphError::Empty);
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(parsed.nodes.len());
        for (i, n) in parsed.nodes.iter().enumerate() {
            if let Some(&first) = index.get(n.name.as_str()) {
                return Err(OperatorGraphError::DuplicateName { name: n.name.clone(), first, second: i });
            }
            index.insert(&n.name, i);
        }
        let mut nodes = Vec::with_capacity(parsed.nodes.len());
        let mut total: u64 = 0;
        for n in &parsed.nodes {
            let inputs = n
                .inputs
                .iter()
                .map(|input| {
                    index
                        .get(input.as_str())
                        .copied()
                        .ok_or_else(|| OperatorGraphError::UnknownInput { node: n.name.clone(), input: input.clone() })
                })
                .collect::<Result<Vec<usize>, OperatorGraphError>>()?;
            if n.role.is_input() && !inputs.is_empty() {
                return Err(OperatorGraphError::InputWithInputs { node: n.name.clone(), role: n.role.name() });
            }
            if !n.role.is_input() && n.op.is_none() {
                return Err(OperatorGraphError::MissingOp { node: n.name.clone(), role: n.role.name() });
            }
            if let Some(value) = n.flops
                && !(value.is_finite() && value >= 0.0)
            {
                return Err(OperatorGraphError::InvalidFlops { node: n.name.clone(), value });
            }
            let bytes = if n.tuple {
                0
            } else {
                match (n.bytes, &n.shape, n.dtype.as_deref()) {
                    (Some(b), _, _) => b,
                    (None, Some(shape), Some(dtype)) => {
                        let size = dtype_size(dtype).ok_or_else(|| OperatorGraphError::UnknownDtype {
                            node: n.name.clone(),
                            dtype: dtype.to_string(),
                        })?;
                        shape
                            .iter()
                            .try_fold(size, |acc, &d| acc.checked_mul(d))
                            .ok_or_else(|| OperatorGraphError::SizeOverflow { node: n.name.clone() })?
                    }
                    _ => return Err(OperatorGraphError::MissingSize { node: n.name.clone() }),
                }
            };
            total =
                total.checked_add(bytes).ok_or_else(|| OperatorGraphError::SizeOverflow { node: n.name.clone() })?;
            nodes.push(Node {
                name: n.name.clone(),
                role: n.role,
                op: if n.role.is_input() { None } else { n.op },
                target: n.target.clone(),
                inputs,
                shape: n.shape.clone(),
                dtype: n.dtype.clone(),
                bytes,
                flops: n.flops,
                tuple: n.tuple,
                banned: n.banned,
            });
        }
        let lookup = |field: &'static str, names: &[String]| {
            names
                .iter()
                .map(|name| {
                    index
                        .get(name.as_str())
                        .copied()
                        .ok_or_else(|| OperatorGraphError::UnknownOutput { field, name: name.clone() })
                })
                .collect::<Result<Vec<usize>, OperatorGraphError>>()
        };
        let outputs = lookup("outputs", &parsed.outputs)?;
        let gradients = lookup("gradients", &parsed.gradients)?;
        let mut users = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for &input in &n.inputs {
                if !users[input].contains(&i) {
                    users[input].push(i);
                }
            }
        }
        let order = topological_order(&nodes, &users)?;
        // Role checks after the cycle check, so a cycle is reported as one.
        for n in &nodes {
            if matches!(n.role, Role::Forward) {
                for &input in &n.inputs {
                    let role = nodes[input].role;
                    if matches!(role, Role::Backward | Role::Tangent) {
                        return Err(OperatorGraphError::BackwardFeedsForward {
                            node: n.name.clone(),
                            input: nodes[input].name.clone(),
                            input_role: role.name(),
                        });
                    }
                }
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if n.tuple {
                for &u in &users[i] {
                    if nodes[u].op != Some(OpClass::View) {
                        return Err(OperatorGraphError::TupleUse { node: n.name.clone(), user: nodes[u].name.clone() });
                    }
                }
            }
        }
        for &o in &outputs {
            if !matches!(nodes[o].role, Role::Primal | Role::Forward) {
                return Err(OperatorGraphError::OutputNotForward {
                    name: nodes[o].name.clone(),
                    role: nodes[o].role.name(),
                });
            }
        }
        if gradients.is_empty() {
            return Err(OperatorGraphError::NoGradients);
        }
        // Every backward node must reach a gradient: walk back from them.
        let mut reaches = vec![false; nodes.len()];
        let mut stack: Vec<usize> = gradients.clone();
        while let Some(i) = stack.pop() {
            if !reaches[i] {
                reaches[i] = true;
                stack.extend(nodes[i].inputs.iter().copied());
            }
        }
        if let Some(n) =
            nodes.iter().enumerate().find(|&(i, n)| n.role == Role::Backward && !reaches[i]).map(|(_, n)| n)
        {
            return Err(OperatorGraphError::NoPathToGradients { node: n.name.clone() });
        }
        Ok(OperatorGraph {
            name: parsed.name.unwrap_or_else(|| "joint".to_string()),
            nodes,
            outputs,
            gradients,
            order,
            users,
        })
    }

    /// The graph's name (`joint` when the file gives none).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The nodes, in the file's order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Indices of the forward outputs.
    pub fn outputs(&self) -> &[usize] {
        &self.outputs
    }

    /// Indices of the gradients (the backward's outputs).
    pub fn gradients(&self) -> &[usize] {
        &self.gradients
    }

    /// A topological order of all nodes (inputs first); among ready nodes the
    /// one earliest in the file comes first, so a file already in order keeps it.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Distinct users of node `i`, in the file's order.
    pub fn users(&self, i: usize) -> &[usize] {
        &self.users[i]
    }

    /// The index of the node called `name`. O(V).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
}

/// Kahn's algorithm with a min-heap on the file index: O((V + E) log V).
fn topological_order(nodes: &[Node], users: &[Vec<usize>]) -> Result<Vec<usize>, OperatorGraphError> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut pending: Vec<usize> = nodes
        .iter()
        .map(|n| {
            let mut distinct = n.inputs.clone();
            distinct.sort_unstable();
            distinct.dedup();
            distinct.len()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len()).filter(|&i| pending[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &u in &users[i] {
            pending[u] -= 1;
            if pending[u] == 0 {
                ready.push(Reverse(u));
            }
        }
    }
    if order.len() == nodes.len() {
        return Ok(order);
    }
    // Every node left has an unfinished input; following them must loop.
    let start = (0..nodes.len()).find(|&i| pending[i] > 0).expect("a node is left");
    let mut seen = vec![usize::MAX; nodes.len()];
    let mut path = Vec::new();
    let mut at = start;
    while seen[at] == usize::MAX {
        seen[at] = path.len();
        path.push(at);
        at = *nodes[at].inputs.iter().find(|&&j| pending[j] > 0).expect("a node left has a pending input");
    }
    // path[j + 1] is an input of path[j] and `at` one of the last node's, so
    // the data flows along the reversed path and back to its first node.
    let mut ring: Vec<usize> = path[seen[at]..].iter().rev().copied().collect();
    // Start at the node first in the file, so the message does not depend on
    // where the search entered the cycle.
    let first = (0..ring.len()).min_by_key(|&k| ring[k]).expect("a cycle has nodes");
    ring.rotate_left(first);
    let mut cycle: Vec<&str> = ring.iter().map(|&i| nodes[i].name.as_str()).collect();
    cycle.push(cycle[0]);
    Err(OperatorGraphError::Cycle { cycle: cycle.join(" -> ") })
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
