//! The layer graph every zoo network is built as, and the builder the family
//! modules use.
//!
//! A [`Net`] is a list of nodes in topological order. A node is one PyTorch
//! operation, or a short run of operations that PyTorch performs in place on one
//! buffer (BatchNorm then `ReLU(inplace=True)`, a convolution then `out +=
//! residual`), so that every node output is its own tensor and no two nodes
//! alias. For each node the builder records what autograd keeps for its
//! backward (which inputs, whether its output, and extra tensors such as
//! BatchNorm statistics, max-pool indices or dropout masks), the temporaries
//! it holds while it runs, its parameters, and its kernels' FLOPs and bytes for
//! the roofline. Nodes are grouped into blocks, the modules an `nn.Sequential`
//! wrapper would list; the last node of a block is its output.

use std::ops::Range;

use super::device::{Dtype, Kernel, Unit};

/// Where a node's input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Src {
    /// The network's input.
    Input,
    /// The output of node `i`.
    Node(usize),
}

/// One operation (or in-place run of operations) of a network.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Module-style name, e.g. `layer1.0.conv1`.
    pub name: String,
    /// What it computes, e.g. `conv`, `bn+relu`, `softmax`.
    pub op: &'static str,
    /// Its inputs.
    pub inputs: Vec<Src>,
    /// For each input, whether autograd keeps it for the backward.
    pub saves_input: Vec<bool>,
    /// Whether autograd keeps the output (ReLU keeps its result, softmax too).
    pub saves_output: bool,
    /// Bytes of other tensors kept for the backward (statistics, indices,
    /// masks, contiguous copies of inputs).
    pub extra_saved: u64,
    /// Shape of the output (batch first).
    pub shape: Vec<usize>,
    /// Bytes of one output element.
    pub elem_bytes: u64,
    /// Bytes of temporaries alive while the forward runs, beyond inputs, output
    /// and `extra_saved`.
    pub fwd_temp: u64,
    /// Bytes of temporaries alive while the backward runs, beyond the output's
    /// gradient and the inputs' gradients.
    pub bwd_temp: u64,
    /// Trainable parameters.
    pub params: u64,
    /// Multiply-accumulates of its convolutions and matrix products.
    pub macs: u64,
    /// Forward kernels.
    pub forward: Vec<Kernel>,
    /// Backward kernels.
    pub backward: Vec<Kernel>,
}

impl Node {
    /// Bytes of the output.
    pub fn size(&self) -> u64 {
        elements(&self.shape) * self.elem_bytes
    }
}

/// A named run of consecutive nodes; the last one is the block's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The module name, e.g. `layer3.4`.
    pub name: String,
    /// The nodes it holds.
    pub nodes: Range<usize>,
}

impl Block {
    /// The node whose output is the block's output.
    pub fn output(&self) -> usize {
        self.nodes.end - 1
    }
}

/// A network as a layer graph grouped into blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Net {
    /// The network's name, e.g. `resnet50`.
    pub name: String,
    /// The input's shape.
    pub input_shape: Vec<usize>,
    /// Bytes of one input element (8 for token ids).
    pub input_elem_bytes: u64,
    /// Every node, in topological order.
    pub nodes: Vec<Node>,
    /// The blocks, covering the nodes before the loss in order.
    pub blocks: Vec<Block>,
    /// The loss block (the last nodes), if the network has one.
    pub loss: Option<Block>,
    /// The activations' type.
    pub dtype: Dtype,
}

impl Net {
    /// Bytes of the input.
    pub fn input_size(&self) -> u64 {
        elements(&self.input_shape) * self.input_elem_bytes
    }

    /// Bytes of the tensor `src`.
    pub fn size(&self, src: Src) -> u64 {
        match src {
            Src::Input => self.input_size(),
            Src::Node(i) => self.nodes[i].size(),
        }
    }

    /// Trainable parameters of the whole network.
    pub fn params(&self) -> u64 {
        self.nodes.iter().map(|n| n.params).sum()
    }

    /// Multiply-accumulates of the convolutions and matrix products of one
    /// forward (the figure model zoos publish as "FLOPs" or "MACs").
    pub fn macs(&self) -> u64 {
        self.nodes.iter().map(|n| n.macs).sum()
    }

    /// The block named `name`.
    pub fn block(&self, name: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.name == name)
    }

    /// Blocks `range` (0-based) of the network as a network of their own: the
    /// output of the block before the range becomes the input, and there is no
    /// loss. Fails, naming the node, when a block of the range reads a tensor
    /// from further back than the block just before it.
    pub fn slice(&self, range: Range<usize>) -> Result<Net, String> {
        let first = &self.blocks[range.start];
        let offset = first.nodes.start;
        let end = self.blocks[range.end - 1].nodes.end;
        let (input_shape, input_elem_bytes, before) = if range.start == 0 {
            (self.input_shape.clone(), self.input_elem_bytes, None)
        } else {
            let prev = &self.nodes[self.blocks[range.start - 1].output()];
            (prev.shape.clone(), prev.elem_bytes, Some(self.blocks[range.start - 1].output()))
        };
        let mut nodes = Vec::with_capacity(end - offset);
        for node in &self.nodes[offset..end] {
            let mut node = node.clone();
            for src in &mut node.inputs {
                *src = match *src {
                    Src::Node(j) if j >= offset => Src::Node(j - offset),
                    Src::Node(j) if Some(j) == before => Src::Input,
                    Src::Input if range.start == 0 => Src::Input,
                    other => {
                        let from = match other {
                            Src::Node(j) => format!("`{}`", self.nodes[j].name),
                            Src::Input => "the network input".to_string(),
                        };
                        return Err(format!(
                            "node `{}` reads {from}, which is outside blocks {}-{} and not the output of the block \
                             just before them",
                            node.name,
                            range.start + 1,
                            range.end
                        ));
                    }
                }
            }
            nodes.push(node);
        }
        let blocks = self.blocks[range.clone()]
            .iter()
            .map(|b| Block { name: b.name.clone(), nodes: b.nodes.start - offset..b.nodes.end - offset })
            .collect();
        Ok(Net { name: self.name.clone(), input_shape, input_elem_bytes, nodes, blocks, loss: None, dtype: self.dtype })
    }
}

/// Number of elements of a shape.
pub fn elements(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// Bytes of the mean and inverse-std BatchNorm/LayerNorm keep: fp32 whatever
/// the activations' type.
const STAT_BYTES: u64 = 4;
/// Bytes of a dropout mask element (bool).
const MASK_BYTES: u64 = 1;
/// Bytes of a max-pool index (int64).
const INDEX_BYTES: u64 = 8;

/// A 2-D convolution's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv {
    /// Output channels.
    pub out: usize,
    /// Kernel (height, width).
    pub kernel: (usize, usize),
    /// Stride (height, width).
    pub stride: (usize, usize),
    /// Zero padding (height, width).
    pub pad: (usize, usize),
    /// Whether it adds a bias.
    pub bias: bool,
}

impl Conv {
    /// A `k` x `k` convolution to `out` channels, stride 1, no padding, no bias.
    pub fn new(out: usize, k: usize) -> Conv {
        Conv { out, kernel: (k, k), stride: (1, 1), pad: (0, 0), bias: false }
    }

    /// A `kh` x `kw` convolution to `out` channels.
    pub fn rect(out: usize, kh: usize, kw: usize) -> Conv {
        Conv { kernel: (kh, kw), ..Conv::new(out, 1) }
    }

    /// With this stride on both axes.
    pub fn stride(self, s: usize) -> Conv {
        Conv { stride: (s, s), ..self }
    }

    /// With this padding on both axes.
    pub fn pad(self, p: usize) -> Conv {
        Conv { pad: (p, p), ..self }
    }

    /// With this (height, width) padding.
    pub fn pad2(self, ph: usize, pw: usize) -> Conv {
        Conv { pad: (ph, pw), ..self }
    }

    /// With a bias.
    pub fn bias(self) -> Conv {
        Conv { bias: true, ..self }
    }
}

/// Output length of a sliding window (PyTorch's floor rule), `None` if empty.
fn window(len: usize, k: usize, stride: usize, pad: usize) -> Option<usize> {
    (len + 2 * pad).checked_sub(k).map(|d| d / stride + 1)
}

/// Builds a [`Net`] node by node; family modules call it like they would
/// write the PyTorch module's `forward`.
///
/// A shape error (an image too small for the network) poisons the builder:
/// later calls go on with placeholder shapes and [`Builder::finish`] reports
/// the first error.
pub struct Builder {
    name: String,
    dtype: Dtype,
    input_shape: Vec<usize>,
    input_elem_bytes: u64,
    nodes: Vec<Node>,
    blocks: Vec<Block>,
    open: Option<(String, usize)>,
    loss_start: Option<usize>,
    error: Option<String>,
}

impl Builder {
    /// A network whose input has `input_shape` (elements of `input_elem_bytes`).
    pub fn new(name: &str, dtype: Dtype, input_shape: Vec<usize>, input_elem_bytes: u64) -> Builder {
        Builder {
            name: name.to_string(),
            dtype,
            input_shape,
            input_elem_bytes,
            nodes: Vec::new(),
            blocks: Vec::new(),
            open: None,
            loss_start: None,
            error: None,
        }
    }

    /// Bytes of an activation element.
    fn b(&self) -> u64 {
        self.dtype.bytes()
    }

    /// The shape of `src`.
    pub fn shape(&self, src: Src) -> Vec<usize> {
        match src {
            Src::Input => self.input_shape.clone(),
            Src::Node(i) => self.nodes[i].shape.clone(),
        }
    }

    fn elems(&self, src: Src) -> u64 {
        elements(&self.shape(src))
    }

    /// Whether autograd computes the gradient of `src` (not for the input).
    fn requires_grad(src: Src) -> bool {
        matches!(src, Src::Node(_))
    }

    fn close(&mut self) {
        if let Some((name, start)) = self.open.take() {
            if start < self.nodes.len() {
                self.blocks.push(Block { name, nodes: start..self.nodes.len() });
            } else {
                self.fail(format!("block `{name}` has no operation"));
            }
        }
    }

    /// Starts block `name`; the nodes added until the next call are its own.
    pub fn block(&mut self, name: impl Into<String>) {
        self.close();
        self.open = Some((name.into(), self.nodes.len()));
    }

    /// Starts the loss: the nodes added from now on form the chain's loss stage.
    pub fn loss(&mut self) {
        self.close();
        self.loss_start = Some(self.nodes.len());
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(message);
        }
    }

    /// The network, or the first shape error.
    pub fn finish(mut self) -> Result<Net, String> {
        self.close();
        if let Some(e) = self.error {
            return Err(e);
        }
        let loss = self.loss_start.map(|s| Block { name: "loss".into(), nodes: s..self.nodes.len() });
        Ok(Net {
            name: self.name,
            input_shape: self.input_shape,
            input_elem_bytes: self.input_elem_bytes,
            nodes: self.nodes,
            blocks: self.blocks,
            loss,
            dtype: self.dtype,
        })
    }

    /// `name` inside the open block: `layer1.0.conv1`.
    fn full_name(&self, name: &str) -> String {
        let prefix = self.open.as_ref().map(|(n, _)| n.as_str()).unwrap_or("");
        match (prefix, name) {
            ("", n) => n.to_string(),
            (p, "") => p.to_string(),
            (p, n) => format!("{p}.{n}"),
        }
    }

    fn node(&self, name: &str, op: &'static str, inputs: Vec<Src>, shape: Vec<usize>) -> Node {
        Node {
            name: self.full_name(name),
            op,
            saves_input: vec![false; inputs.len()],
            inputs,
            saves_output: false,
            extra_saved: 0,
            shape,
            elem_bytes: self.b(),
            fwd_temp: 0,
            bwd_temp: 0,
            params: 0,
            macs: 0,
            forward: Vec::new(),
            backward: Vec::new(),
        }
    }

    fn push(&mut self, node: Node) -> Src {
        if self.open.is_none() && self.loss_start.is_none() {
            self.fail(format!("node `{}` is outside every block", node.name));
        }
        self.nodes.push(node);
        Src::Node(self.nodes.len() - 1)
    }

    /// An elementwise kernel touching `reads + writes` tensors of `e` elements.
    fn vector(&self, e: u64, flops_per: f64, tensors: f64) -> Kernel {
        Kernel { unit: Unit::Vector, flops: flops_per * e as f64, bytes: tensors * (e * self.b()) as f64 }
    }

    /// Spatial output of a window over the last two axes of `x`; poisons on an empty output.
    fn window2(
        &mut self,
        what: &str,
        x: Src,
        k: (usize, usize),
        s: (usize, usize),
        p: (usize, usize),
    ) -> (usize, usize) {
        let shape = self.shape(x);
        let (h, w) = (shape[2], shape[3]);
        match (window(h, k.0, s.0, p.0), window(w, k.1, s.1, p.1)) {
            (Some(ho), Some(wo)) => (ho, wo),
            _ => {
                let what = self.full_name(what);
                self.fail(format!("`{what}` gets a {h}x{w} input, smaller than its {}x{} window", k.0, k.1));
                (1, 1)
            }
        }
    }

    /// `nn.Conv2d`, optionally followed in place by `+= residual` and by
    /// `ReLU(inplace=True)`. Keeps its input (and its output if there is a ReLU).
    pub fn conv_ext(&mut self, name: &str, x: Src, c: Conv, residual: Option<Src>, relu: bool) -> Src {
        let shape = self.shape(x);
        let (batch, cin) = (shape[0], shape[1]);
        let (ho, wo) = self.window2(name, x, c.kernel, c.stride, c.pad);
        let out = vec![batch, c.out, ho, wo];
        let (e_in, e_out) = (self.elems(x), elements(&out));
        let weights = (c.out * cin * c.kernel.0 * c.kernel.1) as u64;
        let macs = e_out * (cin * c.kernel.0 * c.kernel.1) as u64;
        let mut inputs = vec![x];
        inputs.extend(residual);
        let op = match (residual.is_some(), relu) {
            (false, false) => "conv",
            (false, true) => "conv+relu",
            (true, false) => "conv+add",
            (true, true) => "conv+add+relu",
        };
        let mut n = self.node(name, op, inputs, out);
        n.saves_input[0] = true;
        n.saves_output = relu;
        n.params = weights + if c.bias { c.out as u64 } else { 0 };
        n.macs = macs;
        let b = self.b() as f64;
        let conv = Kernel { unit: Unit::Conv, flops: 2.0 * macs as f64, bytes: (e_in + e_out + weights) as f64 * b };
        n.forward.push(conv);
        if residual.is_some() {
            n.forward.push(self.vector(e_out, 1.0, 3.0));
        }
        if relu {
            n.forward.push(self.vector(e_out, 1.0, 2.0));
            n.backward.push(self.vector(e_out, 1.0, 3.0));
            n.bwd_temp = e_out * self.b();
        }
        if Self::requires_grad(x) {
            n.backward.push(conv);
        }
        n.backward.push(conv);
        if c.bias {
            n.backward.push(self.vector(e_out, 1.0, 1.0));
        }
        self.push(n)
    }

    /// `nn.Conv2d` alone.
    pub fn conv(&mut self, name: &str, x: Src, c: Conv) -> Src {
        self.conv_ext(name, x, c, None, false)
    }

    /// `nn.ConvTranspose2d(cin, out, k, stride=k)` with a bias (U-Net's up-sampling).
    pub fn conv_transpose(&mut self, name: &str, x: Src, out_channels: usize, k: usize) -> Src {
        let shape = self.shape(x);
        let (batch, cin, h, w) = (shape[0], shape[1], shape[2], shape[3]);
        let out = vec![batch, out_channels, h * k, w * k];
        let (e_in, e_out) = (self.elems(x), elements(&out));
        let weights = (cin * out_channels * k * k) as u64;
        let macs = e_in * (out_channels * k * k) as u64;
        let mut n = self.node(name, "conv_transpose", vec![x], out);
        n.saves_input[0] = true;
        n.params = weights + out_channels as u64;
        n.macs = macs;
        let conv = Kernel {
            unit: Unit::Conv,
            flops: 2.0 * macs as f64,
            bytes: (e_in + e_out + weights) as f64 * self.b() as f64,
        };
        n.forward.push(conv);
        n.backward.extend([conv, conv, self.vector(e_out, 1.0, 1.0)]);
        self.push(n)
    }

    fn batch_norm(&mut self, name: &str, x: Src, identity: Option<Src>, relu: bool) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let channels = shape[1] as u64;
        let mut inputs = vec![x];
        inputs.extend(identity);
        let op = match (identity.is_some(), relu) {
            (false, false) => "bn",
            (false, true) => "bn+relu",
            (true, _) => "bn+add+relu",
        };
        let mut n = self.node(name, op, inputs, shape);
        n.saves_input[0] = true;
        n.saves_output = relu;
        n.extra_saved = 2 * channels * STAT_BYTES;
        n.params = 2 * channels;
        n.forward.push(self.vector(e, 8.0, 3.0));
        if identity.is_some() {
            n.forward.push(self.vector(e, 1.0, 3.0));
        }
        if relu {
            n.forward.push(self.vector(e, 1.0, 2.0));
            n.backward.push(self.vector(e, 1.0, 3.0));
            n.bwd_temp = e * self.b();
        }
        n.backward.push(self.vector(e, 10.0, 5.0));
        self.push(n)
    }

    /// `nn.BatchNorm2d` in training mode: keeps its input and the per-channel
    /// mean and inverse std (fp32).
    pub fn bn(&mut self, name: &str, x: Src) -> Src {
        self.batch_norm(name, x, None, false)
    }

    /// `nn.BatchNorm2d` then `ReLU(inplace=True)`: also keeps the output (the
    /// ReLU's result, which overwrote the BatchNorm's).
    pub fn bn_relu(&mut self, name: &str, x: Src) -> Src {
        self.batch_norm(name, x, None, true)
    }

    /// A residual block's tail: BatchNorm, `out += identity`, `ReLU(inplace=True)`.
    pub fn bn_add_relu(&mut self, name: &str, x: Src, identity: Src) -> Src {
        self.batch_norm(name, x, Some(identity), true)
    }

    fn pool(&mut self, name: &str, op: &'static str, x: Src, k: usize, s: usize, p: usize) -> Src {
        let shape = self.shape(x);
        let (ho, wo) = self.window2(name, x, (k, k), (s, s), (p, p));
        let out = vec![shape[0], shape[1], ho, wo];
        let (e_in, e_out) = (self.elems(x), elements(&out));
        let mut n = self.node(name, op, vec![x], out);
        n.saves_input[0] = true;
        let b = self.b() as f64;
        let (mut fwd, mut bwd) = ((e_in + e_out) as f64 * b, (e_in + e_out) as f64 * b);
        if op == "max_pool" {
            // CUDA max pooling returns int64 indices of the output's shape;
            // autograd keeps them for the backward.
            n.extra_saved = e_out * INDEX_BYTES;
            fwd += (e_out * INDEX_BYTES) as f64;
            bwd += (e_out * INDEX_BYTES) as f64;
        }
        let flops = (e_out * (k * k) as u64) as f64;
        n.forward.push(Kernel { unit: Unit::Vector, flops, bytes: fwd });
        n.backward.push(Kernel { unit: Unit::Vector, flops: e_in as f64, bytes: bwd });
        self.push(n)
    }

    /// `nn.MaxPool2d(k, s, p)`: keeps its input and int64 indices.
    pub fn max_pool(&mut self, name: &str, x: Src, k: usize, s: usize, p: usize) -> Src {
        self.pool(name, "max_pool", x, k, s, p)
    }

    /// `nn.AvgPool2d(k, s, p)`: keeps its input (autograd's formula takes it).
    pub fn avg_pool(&mut self, name: &str, x: Src, k: usize, s: usize, p: usize) -> Src {
        self.pool(name, "avg_pool", x, k, s, p)
    }

    /// `nn.AdaptiveAvgPool2d((oh, ow))`.
    pub fn adaptive_avg_pool(&mut self, name: &str, x: Src, oh: usize, ow: usize) -> Src {
        let shape = self.shape(x);
        let out = vec![shape[0], shape[1], oh, ow];
        let (e_in, e_out) = (self.elems(x), elements(&out));
        let mut n = self.node(name, "adaptive_avg_pool", vec![x], out);
        n.saves_input[0] = true;
        let bytes = (e_in + e_out) as f64 * self.b() as f64;
        n.forward.push(Kernel { unit: Unit::Vector, flops: e_in as f64, bytes });
        n.backward.push(Kernel { unit: Unit::Vector, flops: e_in as f64, bytes });
        self.push(n)
    }

    /// The `avgpool` (adaptive, to `oh` x `ow`) and `flatten` stages of a classifier head.
    pub fn pool_and_flatten(&mut self, x: Src, oh: usize, ow: usize) -> Src {
        self.block("avgpool");
        let x = self.adaptive_avg_pool("", x, oh, ow);
        self.block("flatten");
        self.flatten("", x)
    }

    /// The last linear layer as stage `name` (1000-way for ImageNet networks)
    /// and the cross-entropy loss on its logits.
    pub fn logits_and_loss(&mut self, name: &str, x: Src, classes: usize) -> Src {
        self.block(name);
        let logits = self.linear("", x, classes, true);
        self.loss();
        self.cross_entropy("loss", logits, 1, false)
    }

    /// `x.view(x.size(0), -1)`.
    pub fn flatten(&mut self, name: &str, x: Src) -> Src {
        let shape = self.shape(x);
        let out = vec![shape[0], shape[1..].iter().product()];
        let n = self.node(name, "flatten", vec![x], out);
        self.push(n)
    }

    fn linear_impl(&mut self, name: &str, op: &'static str, x: Src, dout: usize, bias: bool, relu: bool) -> Src {
        let shape = self.shape(x);
        let din = *shape.last().expect("a linear layer's input has a feature axis");
        let mut out = shape.clone();
        *out.last_mut().expect("non-empty") = dout;
        let (e_in, e_out) = (self.elems(x), elements(&out));
        let weights = (din * dout) as u64;
        let macs = e_out * din as u64;
        let mut n = self.node(name, op, vec![x], out);
        n.saves_input[0] = true;
        n.saves_output = relu;
        n.params = weights + if bias { dout as u64 } else { 0 };
        n.macs = macs;
        let mm = Kernel {
            unit: Unit::Matmul,
            flops: 2.0 * macs as f64,
            bytes: (e_in + e_out + weights) as f64 * self.b() as f64,
        };
        n.forward.push(mm);
        if relu {
            n.forward.push(self.vector(e_out, 1.0, 2.0));
            n.backward.push(self.vector(e_out, 1.0, 3.0));
            n.bwd_temp = e_out * self.b();
        }
        if Self::requires_grad(x) {
            n.backward.push(mm);
        }
        n.backward.push(mm);
        if bias {
            n.backward.push(self.vector(e_out, 1.0, 1.0));
        }
        self.push(n)
    }

    /// `nn.Linear(din, dout)` on the last axis (or GPT-2's `Conv1D`, an `addmm`):
    /// keeps its input.
    pub fn linear(&mut self, name: &str, x: Src, dout: usize, bias: bool) -> Src {
        self.linear_impl(name, "linear", x, dout, bias, false)
    }

    /// `nn.Linear` then `ReLU(inplace=True)`.
    pub fn linear_relu(&mut self, name: &str, x: Src, dout: usize) -> Src {
        self.linear_impl(name, "linear+relu", x, dout, true, true)
    }

    /// A linear layer without bias whose weight is another layer's (GPT-2's
    /// `lm_head`, tied to the token embedding): no parameters of its own.
    pub fn linear_tied(&mut self, name: &str, x: Src, dout: usize) -> Src {
        let y = self.linear_impl(name, "linear", x, dout, false, false);
        self.nodes.last_mut().expect("just pushed").params = 0;
        y
    }

    /// Dropout in training mode: keeps a bool mask of its input's shape.
    pub fn dropout(&mut self, name: &str, x: Src) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let mut n = self.node(name, "dropout", vec![x], shape);
        n.extra_saved = e * MASK_BYTES;
        let bytes = (2 * e * self.b() + e * MASK_BYTES) as f64;
        n.forward.push(Kernel { unit: Unit::Vector, flops: 2.0 * e as f64, bytes });
        n.backward.push(Kernel { unit: Unit::Vector, flops: e as f64, bytes });
        self.push(n)
    }

    /// `torch.cat(xs, 1)`: a new tensor; keeps nothing (the backward slices).
    pub fn cat(&mut self, name: &str, xs: &[Src]) -> Src {
        let mut out = self.shape(xs[0]);
        out[1] = xs.iter().map(|&x| self.shape(x)[1]).sum();
        let e = elements(&out);
        let mut n = self.node(name, "cat", xs.to_vec(), out);
        n.forward.push(self.vector(e, 0.0, 2.0));
        self.push(n)
    }

    /// `x + y` out of place: keeps nothing.
    pub fn add(&mut self, name: &str, x: Src, y: Src) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let mut n = self.node(name, "add", vec![x, y], shape);
        n.forward.push(self.vector(e, 1.0, 3.0));
        self.push(n)
    }

    /// `nn.LayerNorm` over the last axis: keeps its input and per-row mean and
    /// inverse std (fp32).
    pub fn layer_norm(&mut self, name: &str, x: Src) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let d = *shape.last().expect("feature axis") as u64;
        let mut n = self.node(name, "layer_norm", vec![x], shape);
        n.saves_input[0] = true;
        n.extra_saved = 2 * (e / d) * STAT_BYTES;
        n.params = 2 * d;
        n.forward.push(self.vector(e, 8.0, 3.0));
        n.backward.push(self.vector(e, 10.0, 5.0));
        self.push(n)
    }

    /// GELU (tanh approximation, one fused kernel as `nn.GELU(approximate="tanh")`):
    /// keeps its input.
    pub fn gelu(&mut self, name: &str, x: Src) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let mut n = self.node(name, "gelu", vec![x], shape);
        n.saves_input[0] = true;
        n.forward.push(self.vector(e, 10.0, 2.0));
        n.backward.push(self.vector(e, 15.0, 3.0));
        self.push(n)
    }

    /// Softmax over the last axis: keeps its output.
    pub fn softmax(&mut self, name: &str, x: Src) -> Src {
        let shape = self.shape(x);
        let e = self.elems(x);
        let mut n = self.node(name, "softmax", vec![x], shape);
        n.saves_output = true;
        n.forward.push(self.vector(e, 5.0, 2.0));
        n.backward.push(self.vector(e, 3.0, 3.0));
        self.push(n)
    }

    /// GPT-2's input embedding: token embedding `wte(ids)` plus position
    /// embedding `wpe(positions)`. Keeps the ids (the input); the two lookups are
    /// temporaries.
    pub fn embedding(&mut self, name: &str, ids: Src, vocab: usize, positions: usize, dim: usize) -> Src {
        let shape = self.shape(ids);
        let (batch, seq) = (shape[0], shape[1]);
        let out = vec![batch, seq, dim];
        let e = elements(&out);
        let mut n = self.node(name, "embedding", vec![ids], out);
        n.saves_input[0] = true;
        n.params = ((vocab + positions) * dim) as u64;
        n.fwd_temp = e * self.b() + (seq * dim) as u64 * self.b();
        n.forward.push(self.vector(e, 1.0, 5.0));
        n.backward.push(self.vector(e, 2.0, 4.0));
        self.push(n)
    }

    /// Eager attention's scores `where(causal, (q @ k^T) / sqrt(d), -inf)` from
    /// the fused `qkv` projection (batch, seq, 3*dim). `torch.matmul` makes
    /// contiguous copies of the head-split q and k and `bmm` keeps them; the raw
    /// and scaled scores are temporaries.
    pub fn attention_scores(&mut self, name: &str, qkv: Src, heads: usize) -> Src {
        let shape = self.shape(qkv);
        let (batch, seq, dim) = (shape[0], shape[1], shape[2] / 3);
        let out = vec![batch, heads, seq, seq];
        let e = elements(&out);
        let e_tok = (batch * seq * dim) as u64;
        let macs = e * (dim / heads) as u64;
        let b = self.b();
        let mut n = self.node(name, "attention_scores", vec![qkv], out);
        n.extra_saved = 2 * e_tok * b;
        n.fwd_temp = e * b;
        n.bwd_temp = 2 * e * b + 2 * e_tok * b;
        n.macs = macs;
        let bmm = Kernel { unit: Unit::Matmul, flops: 2.0 * macs as f64, bytes: ((2 * e_tok + e) * b) as f64 };
        n.forward.extend([self.vector(2 * e_tok, 0.0, 2.0), bmm, self.vector(e, 1.0, 2.0), self.vector(e, 1.0, 2.0)]);
        n.backward.extend([self.vector(e, 1.0, 2.0), self.vector(e, 1.0, 2.0), bmm, bmm]);
        self.push(n)
    }

    /// Eager attention's context `probs @ v`: keeps `probs` and a contiguous copy
    /// of the head-split v. Output (batch, heads, seq, head_dim).
    pub fn attention_context(&mut self, name: &str, probs: Src, qkv: Src) -> Src {
        let shape = self.shape(probs);
        let (batch, heads, seq) = (shape[0], shape[1], shape[2]);
        let dim = self.shape(qkv)[2] / 3;
        let out = vec![batch, heads, seq, dim / heads];
        let e_tok = elements(&out);
        let e = self.elems(probs);
        let macs = e * (dim / heads) as u64;
        let b = self.b();
        let mut n = self.node(name, "attention_context", vec![probs, qkv], out);
        n.saves_input[0] = true;
        n.extra_saved = e_tok * b;
        n.bwd_temp = e_tok * b;
        n.macs = macs;
        let bmm = Kernel { unit: Unit::Matmul, flops: 2.0 * macs as f64, bytes: ((2 * e_tok + e) * b) as f64 };
        n.forward.extend([self.vector(e_tok, 0.0, 2.0), bmm]);
        n.backward.extend([bmm, bmm]);
        self.push(n)
    }

    /// GPT-2's attention output projection: merges the heads with a contiguous
    /// copy (which `addmm` keeps instead of its input) and projects to `dim`.
    pub fn merge_heads_linear(&mut self, name: &str, ctx: Src, dim: usize) -> Src {
        let shape = self.shape(ctx);
        let (batch, seq) = (shape[0], shape[2]);
        let din = shape[1] * shape[3];
        let out = vec![batch, seq, dim];
        let (e_in, e_out) = (self.elems(ctx), elements(&out));
        let weights = (din * dim) as u64;
        let macs = e_out * din as u64;
        let b = self.b();
        let mut n = self.node(name, "merge_heads+linear", vec![ctx], out);
        n.extra_saved = e_in * b;
        n.params = weights + dim as u64;
        n.macs = macs;
        let mm = Kernel { unit: Unit::Matmul, flops: 2.0 * macs as f64, bytes: ((e_in + e_out + weights) * b) as f64 };
        n.forward.extend([self.vector(e_in, 0.0, 2.0), mm]);
        n.backward.extend([mm, mm, self.vector(e_out, 1.0, 1.0)]);
        self.push(n)
    }

    /// Cross-entropy over axis `class_axis` of `logits`, averaged: keeps the
    /// fp32 log-softmax. With `shift` (language modelling) the logits of the last
    /// position are dropped first with a contiguous copy, as Hugging Face does.
    /// Output: the scalar loss (fp32).
    pub fn cross_entropy(&mut self, name: &str, logits: Src, class_axis: usize, shift: bool) -> Src {
        let shape = self.shape(logits);
        let mut e = self.elems(logits);
        let b = self.b();
        let mut temp = 0;
        if shift {
            e = e / shape[1] as u64 * (shape[1] as u64 - 1);
            temp += e * b;
        }
        if b != STAT_BYTES {
            // Autocast runs the loss in fp32: a cast copy of the logits.
            temp += e * STAT_BYTES;
        }
        let mut n = self.node(name, "cross_entropy", vec![logits], vec![1]);
        n.elem_bytes = STAT_BYTES;
        n.extra_saved = e * STAT_BYTES;
        n.fwd_temp = temp;
        n.bwd_temp = temp.max(e * STAT_BYTES);
        let classes = shape[class_axis] as f64;
        let bytes = (e * (b + STAT_BYTES)) as f64;
        n.forward.push(Kernel { unit: Unit::Vector, flops: 5.0 * e as f64 + classes, bytes });
        n.backward.push(Kernel { unit: Unit::Vector, flops: 3.0 * e as f64, bytes });
        self.push(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_shapes_follow_pytorch() {
        let mut b = Builder::new("t", Dtype::Fp32, vec![2, 3, 224, 224], 4);
        b.block("stem");
        let c = b.conv("conv", Src::Input, Conv::new(64, 7).stride(2).pad(3));
        let p = b.max_pool("pool", c, 3, 2, 1);
        let net = b.finish().unwrap();
        assert_eq!(net.nodes[0].shape, vec![2, 64, 112, 112]);
        assert_eq!(net.nodes[1].shape, vec![2, 64, 56, 56]);
        assert_eq!(p, Src::Node(1));
        assert_eq!(net.nodes[0].params, 64 * 3 * 49);
        assert_eq!(net.nodes[0].macs, 2 * 64 * 112 * 112 * 3 * 49);
        // The first convolution computes no gradient for the image: one backward kernel.
        assert_eq!(net.nodes[0].backward.len(), 1);
        assert_eq!(net.nodes[1].extra_saved, 2 * 64 * 56 * 56 * 8);
        assert_eq!(net.nodes[0].name, "stem.conv");
    }

    #[test]
    fn too_small_an_image_is_an_error_naming_the_layer() {
        let mut b = Builder::new("t", Dtype::Fp32, vec![1, 3, 4, 4], 4);
        b.block("stem");
        let c = b.conv("conv", Src::Input, Conv::new(8, 7));
        b.max_pool("pool", c, 3, 2, 0);
        let e = b.finish().unwrap_err();
        assert!(e.contains("stem.conv") && e.contains("4x4") && e.contains("7x7"), "{e}");
    }

    #[test]
    fn slicing_reads_the_block_before_as_input() {
        let mut b = Builder::new("t", Dtype::Fp32, vec![1, 4, 8, 8], 4);
        b.block("a");
        let x = b.conv("c", Src::Input, Conv::new(4, 3).pad(1));
        b.block("b");
        let y = b.bn_relu("n", x);
        b.block("c");
        let z = b.add("skip", y, x);
        let net = b.finish().unwrap();
        let s = net.slice(1..2).unwrap();
        assert_eq!(s.nodes[0].inputs, vec![Src::Input]);
        assert_eq!(s.input_shape, vec![1, 4, 8, 8]);
        // Block c reads block a's output, which is not the block just before it.
        let e = net.slice(2..3).unwrap_err();
        assert!(e.contains("`c.skip`") && e.contains("`a.c`"), "{e}");
        assert_eq!(z, Src::Node(2));
    }
}
