//! What recomputing a node costs: its time on a roofline of its op class.
//!
//! A recompute of node i takes `max(flops_i / P, moved_i / B)` seconds, with
//! P the peak FLOP rate and B the memory bandwidth of a reference GPU
//! ([`Roofline::default`]: 100 TFLOP/s, 1.5 TB/s, an A100-class part).
//! Following the paper's assumption 2, a fusible op (pointwise, view,
//! reduction, random) is fused into the backward kernel that consumes it, so it
//! moves no bytes of its own (`moved_i = 0`) and costs only its arithmetic;
//! any other op (compute-intensive, other) runs as a kernel of its own and
//! reads its inputs and writes its output (`moved_i = inputs + output bytes`).
//! `flops_i` is the node's `flops` field when the file gives it, otherwise
//! one per output element (pointwise, random, other), one per input element
//! (reduction), none (view), or two per input element (compute-intensive: a
//! crude floor; exporters should give the real count).

use super::graph::{OpClass, OperatorGraph};

/// A reference machine for recompute costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Roofline {
    /// Peak arithmetic rate, FLOP/s.
    pub flops_per_second: f64,
    /// Memory bandwidth, bytes/s.
    pub bytes_per_second: f64,
}

impl Default for Roofline {
    fn default() -> Roofline {
        Roofline { flops_per_second: 100e12, bytes_per_second: 1.5e12 }
    }
}

impl Roofline {
    /// Seconds to recompute node `i` (see the module doc). O(inputs).
    pub fn seconds(&self, graph: &OperatorGraph, i: usize) -> f64 {
        let nodes = graph.nodes();
        let node = &nodes[i];
        let input_numel: u64 = node.inputs.iter().map(|&j| nodes[j].numel()).sum();
        let flops = node.flops.unwrap_or_else(|| match node.op {
            Some(OpClass::View) | None => 0.0,
            Some(OpClass::Reduction) => input_numel as f64,
            Some(OpClass::ComputeIntensive) => 2.0 * input_numel as f64,
            Some(OpClass::Pointwise | OpClass::Random | OpClass::Other) => node.numel() as f64,
        });
        let moved = match node.op {
            Some(op) if op.is_fusible() => 0.0,
            None => 0.0,
            Some(_) => (node.bytes + node.inputs.iter().map(|&j| nodes[j].bytes).sum::<u64>()) as f64,
        };
        (flops / self.flops_per_second).max(moved / self.bytes_per_second)
    }
}
