//! The backward of a forward graph: [`derive()`] adds the gradient nodes and
//! gives the network's Checkmate graph (joint forward+backward, [`CheckmateGraph`]).
//!
//! For forward nodes `0..n` (the last one the network's output) the Checkmate graph
//! has `2n + 1` nodes, in this topological order:
//!
//! | index | node | inputs | cost | size | overhead |
//! |---|---|---|---|---|---|
//! | `v` | forward `v` (named as in the file) | the forward nodes `v` reads | `forward_time` | `saved_size` | `forward_overhead` |
//! | `n` | `loss-grad`, dLoss/d(output) | the last forward node | 0 | last node's `gradient_size` | 0 |
//! | `2n - v` | `grad:v`, the backward of `v` | `v`'s inputs, `v`, and the gradient nodes of `v`'s users (`loss-grad` for the last node) | `backward_time` | sum of the `gradient_size` of `v`'s inputs (`input_size` for the network input) | `backward_overhead` |
//!
//! The network input is resident throughout (`input_size` of the Checkmate graph),
//! as in the chain model, where a^0 stays until B^1.
//!
//! How this relates to the chain model ([the model](crate::model)): a forward node's value is
//! what a *recorded* forward keeps (abar, `saved_size` bytes), so the joint
//! model has no counterpart of F_ck/F_none's smaller plain outputs; and a
//! gradient node holds the gradients of all of `v`'s inputs until the last of
//! them is consumed. Both only over-count memory, so a joint schedule that fits
//! its budget fits in reality. When `saved_size = output_size` everywhere and
//! the graph is a path, the derived graph is exactly the chain (with a zero
//! loss): every chain schedule is a joint schedule with the same makespan and
//! the same peak (see the tests), so the joint optimum is at most the chain
//! optimum; it can be lower, because the joint model may free a node's input
//! right after the node's forward and recompute it for the backward, a move the
//! chain's operation table does not have.

use crate::graph::{CheckmateGraph, CheckmateNode, CheckmateRole, ForwardGraph, GraphError};

/// Name of the node computing dLoss/d(output).
pub const LOSS_GRAD: &str = "loss-grad";

/// Name of the gradient (backward) node of forward node `name`.
pub fn grad_name(name: &str) -> String {
    format!("grad:{name}")
}

/// Index in the Checkmate graph of the backward node of forward node `v`
/// (`n` forward nodes).
pub fn backward_index(n: usize, v: usize) -> usize {
    2 * n - v
}

/// Derives the Checkmate graph of `forward` (table above). O(n + |E|).
///
/// Fails only when a derived name collides with a forward node's name (a
/// forward node called `loss-grad` or `grad:x`) or the sizes overflow.
pub fn derive(forward: &ForwardGraph) -> Result<CheckmateGraph, GraphError> {
    let n = forward.len();
    let mut nodes = Vec::with_capacity(2 * n + 1);
    let mut roles = Vec::with_capacity(2 * n + 1);
    for v in 0..n {
        let s = forward.stage(v);
        nodes.push(CheckmateNode {
            name: forward.node_name(v).to_string(),
            cost: s.forward_time,
            size: s.saved_size,
            overhead: s.forward_overhead,
            inputs: forward.inputs(v).to_vec(),
        });
        roles.push(CheckmateRole::Forward(v));
    }
    let last = n - 1;
    nodes.push(CheckmateNode {
        name: LOSS_GRAD.to_string(),
        cost: 0.0,
        size: forward.stage(last).gradient_size,
        overhead: 0,
        inputs: vec![last],
    });
    roles.push(CheckmateRole::Loss);
    for v in (0..n).rev() {
        let s = forward.stage(v);
        let ins = forward.inputs(v);
        let size = if ins.is_empty() {
            forward.input_size()
        } else {
            ins.iter()
                .try_fold(0u64, |acc, &u| acc.checked_add(forward.stage(u).gradient_size))
                .ok_or_else(|| GraphError::Overflow { node: grad_name(forward.node_name(v)) })?
        };
        let mut inputs = ins.to_vec();
        inputs.push(v);
        if v == last {
            inputs.push(n);
        }
        inputs.extend(forward.users(v).iter().map(|&w| backward_index(n, w)));
        inputs.sort_unstable();
        nodes.push(CheckmateNode {
            name: grad_name(forward.node_name(v)),
            cost: s.backward_time,
            size,
            overhead: s.backward_overhead,
            inputs,
        });
        roles.push(CheckmateRole::Backward(v));
    }
    let mut graph = CheckmateGraph::with_roles(forward.name().to_string(), forward.input_size(), nodes, roles)?;
    graph.metadata = forward.metadata().cloned();
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diamond() -> ForwardGraph {
        // a -> b, a -> c, (b, c) -> d
        ForwardGraph::from_json(
            r#"{"name": "diamond", "input_size": 3, "nodes": [
              {"name": "a", "inputs": [], "forward_time": 1, "backward_time": 2, "output_size": 10, "saved_size": 11},
              {"name": "b", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 20, "saved_size": 20, "gradient_size": 5},
              {"name": "c", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 30, "saved_size": 30},
              {"name": "d", "inputs": ["b", "c"], "forward_time": 1, "backward_time": 2, "output_size": 4, "saved_size": 4, "backward_overhead": 7}
            ]}"#,
        )
        .unwrap()
    }

    #[test]
    fn derives_gradient_nodes_with_their_dependencies() {
        let g = derive(&diamond()).unwrap();
        let names: Vec<&str> = g.nodes().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "loss-grad", "grad:d", "grad:c", "grad:b", "grad:a"]);
        let inputs = |name: &str| -> Vec<&str> {
            let i = g.index_of(name).unwrap();
            g.node(i).inputs.iter().map(|&u| g.node(u).name.as_str()).collect()
        };
        assert_eq!(inputs("loss-grad"), ["d"]);
        assert_eq!(inputs("grad:d"), ["b", "c", "d", "loss-grad"]);
        assert_eq!(inputs("grad:b"), ["a", "b", "grad:d"]);
        assert_eq!(inputs("grad:a"), ["a", "grad:c", "grad:b"]);
        let d = g.node(g.index_of("grad:d").unwrap());
        // gradients of d's inputs: b's (5) and c's (30, its output size)
        assert_eq!((d.size, d.overhead, d.cost), (35, 7, 2.0));
        assert_eq!(g.node(g.index_of("grad:a").unwrap()).size, 3, "the input's gradient");
        assert_eq!(g.node(0).size, 11, "a forward keeps its saved data");
        assert_eq!(g.input_size(), 3);
        assert_eq!(g.role(5), CheckmateRole::Backward(3));
        assert_eq!(backward_index(4, 3), 5);
    }

    #[test]
    fn derived_names_must_not_collide() {
        let f = ForwardGraph::from_json(
            r#"{"name": "x", "input_size": 1, "nodes": [
              {"name": "grad:b", "inputs": [], "forward_time": 1, "backward_time": 1, "output_size": 1, "saved_size": 1},
              {"name": "b", "inputs": ["grad:b"], "forward_time": 1, "backward_time": 1, "output_size": 1, "saved_size": 1}
            ]}"#,
        )
        .unwrap();
        let e = derive(&f).unwrap_err().to_string();
        assert!(e.contains("`grad:b` is already the name of nodes[0]"), "{e}");
    }
}
