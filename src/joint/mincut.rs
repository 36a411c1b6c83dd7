//! The fusion-aware min-cut partitioner (Yu and He, "Transcending
//! runtime-memory tradeoffs in checkpointing by being fusion aware",
//! Algorithms 1 and 2 and the heuristics of section 3.4), and the figures
//! every partition is judged by.
//!
//! Terms (the paper's): V_f, the nodes computable from the forward's inputs
//! alone (no tangent among their ancestors); the backward-required nodes,
//! those that depend on a tangent or are gradients; a *partition* is the set
//! of V_f nodes the forward saves for the backward. The backward recomputes
//! whatever V_f nodes it needs and was not given.

use serde::Serialize;

use super::graph::{OpClass, OperatorGraph, Role};
use super::maxflow::{FlowNetwork, INFINITE};

/// Facts about each node the partitioners share, computed once. O(V + E).
#[derive(Clone, Debug)]
pub struct Analysis {
    /// In V_f: computable without any tangent.
    pub forward_computable: Vec<bool>,
    /// Backward-required: depends on a tangent, or is a gradient.
    pub backward_required: Vec<bool>,
    /// A primal or forward node (PyTorch's `required_fw_nodes`).
    pub required_forward: Vec<bool>,
    /// A forward output.
    pub is_output: Vec<bool>,
    /// Distance (in edges) to the nearest node outside the forward (the
    /// graph's output does not count, as in PyTorch); 10^9 when none is
    /// reachable.
    pub distance_to_backward: Vec<u64>,
    /// Whether the forward must write the node to memory whatever is saved
    /// (Algorithm 2's `is_materialized`).
    pub materialized: Vec<bool>,
}

impl Analysis {
    /// Computes the analysis of a validated graph.
    pub fn new(graph: &OperatorGraph) -> Analysis {
        let nodes = graph.nodes();
        let n = nodes.len();
        let mut tangent_dependent = vec![false; n];
        for &i in graph.order() {
            tangent_dependent[i] =
                nodes[i].role == Role::Tangent || nodes[i].inputs.iter().any(|&j| tangent_dependent[j]);
        }
        let mut is_output = vec![false; n];
        for &o in graph.outputs() {
            is_output[o] = true;
        }
        let mut backward_required = tangent_dependent.clone();
        for &g in graph.gradients() {
            backward_required[g] = true;
        }
        let required_forward: Vec<bool> =
            nodes.iter().map(|n| matches!(n.role, Role::Primal | Role::Forward)).collect();
        let mut distance_to_backward = vec![1_000_000_000u64; n];
        for &i in graph.order().iter().rev() {
            if !required_forward[i] {
                distance_to_backward[i] = 0;
                continue;
            }
            let mut d = 1_000_000_000;
            for &u in graph.users(i) {
                d = d.min(distance_to_backward[u] + 1);
            }
            distance_to_backward[i] = d;
        }
        let materialized = (0..n)
            .map(|i| {
                nodes[i].role == Role::Primal
                    || is_output[i]
                    || graph.gradients().contains(&i)
                    || graph.users(i).iter().any(|&u| !fusible(graph, i, u))
            })
            .collect();
        Analysis {
            forward_computable: tangent_dependent.iter().map(|t| !t).collect(),
            backward_required,
            required_forward,
            is_output,
            distance_to_backward,
            materialized,
        }
    }
}

/// Whether `a` fuses into its user `b`: both ops fusible (graph inputs are not
/// ops and fuse with nothing).
pub fn fusible(graph: &OperatorGraph, a: usize, b: usize) -> bool {
    let nodes = graph.nodes();
    nodes[a].op.is_some_and(OpClass::is_fusible) && nodes[b].op.is_some_and(OpClass::is_fusible)
}

/// Why the min-cut bans a node from recompute (section 3.1 and 3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BanReason {
    /// A forward input: nothing computes it.
    Primal,
    /// Flagged `banned` in the file.
    User,
    /// Compute-bound (matmul, convolution, attention).
    ComputeIntensive,
    /// Random: a recompute would draw other numbers.
    Random,
    /// Neither fusible nor known cheap (`other`).
    NotRecomputable,
    /// Not fusible with a user outside the forward, so the backward would
    /// have to materialize it anyway (Lemma 3.1).
    MaterializedInBackward,
    /// Output over 4x smaller than its inputs (a reduction's).
    Reduction,
    /// A fusible user of a value that another user reads only after an
    /// unfusible op (PyTorch's `ban_recompute_used_far_apart`).
    UsedFarApart,
    /// Over 100 forward nodes down a chain of fusible ops (PyTorch's
    /// `ban_recompute_long_fusible_chains`).
    LongFusibleChain,
}

/// The min-cut's ban on node `i`, if any. Only nodes the forward needs are
/// banned (others are never computed in the forward anyway); views never are.
pub fn ban_reason(graph: &OperatorGraph, analysis: &Analysis, i: usize) -> Option<BanReason> {
    let node = &graph.nodes()[i];
    if node.role == Role::Primal {
        return Some(BanReason::Primal);
    }
    if !analysis.required_forward[i] || node.op == Some(OpClass::View) {
        return None;
    }
    if node.banned {
        return Some(BanReason::User);
    }
    match node.op {
        Some(OpClass::ComputeIntensive) => return Some(BanReason::ComputeIntensive),
        Some(OpClass::Random) => return Some(BanReason::Random),
        Some(OpClass::Other) => return Some(BanReason::NotRecomputable),
        _ => {}
    }
    if materialized_in_backward(graph, analysis, i) {
        return Some(BanReason::MaterializedInBackward);
    }
    let input_bytes: u128 = node.inputs.iter().map(|&j| graph.nodes()[j].bytes as u128).sum();
    if (node.bytes as u128) * 4 < input_bytes {
        return Some(BanReason::Reduction);
    }
    None
}

/// Whether some user outside the forward reads `i` (through views) without
/// fusing with it; the graph's output counts as such a user of the forward
/// outputs. O(users reached).
fn materialized_in_backward(graph: &OperatorGraph, analysis: &Analysis, i: usize) -> bool {
    if analysis.is_output[i] {
        return true;
    }
    let mut stack = vec![i];
    let mut seen = vec![i];
    while let Some(cur) = stack.pop() {
        for &u in graph.users(cur) {
            if !analysis.required_forward[u] && !fusible(graph, cur, u) {
                return true;
            }
            if graph.nodes()[u].op == Some(OpClass::View) && !seen.contains(&u) {
                if analysis.is_output[u] {
                    return true;
                }
                seen.push(u);
                stack.push(u);
            }
        }
    }
    false
}

/// A node's weight in the cut: its bytes scaled by 1.1^d, d its distance to
/// the backward clamped to [1, 100] (section 3.4: among equal sizes prefer
/// saving nodes close to the backward), times 2 when the forward would not
/// write it otherwise (Algorithm 2). Truncated to an integer as PyTorch does.
pub fn cut_weight(graph: &OperatorGraph, analysis: &Analysis, i: usize) -> u128 {
    let node = &graph.nodes()[i];
    if node.tuple {
        return INFINITE;
    }
    let d = analysis.distance_to_backward[i].clamp(1, 100) as i32;
    let scaled = (node.bytes as f64 * 1.1f64.powi(d)) as u128;
    if analysis.materialized[i] { scaled } else { 2 * scaled }
}

/// A set of saved nodes and everything the figures of a partition follow from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Partition {
    /// Names of the saved nodes, in the file's order.
    pub saved: Vec<String>,
    /// Their bytes.
    pub saved_bytes: u64,
    /// The bytes of the saved nodes that are not primals: what a byte budget
    /// counts (a primal is alive anyway).
    pub activation_bytes: u64,
    /// Names of the forward nodes the backward recomputes, in topological order.
    pub recomputed: Vec<String>,
    /// Bytes moved between forward and backward (the paper's cost, Lemma
    /// 3.5, without re-weighting): each saved node read once by the backward,
    /// and written once more by the forward unless it is materialized anyway.
    pub traffic_bytes: u64,
    /// The recompute cost in seconds on the reference roofline (see
    /// [`super::cost`]).
    pub recompute_seconds: f64,
}

/// The backward's view of a saved set: the forward nodes it must recompute
/// (in topological order), or the first node it needs but can get neither way
/// (a primal not saved). O(V + E).
pub fn recompute_set(graph: &OperatorGraph, analysis: &Analysis, saved: &[bool]) -> Result<Vec<usize>, usize> {
    let nodes = graph.nodes();
    let mut needed = vec![false; nodes.len()];
    let mut recomputed = vec![false; nodes.len()];
    // The nodes computed in the backward whatever is saved, and the V_f
    // gradients (saved, or recomputed like any V_f node the backward reads).
    let mut stack: Vec<usize> = (0..nodes.len()).filter(|&i| !analysis.forward_computable[i]).collect();
    let mut wanted: Vec<usize> =
        (0..nodes.len()).filter(|&i| analysis.backward_required[i] && analysis.forward_computable[i]).collect();
    for &i in &stack {
        needed[i] = true;
    }
    loop {
        for j in wanted.drain(..) {
            if needed[j] || saved[j] {
                continue;
            }
            if nodes[j].role == Role::Primal {
                return Err(j);
            }
            needed[j] = true;
            recomputed[j] = true;
            stack.push(j);
        }
        let Some(i) = stack.pop() else { break };
        wanted.extend(nodes[i].inputs.iter().copied().filter(|&j| analysis.forward_computable[j]));
    }
    // Backward nodes computable from the forward values run in the backward
    // whatever is saved: only forward nodes count as recomputed.
    Ok(graph.order().iter().copied().filter(|&i| recomputed[i] && analysis.required_forward[i]).collect())
}

/// The figures of saving `saved` (a flag per node). Panics if the backward
/// cannot be computed from it: callers pass sets built to be valid.
pub fn evaluate(graph: &OperatorGraph, analysis: &Analysis, saved: &[bool]) -> Partition {
    let nodes = graph.nodes();
    let recomputed = recompute_set(graph, analysis, saved)
        .unwrap_or_else(|j| panic!("invalid partition: the backward needs `{}`", nodes[j].name));
    let saved_idx: Vec<usize> = (0..nodes.len()).filter(|&i| saved[i]).collect();
    let saved_bytes = saved_idx.iter().map(|&i| nodes[i].bytes).sum();
    let activation_bytes = saved_idx.iter().filter(|&&i| nodes[i].role != Role::Primal).map(|&i| nodes[i].bytes).sum();
    let traffic_bytes =
        saved_idx.iter().map(|&i| if analysis.materialized[i] { nodes[i].bytes } else { 2 * nodes[i].bytes }).sum();
    let roofline = super::cost::Roofline::default();
    // f64's empty sum is -0.0; adding 0.0 makes it the 0 people expect in JSON.
    let recompute_seconds = recomputed.iter().map(|&i| roofline.seconds(graph, i)).sum::<f64>() + 0.0;
    Partition {
        saved: saved_idx.iter().map(|&i| nodes[i].name.clone()).collect(),
        saved_bytes,
        activation_bytes,
        recomputed: recomputed.iter().map(|&i| nodes[i].name.clone()).collect(),
        traffic_bytes,
        recompute_seconds,
    }
}

/// How a cut treats one node: may it be recomputed, and what saving it costs.
pub(crate) struct CutRule {
    /// The node can only reach the backward by being saved (or not be needed).
    pub banned: bool,
    /// Capacity of its in -> out edge ([`INFINITE`]: never saved).
    pub weight: u128,
    /// Capacity of a source -> in edge, paid when the node is recomputed (its
    /// in-vertex on the sink's side); 0 for none. The budget's Lagrangian
    /// uses it; the paper's cut does not.
    pub recompute: u128,
}

/// Builds the auxiliary graph of Algorithm 1 under `rule` and returns the
/// minimum cut's saved set, or `None` if every cut is infinite. Vertices:
/// 0 = source, 1 = sink, 2 + 2i = i_in, 3 + 2i = i_out. O(flow on 2V + 2 vertices).
pub(crate) fn cut(graph: &OperatorGraph, analysis: &Analysis, rule: impl Fn(usize) -> CutRule) -> Option<Vec<bool>> {
    cut_with_value(graph, analysis, rule).map(|(_, saved)| saved)
}

/// [`cut`], with the cut's capacity.
pub(crate) fn cut_with_value(
    graph: &OperatorGraph,
    analysis: &Analysis,
    rule: impl Fn(usize) -> CutRule,
) -> Option<(u128, Vec<bool>)> {
    let nodes = graph.nodes();
    let n = nodes.len();
    let (source, sink) = (0, 1);
    let vin = |i: usize| 2 + 2 * i;
    let vout = |i: usize| 3 + 2 * i;
    let mut net = FlowNetwork::new(2 + 2 * n);
    for &i in graph.order() {
        if !analysis.forward_computable[i] {
            // Computed in the backward whatever is saved.
            net.add_edge(vin(i), sink, INFINITE);
            continue;
        }
        if analysis.backward_required[i] {
            // A gradient computable from the primals alone: the backward needs
            // it as is, saved or recomputed.
            net.add_edge(vout(i), sink, INFINITE);
        }
        let r = rule(i);
        if r.banned {
            net.add_edge(source, vin(i), INFINITE);
        } else if r.recompute > 0 {
            net.add_edge(source, vin(i), r.recompute);
        }
        net.add_edge(vin(i), vout(i), r.weight);
        for &u in graph.users(i) {
            net.add_edge(vout(i), vin(u), INFINITE);
        }
    }
    let cut = net.min_cut(source, sink);
    let value = cut.value?;
    Some((value, (0..n).map(|i| !cut.sink_side[vin(i)] && cut.sink_side[vout(i)]).collect()))
}

/// Every node's ban under the min-cut: [`ban_reason`], then PyTorch's two
/// further heuristics (beyond the paper, on by default in PyTorch), in
/// PyTorch's order:
///
/// - used far apart: for each forward node, its forward users in forward
///   order are walked through fusible edges up to the last of them; a fusible
///   user after the first unfusible op met is banned (recomputing both near
///   and far users is unlikely to fuse);
/// - long fusible chains: walking fusible edges from each forward node (each
///   node visited once over all walks), the node at which the walk has gone
///   over 100 forward nodes past its start with nothing else pending is banned.
///
/// Views are never banned. O((V + E) log V).
pub fn bans(graph: &OperatorGraph, analysis: &Analysis) -> Vec<Option<BanReason>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let nodes = graph.nodes();
    let n = nodes.len();
    let mut bans: Vec<Option<BanReason>> = (0..n).map(|i| ban_reason(graph, analysis, i)).collect();
    let can_ban = |i: usize| nodes[i].op != Some(OpClass::View);
    // Forward order: position among the forward nodes in topological order.
    let mut fw_order = vec![usize::MAX; n];
    let mut count = 0;
    for &i in graph.order() {
        if analysis.required_forward[i] {
            fw_order[i] = count;
            count += 1;
        }
    }
    let forward_nodes: Vec<usize> = graph.order().iter().copied().filter(|&i| analysis.required_forward[i]).collect();
    // Used far apart.
    for &used in &forward_nodes {
        let fw_users: Vec<usize> =
            graph.users(used).iter().copied().filter(|&u| analysis.required_forward[u]).collect();
        let Some(max_range) = fw_users.iter().map(|&u| fw_order[u]).max() else { continue };
        let mut heap: BinaryHeap<Reverse<(usize, usize, bool)>> =
            fw_users.iter().map(|&u| Reverse((fw_order[u], u, true))).collect();
        let mut first_unfusible = max_range;
        while let Some(Reverse((order, node, node_fusible))) = heap.pop() {
            if !node_fusible {
                first_unfusible = order;
                break;
            }
            for &u in graph.users(node) {
                if analysis.required_forward[u] && fw_order[u] <= max_range {
                    let entry = Reverse((fw_order[u], u, fusible(graph, node, u)));
                    if !heap.iter().any(|e| *e == entry) {
                        heap.push(entry);
                    }
                }
            }
        }
        for &u in graph.users(used) {
            if analysis.required_forward[u]
                && fw_order[u] > first_unfusible
                && fusible(graph, used, u)
                && bans[u].is_none()
                && can_ban(u)
            {
                bans[u] = Some(BanReason::UsedFarApart);
            }
        }
    }
    // Long fusible chains.
    let mut visited = vec![false; n];
    for &start in &forward_nodes {
        let start_order = fw_order[start];
        let mut heap: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::from([Reverse((start_order, start))]);
        while let Some(Reverse((_, cur))) = heap.pop() {
            if visited[cur] {
                continue;
            }
            visited[cur] = true;
            if fw_order[cur] > start_order + 100 && heap.is_empty() {
                if bans[cur].is_none() && can_ban(cur) {
                    bans[cur] = Some(BanReason::LongFusibleChain);
                }
                break;
            }
            for &u in graph.users(cur) {
                if analysis.required_forward[u] && fusible(graph, cur, u) && bans[u].is_none() {
                    heap.push(Reverse((fw_order[u], u)));
                }
            }
        }
    }
    bans
}

/// The min-cut partition: the saved set of least memory traffic under the
/// paper's cost model and the bans of [`bans`], the heuristics' re-weighting
/// included. Ties go to the cut saving latest in the forward (see
/// [`FlowNetwork::min_cut`]). O((V + E) log V) to build, then one max-flow.
pub fn min_cut(graph: &OperatorGraph, analysis: &Analysis) -> Vec<bool> {
    let bans = bans(graph, analysis);
    cut(graph, analysis, |i| CutRule {
        banned: bans[i].is_some(),
        weight: cut_weight(graph, analysis, i),
        recompute: 0,
    })
    .expect("saving every banned node and every node the backward reads is a finite cut (Lemma 3.2)")
}

/// "Save everything" (plain autograd): every V_f node that a backward-required
/// node reads. Never recomputes anything.
pub fn save_all(graph: &OperatorGraph, analysis: &Analysis) -> Vec<bool> {
    let nodes = graph.nodes();
    let mut saved = vec![false; nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        if analysis.forward_computable[i] {
            // A V_f gradient is saved as is; other V_f nodes when read below.
            saved[i] |= analysis.backward_required[i] && !node.tuple;
            continue;
        }
        for &j in &node.inputs {
            if analysis.forward_computable[j] {
                saved[j] = true;
            }
        }
    }
    saved
}

/// "Recompute everything" (plain checkpointing of the whole function): the
/// backward recomputes every V_f node it needs from the primals, except random
/// ops and user-banned nodes, which are saved (a recompute would change their
/// value or the user forbade it).
pub fn recompute_all(graph: &OperatorGraph, analysis: &Analysis) -> Vec<bool> {
    let nodes = graph.nodes();
    let fixed = |i: usize| nodes[i].role == Role::Primal || nodes[i].banned || nodes[i].op == Some(OpClass::Random);
    // A tuple cannot be saved: its getitems are, when the tuple must not be recomputed.
    let keep = |i: usize| {
        if nodes[i].tuple {
            return false;
        }
        fixed(i) || (nodes[i].op == Some(OpClass::View) && nodes[i].inputs.iter().any(|&j| nodes[j].tuple && fixed(j)))
    };
    let mut saved = vec![false; nodes.len()];
    let mut seen = vec![false; nodes.len()];
    let mut stack: Vec<usize> = (0..nodes.len()).filter(|&i| analysis.backward_required[i]).collect();
    while let Some(i) = stack.pop() {
        if analysis.forward_computable[i] && keep(i) {
            saved[i] = true;
            continue;
        }
        for &j in &nodes[i].inputs {
            if analysis.forward_computable[j] && !seen[j] {
                seen[j] = true;
                stack.push(j);
            }
        }
    }
    saved
}
