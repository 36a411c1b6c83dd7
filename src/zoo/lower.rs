//! From a layer graph to remat's models: a block's stage figures (sizes from
//! what autograd keeps, transients from what is alive while it runs, roofline
//! times), the chain of blocks, and forward graphs at block or layer
//! granularity.

use std::ops::Range;

use crate::chain::{Chain, Stage, StageOption};

use super::device::{Device, Dtype};
use super::net::{Net, Node, Src};

/// The figures of one stage (a block, or one node) in bytes and milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// w_a: bytes of the output.
    pub output: u64,
    /// w_abar: the output plus everything else autograd keeps inside the block.
    pub saved: u64,
    /// o_f: bytes alive while the forward runs beyond its input, what it keeps
    /// and its output.
    pub forward_overhead: u64,
    /// o_b: bytes alive while the backward runs beyond the output's gradient,
    /// what the forward kept and the input's gradient.
    pub backward_overhead: u64,
    /// Roofline forward time, ms.
    pub forward_ms: f64,
    /// Roofline backward time, ms.
    pub backward_ms: f64,
}

impl Figures {
    /// The chain stage with these figures (times rounded to 4 significant digits).
    pub fn stage(&self, name: &str) -> Stage {
        Stage {
            name: Some(name.to_string()),
            forward_overhead: self.forward_overhead,
            backward_overhead: self.backward_overhead,
            ..Stage::simple(round_time(self.forward_ms), round_time(self.backward_ms), self.output, self.saved)
        }
    }
}

/// `x` rounded to 4 significant digits: roofline times are estimates, and short
/// numbers keep the committed files small and readable.
pub fn round_time(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let digits = 3 - x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn times(nodes: &[Node], device: Device, dtype: Dtype) -> (f64, f64) {
    let sum = |ks: &[super::device::Kernel]| ks.iter().map(|k| device.time_ms(k, dtype)).sum::<f64>();
    nodes.iter().fold((0.0, 0.0), |(f, b), n| (f + sum(&n.forward), b + sum(&n.backward)))
}

/// The figures of nodes `range` of `net` run as one stage.
///
/// Sizes: the output, plus every tensor produced inside the range that autograd
/// keeps (an input some node saves, an output a node saves), plus the nodes'
/// extra saved tensors. Tensors from outside the range (the stage's input) are
/// not counted: the model holds them as a^{l-1}.
///
/// Forward transient: the larger of the recording forward's (tensors not kept
/// but still needed later, node temporaries) and the no-grad forward's (every
/// tensor until its last use), each above what the model already counts.
/// Backward transient: in reverse order, the gradients of inner tensors alive at
/// once plus node temporaries, less what autograd has already freed.
///
/// O(n^2) in the number of nodes of the range.
pub fn figures(net: &Net, range: Range<usize>, device: Device, dtype: Dtype) -> Figures {
    let nodes = &net.nodes[range.clone()];
    let n = nodes.len();
    let last = n - 1;
    let local = |src: Src| match src {
        Src::Node(j) if range.contains(&j) => Some(j - range.start),
        _ => None,
    };
    let size: Vec<u64> = nodes.iter().map(Node::size).collect();
    let mut last_use: Vec<Option<usize>> = vec![None; n];
    let mut saved = vec![false; n];
    // The earliest node whose backward needs tensor j: after it runs, j is freed.
    let mut release: Vec<Option<usize>> = vec![None; n];
    for (k, node) in nodes.iter().enumerate() {
        if node.saves_output {
            saved[k] = true;
            release[k] = Some(release[k].map_or(k, |r| r.min(k)));
        }
        for (&src, &keeps) in node.inputs.iter().zip(&node.saves_input) {
            if let Some(j) = local(src) {
                last_use[j] = Some(last_use[j].map_or(k, |u| u.max(k)));
                if keeps {
                    saved[j] = true;
                    release[j] = Some(release[j].map_or(k, |r| r.min(k)));
                }
            }
        }
    }
    saved[last] = true;
    let extras: u64 = nodes.iter().map(|x| x.extra_saved).sum();
    let saved_total: u64 = (0..n).filter(|&j| saved[j]).map(|j| size[j]).sum::<u64>() + extras;

    let (mut peak_all, mut peak_nograd) = (0u64, 0u64);
    for (k, node) in nodes.iter().enumerate() {
        let (mut all, mut nograd) = (0, 0);
        for j in 0..k {
            let needed = last_use[j].is_some_and(|u| u >= k);
            if saved[j] || needed {
                all += size[j];
            }
            if needed {
                nograd += size[j];
            }
            all += nodes[j].extra_saved;
        }
        let running = size[k] + node.fwd_temp + node.extra_saved;
        peak_all = peak_all.max(all + running);
        peak_nograd = peak_nograd.max(nograd + running);
    }
    let forward_overhead = peak_all.saturating_sub(saved_total).max(peak_nograd.saturating_sub(size[last]));

    let mut grad = vec![false; n];
    let (mut freed, mut peak_bwd) = (0i128, 0i128);
    for k in (0..n).rev() {
        for &src in &nodes[k].inputs {
            if let Some(j) = local(src) {
                grad[j] = true;
            }
        }
        // delta^l (the last node's gradient) is counted by the model.
        let grads: u64 = (0..last).filter(|&j| grad[j]).map(|j| size[j]).sum();
        peak_bwd = peak_bwd.max(grads as i128 + nodes[k].bwd_temp as i128 - freed);
        grad[k] = false;
        freed += nodes[k].extra_saved as i128;
        freed += (0..last).filter(|&j| release[j] == Some(k)).map(|j| size[j] as i128).sum::<i128>();
    }
    let (forward_ms, backward_ms) = times(nodes, device, dtype);
    Figures {
        output: size[last],
        saved: saved_total,
        forward_overhead,
        backward_overhead: peak_bwd.max(0) as u64,
        forward_ms,
        backward_ms,
    }
}

/// The selective-saving policies `remat zoo --options` gives each block, as
/// what each keeps: a node whose output (and its own extra saved tensors) the
/// policy stores, everything else recomputed inside the block's backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Save the outputs of matrix products and convolutions (torchtitan's
    /// selective policy); recompute normalisations, activations, dropout and
    /// the attention core.
    Matmuls,
    /// Save everything but the attention core (scores, softmax, its dropout,
    /// the product with the values): Korthikanti et al.'s selective
    /// recomputation.
    NoAttention,
    /// Save nothing inside the block: its backward reruns its whole forward.
    Input,
}

impl Policy {
    /// Every policy, in the order options are listed.
    pub const ALL: [Policy; 3] = [Policy::Matmuls, Policy::NoAttention, Policy::Input];

    /// The option's name in chain files.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Matmuls => "matmuls",
            Policy::NoAttention => "no-attention",
            Policy::Input => "input",
        }
    }

    fn keeps(self, node: &Node) -> bool {
        let attention_core = matches!(node.op, "attention_scores" | "softmax" | "attention_context")
            || (node.op == "dropout" && node.name.ends_with("attn_dropout"));
        match self {
            Policy::Matmuls => node.macs > 0 && !matches!(node.op, "attention_scores" | "attention_context"),
            Policy::NoAttention => !attention_core,
            Policy::Input => false,
        }
    }
}

/// Recording nodes `range` of `net` under `policy`, given the block's
/// [`figures`] `full`: the option stores the output, the outputs of the nodes
/// the policy keeps and their extra saved tensors; its backward first reruns
/// the forward of every other node (their roofline time, `recompute_time`),
/// and what that rerun rebuilds is alive through the backward as the
/// recorded tensors were, on top of the backward's own transient. `None` when
/// it would not keep fewer bytes than `full`. O(n) in the range's nodes.
pub fn option_figures(
    net: &Net,
    range: Range<usize>,
    device: Device,
    dtype: Dtype,
    full: &Figures,
    policy: Policy,
) -> Option<StageOption> {
    let nodes = &net.nodes[range.clone()];
    let last = nodes.len() - 1;
    let mut saved = nodes[last].size();
    let mut recompute = 0.0;
    for (k, node) in nodes.iter().enumerate() {
        if policy.keeps(node) {
            saved += node.extra_saved + if k == last { 0 } else { node.size() };
        } else {
            recompute += times(std::slice::from_ref(node), device, dtype).0;
        }
    }
    (saved < full.saved).then(|| StageOption {
        name: Some(policy.name().to_string()),
        saved_size: saved,
        recompute_time: round_time(recompute),
        forward_overhead: full.forward_overhead,
        backward_overhead: full.backward_overhead + (full.saved - saved),
        backward_frees: 0,
    })
}

/// The options of a block with figures `full`: each [`Policy`] that keeps
/// fewer bytes than the whole record and is not dominated by an earlier one
/// (as many bytes or more, as much recomputation or more).
fn block_options(net: &Net, range: Range<usize>, device: Device, dtype: Dtype, full: &Figures) -> Vec<StageOption> {
    let mut out: Vec<StageOption> = Vec::new();
    for policy in Policy::ALL {
        if let Some(o) = option_figures(net, range.clone(), device, dtype, full, policy)
            && !out.iter().any(|p| p.saved_size <= o.saved_size && p.recompute_time <= o.recompute_time)
        {
            out.push(o);
        }
    }
    out
}

/// The tensors from outside `range` that its nodes read, in first-use order.
pub fn external_inputs(net: &Net, range: Range<usize>) -> Vec<Src> {
    let mut out = Vec::new();
    for node in &net.nodes[range.clone()] {
        for &src in &node.inputs {
            let inside = matches!(src, Src::Node(j) if range.contains(&j));
            if !inside && !out.contains(&src) {
                out.push(src);
            }
        }
    }
    out
}

/// The chain of `net`'s blocks (the loss block as the chain's loss).
///
/// Fails, naming the block, when a block reads anything but the output of the
/// block just before it (or the input, for the first): such a network is a
/// graph, not a chain.
pub fn chain(net: &Net, name: &str, device: Device, dtype: Dtype) -> Result<Chain, String> {
    chain_with(net, name, device, dtype, false)
}

/// [`chain`], and with `options` each block also gets the recording options
/// of the [`Policy`]s that save less than the whole record (the loss none).
pub fn chain_with(net: &Net, name: &str, device: Device, dtype: Dtype, options: bool) -> Result<Chain, String> {
    let mut stages = Vec::with_capacity(net.blocks.len());
    for (i, block) in net.blocks.iter().enumerate() {
        let expected = if i == 0 { Src::Input } else { Src::Node(net.blocks[i - 1].output()) };
        if let Some(&other) = external_inputs(net, block.nodes.clone()).iter().find(|&&s| s != expected) {
            let what = match other {
                Src::Input => "the network input".to_string(),
                Src::Node(j) => format!("`{}`", net.nodes[j].name),
            };
            return Err(format!(
                "{} is not a chain: block `{}` reads {what}, which is not the output of the block just before it; \
                 ask for its forward graph instead (--graph blocks or --graph layers)",
                net.name, block.name
            ));
        }
        let full = figures(net, block.nodes.clone(), device, dtype);
        let mut stage = full.stage(&block.name);
        if options {
            stage.options = block_options(net, block.nodes.clone(), device, dtype, &full);
        }
        stages.push(stage);
    }
    let loss = match &net.loss {
        Some(block) => figures(net, block.nodes.clone(), device, dtype).stage("loss"),
        None => Stage::zero_loss(),
    };
    Chain::new(name, net.input_size(), stages, loss).map_err(|e| e.to_string())
}

/// One node of a forward graph (issue 6's format): a stage's fields plus the
/// names of the nodes it reads (none: the network input).
#[derive(Clone, Debug, PartialEq)]
pub struct GraphNode {
    /// Unique name.
    pub name: String,
    /// Names of earlier nodes it reads; empty means the network input.
    pub inputs: Vec<String>,
    /// Its figures.
    pub figures: Figures,
}

/// A lowered forward graph: nodes in topological order, the last one the
/// result. [`LoweredGraph::validate`] turns it into the library's
/// [`crate::graph::ForwardGraph`], which is what the zoo hands out.
#[derive(Clone, Debug, PartialEq)]
pub struct LoweredGraph {
    /// The graph's name.
    pub name: String,
    /// Bytes of the network input.
    pub input_size: u64,
    /// The nodes in topological order.
    pub nodes: Vec<GraphNode>,
    /// Free-form provenance.
    pub metadata: Option<serde_json::Value>,
}

impl LoweredGraph {
    /// The library's validated forward graph of these nodes (times rounded as
    /// in the chain files, see [`Figures::stage`]).
    pub fn validate(self) -> Result<crate::graph::ForwardGraph, crate::graph::GraphError> {
        let index: std::collections::HashMap<&str, usize> =
            self.nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        let inputs = self.nodes.iter().map(|n| n.inputs.iter().map(|name| index[name.as_str()]).collect()).collect();
        let stages = self.nodes.iter().map(|n| n.figures.stage(&n.name)).collect();
        let mut graph = crate::graph::ForwardGraph::new(self.name, self.input_size, stages, inputs)?;
        if let Some(m) = self.metadata {
            graph.set_metadata(m);
        }
        Ok(graph)
    }
}

fn input_names(srcs: &[Src], name_of: impl Fn(usize) -> String) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for &src in srcs {
        if let Src::Node(j) = src {
            let name = name_of(j);
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The forward graph with one node per layer-graph node (the loss included).
///
/// A node that reads the network input together with other nodes lists only
/// the other nodes: the input is resident throughout.
pub fn layer_graph(net: &Net, name: &str, device: Device, dtype: Dtype) -> LoweredGraph {
    let nodes = net
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| GraphNode {
            name: node.name.clone(),
            inputs: input_names(&node.inputs, |j| net.nodes[j].name.clone()),
            figures: Figures {
                output: node.size(),
                saved: node.size() + node.extra_saved,
                forward_overhead: node.fwd_temp,
                backward_overhead: node.bwd_temp,
                ..figures_times(net, i, device, dtype)
            },
        })
        .collect();
    LoweredGraph { name: name.to_string(), input_size: net.input_size(), nodes, metadata: None }
}

fn figures_times(net: &Net, i: usize, device: Device, dtype: Dtype) -> Figures {
    let (forward_ms, backward_ms) = times(&net.nodes[i..=i], device, dtype);
    Figures { output: 0, saved: 0, forward_overhead: 0, backward_overhead: 0, forward_ms, backward_ms }
}

/// The forward graph with one node per block (and one for the loss), each with
/// the same figures as the chain's stage. For a network that is a chain, this
/// graph is a path and its nodes are the chain's stages.
pub fn block_graph(net: &Net, name: &str, device: Device, dtype: Dtype) -> LoweredGraph {
    let owner = |j: usize| {
        net.blocks.iter().chain(&net.loss).find(|b| b.nodes.contains(&j)).map(|b| b.name.clone()).expect("covered")
    };
    let nodes = net
        .blocks
        .iter()
        .chain(&net.loss)
        .map(|block| GraphNode {
            name: block.name.clone(),
            inputs: input_names(&external_inputs(net, block.nodes.clone()), owner),
            figures: figures(net, block.nodes.clone(), device, dtype),
        })
        .collect();
    LoweredGraph { name: name.to_string(), input_size: net.input_size(), nodes, metadata: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoo::net::{Builder, Conv};

    #[test]
    fn rounds_to_four_significant_digits() {
        assert_eq!(round_time(0.0123456), 0.01235);
        assert_eq!(round_time(123456.0), 123500.0);
        assert_eq!(round_time(0.0), 0.0);
    }

    /// conv -> bn+relu -> conv (pre-activation style tail with a residual add):
    /// every figure by hand.
    #[test]
    fn block_figures_by_hand() {
        let mut b = Builder::new("t", Dtype::Fp32, vec![1, 2, 4, 4], 4);
        b.block("blk");
        let c1 = b.conv("c1", Src::Input, Conv::new(2, 3).pad(1));
        let r1 = b.bn_relu("n1", c1);
        b.conv_ext("c2", r1, Conv::new(2, 3).pad(1), Some(Src::Input), false);
        let net = b.finish().unwrap();
        let t = 2 * 4 * 4 * 4; // one 2x4x4 fp32 tensor
        let f = figures(&net, 0..3, Device::A100, Dtype::Fp32);
        assert_eq!(f.output, t);
        // c1 (kept by the BatchNorm), r1 (by the ReLU and c2), the output, and
        // the BatchNorm's 2x2 fp32 statistics. The input is not counted.
        assert_eq!(f.saved, 3 * t + 16);
        // Recording forward: nothing unsaved is ever alive. No-grad forward:
        // while n1 runs, c1, r1 and the statistics are alive, t + 16 above the
        // output the model counts.
        assert_eq!(f.forward_overhead, t + 16);
        // Backward: c2's creates r1's gradient (t); n1's then holds r1's
        // gradient, the ReLU's gradient temporary and c1's new gradient (3t),
        // and nothing kept has been freed yet.
        assert_eq!(f.backward_overhead, 3 * t);
        assert!(f.forward_ms > 0.0 && f.backward_ms > f.forward_ms);
    }

    #[test]
    fn a_skip_over_a_block_is_not_a_chain() {
        let mut b = Builder::new("t", Dtype::Fp32, vec![1, 2, 4, 4], 4);
        b.block("a");
        let x = b.conv("c", Src::Input, Conv::new(2, 1));
        b.block("b");
        let y = b.bn_relu("n", x);
        b.block("c");
        b.add("skip", y, x);
        let net = b.finish().unwrap();
        let e = chain(&net, "t", Device::A100, Dtype::Fp32).unwrap_err();
        assert!(e.contains("block `c` reads `a.c`") && e.contains("--graph"), "{e}");
        let g = block_graph(&net, "t", Device::A100, Dtype::Fp32);
        assert_eq!(g.nodes[2].inputs, vec!["b".to_string(), "a".to_string()]);
        assert!(g.nodes[0].inputs.is_empty());
    }
}
