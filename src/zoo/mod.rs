//! The zoo: real networks' chains (and forward graphs) built from their
//! architecture.
//!
//! Each family module writes its network the way the PyTorch module's
//! `forward` runs, into a layer graph ([`net::Net`]) that knows every tensor's
//! shape, what autograd keeps for the backward, and every kernel's FLOPs and
//! bytes. [`lower`] turns the graph into remat's models: one chain stage per
//! block (the modules an `nn.Sequential` wrapper lists, as Rotor sequentializes
//! these networks), or a forward graph with one node per block or per layer.
//! Sizes are exact for the modelled PyTorch implementation; times are a
//! roofline estimate on the chosen device, never a measurement (see
//! `tools/profile_chain.py` for measured chains).
//!
//! ```
//! use remat::zoo::{Spec, generate};
//! let chain = generate(&Spec::new("resnet50")).unwrap().chain().unwrap().clone();
//! assert_eq!(chain.len(), 22);
//! ```

/// `Display` as the name and `FromStr` from it (an error listing the names)
/// for a closed set of values with `ALL` and `name()`.
macro_rules! named {
    ($t:ty, $what:literal) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;

            fn from_str(s: &str) -> Result<$t, String> {
                <$t>::ALL.iter().copied().find(|x| x.name() == s).ok_or_else(|| {
                    let names: Vec<&str> = <$t>::ALL.iter().map(|x| x.name()).collect();
                    format!("unknown {} `{s}`; expected one of: {}", $what, names.join(", "))
                })
            }
        }
    };
}

pub(crate) mod densenet;
pub mod device;
pub(crate) mod gpt2;
pub(crate) mod inception;
pub(crate) mod json;
pub mod lower;
pub mod net;
pub(crate) mod resnet;
pub(crate) mod unet;
pub(crate) mod vgg;

use std::fmt;

use serde_json::json;
use thiserror::Error;

use crate::chain::Chain;

use crate::graph::ForwardGraph;
pub use device::{Device, Dtype};
pub use lower::{GraphNode, LoweredGraph};
pub use net::Net;

use net::Builder;
use resnet::BlockKind;

/// The architecture behind a zoo name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A ResNet.
    ResNet(resnet::Config),
    /// A DenseNet-BC.
    DenseNet(densenet::Config),
    /// Inception v3.
    Inception,
    /// A VGG without BatchNorm.
    Vgg(&'static [vgg::Layer]),
    /// A GPT-2 size.
    Gpt2(gpt2::Config),
    /// U-Net (a graph, not a chain).
    UNet,
}

/// A network remat can build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    /// The name on the command line.
    pub name: &'static str,
    /// Its architecture.
    pub family: Family,
    /// One line for `--help` and metadata.
    pub summary: &'static str,
}

const fn densenet(growth: usize, blocks: [usize; 4], init: usize) -> Family {
    Family::DenseNet(densenet::Config { growth, blocks, init })
}

const fn gpt2(layers: usize, hidden: usize, heads: usize) -> Family {
    Family::Gpt2(gpt2::Config { layers, hidden, heads })
}

/// Every network of the zoo, in the order listings show them.
pub const NETWORKS: &[Network] = &[
    Network {
        name: "resnet18",
        family: Family::ResNet(resnet::imagenet(BlockKind::Basic, &[2, 2, 2, 2])),
        summary: "ResNet-18 (torchvision, ImageNet)",
    },
    Network {
        name: "resnet34",
        family: Family::ResNet(resnet::imagenet(BlockKind::Basic, &[3, 4, 6, 3])),
        summary: "ResNet-34 (torchvision, ImageNet)",
    },
    Network {
        name: "resnet50",
        family: Family::ResNet(resnet::imagenet(BlockKind::Bottleneck, &[3, 4, 6, 3])),
        summary: "ResNet-50 (torchvision v1.5, ImageNet)",
    },
    Network {
        name: "resnet101",
        family: Family::ResNet(resnet::imagenet(BlockKind::Bottleneck, &[3, 4, 23, 3])),
        summary: "ResNet-101 (torchvision v1.5, ImageNet)",
    },
    Network {
        name: "resnet152",
        family: Family::ResNet(resnet::imagenet(BlockKind::Bottleneck, &[3, 8, 36, 3])),
        summary: "ResNet-152 (torchvision v1.5, ImageNet)",
    },
    Network {
        name: "resnet200",
        family: Family::ResNet(resnet::imagenet(BlockKind::Bottleneck, &[3, 24, 36, 3])),
        summary: "ResNet-200 (torchvision-style bottlenecks [3, 24, 36, 3], as Rotor ran it)",
    },
    Network {
        name: "resnet1001",
        family: Family::ResNet(resnet::RESNET1001_ROTOR),
        summary: "pre-activation ResNet-1001 as Rotor ran it (3 x 111 bottlenecks, widths 64/128/256, 339 stages)",
    },
    Network {
        name: "resnet1001-cifar",
        family: Family::ResNet(resnet::RESNET1001_CIFAR),
        summary: "pre-activation ResNet-1001 of He et al. 2016 for CIFAR (widths 16/32/64), 339 stages",
    },
    Network { name: "densenet121", family: densenet(32, [6, 12, 24, 16], 64), summary: "DenseNet-121 (torchvision)" },
    Network { name: "densenet161", family: densenet(48, [6, 12, 36, 24], 96), summary: "DenseNet-161 (torchvision)" },
    Network { name: "densenet169", family: densenet(32, [6, 12, 32, 32], 64), summary: "DenseNet-169 (torchvision)" },
    Network { name: "densenet201", family: densenet(32, [6, 12, 48, 32], 64), summary: "DenseNet-201 (torchvision)" },
    Network {
        name: "inception_v3",
        family: Family::Inception,
        summary: "Inception v3 (torchvision, without the auxiliary classifier)",
    },
    Network { name: "vgg11", family: Family::Vgg(vgg::VGG11), summary: "VGG-11 (torchvision, no BatchNorm)" },
    Network { name: "vgg13", family: Family::Vgg(vgg::VGG13), summary: "VGG-13 (torchvision, no BatchNorm)" },
    Network { name: "vgg16", family: Family::Vgg(vgg::VGG16), summary: "VGG-16 (torchvision, no BatchNorm)" },
    Network { name: "vgg19", family: Family::Vgg(vgg::VGG19), summary: "VGG-19 (torchvision, no BatchNorm)" },
    Network {
        name: "gpt2-small",
        family: gpt2(12, 768, 12),
        summary: "GPT-2 small, 124M (Hugging Face GPT2LMHeadModel, eager attention)",
    },
    Network { name: "gpt2-medium", family: gpt2(24, 1024, 16), summary: "GPT-2 medium, 355M (Hugging Face)" },
    Network { name: "gpt2-large", family: gpt2(36, 1280, 20), summary: "GPT-2 large, 774M (Hugging Face)" },
    Network { name: "gpt2-xl", family: gpt2(48, 1600, 25), summary: "GPT-2 XL, 1.5B (Hugging Face)" },
    Network {
        name: "unet",
        family: Family::UNet,
        summary: "U-Net (milesial/Pytorch-UNet, 3 -> 2 classes); a graph: use --graph",
    },
];

impl Network {
    /// The default image side (`None`: the network reads tokens).
    pub fn default_image(&self) -> Option<usize> {
        match self.family {
            Family::Gpt2(_) => None,
            Family::Inception => Some(299),
            Family::ResNet(c) if c == resnet::RESNET1001_CIFAR => Some(32),
            Family::UNet => Some(256),
            _ => Some(224),
        }
    }

    /// Whether the network reads token ids (`--seq`) rather than images (`--image`).
    pub fn reads_tokens(&self) -> bool {
        matches!(self.family, Family::Gpt2(_))
    }

    /// Whether its blocks form a chain.
    pub fn is_chain(&self) -> bool {
        self.family != Family::UNet
    }

    /// How the family is sequentialized (the family module's summary).
    fn stages_note(&self) -> &'static str {
        match self.family {
            Family::ResNet(c) if c.kind == BlockKind::PreActBottleneck => {
                "Rotor's sequentialization (rotor/models/resnet.py): conv1, bn1 (BatchNorm+ReLU), one stage per \
                 pre-activation bottleneck block, bn_final (BatchNorm+ReLU), avgpool, flatten, fc"
            }
            Family::ResNet(_) => {
                "Rotor's sequentialization (rotor/models/resnet.py): conv1, bn1 (BatchNorm+ReLU), maxpool, one stage \
                 per residual block, avgpool, flatten, fc"
            }
            Family::DenseNet(_) => {
                "Rotor's sequentialization (rotor/models/densenet.py): conv0, norm0, pool0, one stage per dense layer \
                 (output = cat of its input and new features), transitions as norm/conv/pool stages, norm5, avgpool, \
                 flatten, classifier"
            }
            Family::Inception => {
                "Rotor's sequentialization (rotor/models/inception.py) without the auxiliary classifier: stem \
                 convolutions and their BatchNorm+ReLU as separate stages, max pools, one stage per Inception module, \
                 avgpool, dropout, flatten, fc"
            }
            Family::Vgg(_) => {
                "Rotor's sequentialization (rotor/models/vgg.py): each conv+ReLU and max pool a stage, avgpool, \
                 flatten, then linear+ReLU, dropout, linear+ReLU, dropout, linear"
            }
            Family::Gpt2(_) => {
                "embed (token + position embedding, dropout), one stage per transformer block, ln_f, lm_head; the \
                 loss stage is the shifted cross-entropy (fp32 log-softmax kept)"
            }
            Family::UNet => {
                "blocks inc, down1-4 (max pool + DoubleConv), up1-4 (transposed conv, cat, DoubleConv), outc"
            }
        }
    }
}

/// Why a network could not be generated. Every message names the option at fault.
#[derive(Debug, Error, PartialEq)]
pub enum ZooError {
    /// No network by that name.
    #[error("unknown network `{name}`{}; available: {}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(), names())]
    UnknownNetwork {
        /// The name asked for.
        name: String,
        /// The closest known name, if one is close.
        suggestion: Option<String>,
    },
    /// An option out of range or not applicable to the network.
    #[error("{option}: {message}")]
    Option {
        /// The option, e.g. `--image`.
        option: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The network cannot be generated in the form asked (a graph as a chain, a
    /// shape that does not fit).
    #[error("{0}")]
    Network(String),
}

/// The zoo's names, comma-separated.
pub fn names() -> String {
    NETWORKS.iter().map(|n| n.name).collect::<Vec<_>>().join(", ")
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The network named `name`, or an error listing the names (and the closest one).
pub fn network(name: &str) -> Result<&'static Network, ZooError> {
    let lower = name.to_ascii_lowercase();
    if let Some(n) = NETWORKS.iter().find(|n| n.name == lower) {
        return Ok(n);
    }
    let suggestion = NETWORKS
        .iter()
        .map(|n| (edit_distance(&lower, n.name), n.name))
        .filter(|&(d, _)| d <= 3)
        .min()
        .map(|(_, n)| n.to_string());
    Err(ZooError::UnknownNetwork { name: name.to_string(), suggestion })
}

/// The granularity of a forward graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// One node per block: the chain's stages (for chains, the graph is a path).
    Blocks,
    /// One node per layer (convolution, BatchNorm+ReLU, matmul, softmax...).
    Layers,
}

impl Granularity {
    /// Both granularities.
    pub const ALL: &'static [Granularity] = &[Granularity::Blocks, Granularity::Layers];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Granularity::Blocks => "blocks",
            Granularity::Layers => "layers",
        }
    }
}

named!(Granularity, "granularity");

/// What to generate: a network, its input, the device, and the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The zoo name.
    pub network: String,
    /// Samples per batch.
    pub batch: usize,
    /// Image side (square images); `None` for the network's default.
    pub image: Option<usize>,
    /// Sequence length for transformers; `None` for the longest (1024).
    pub seq: Option<usize>,
    /// The activations' type.
    pub dtype: Dtype,
    /// The device the roofline times are for.
    pub device: Device,
    /// `None`: the chain; `Some`: the forward graph at this granularity.
    pub graph: Option<Granularity>,
    /// Only blocks `first..=last` (1-based), their input being the output of the
    /// block before; no loss.
    pub blocks: Option<(usize, usize)>,
    /// Give each block of a chain recording options ([`lower::Policy`]):
    /// selective saving, chosen per block by the solvers.
    pub options: bool,
}

impl Spec {
    /// The chain of `network`, batch 1, its default input, fp32 on an A100.
    pub fn new(network: &str) -> Spec {
        Spec {
            network: network.to_string(),
            batch: 1,
            image: None,
            seq: None,
            dtype: Dtype::Fp32,
            device: Device::A100,
            graph: None,
            blocks: None,
            options: false,
        }
    }
}

/// A spec checked against its network, defaults filled in.
struct Resolved {
    network: &'static Network,
    /// (image side, sequence length): one of them is set.
    image: Option<usize>,
    seq: Option<usize>,
}

/// The largest batch x image side^2 (or batch x sequence length^2) the zoo
/// builds: 2^32, far above any real training step (batch 85,000 at 224x224).
pub const MAX_BATCH_AREA: u64 = 1 << 32;

fn resolve(spec: &Spec) -> Result<Resolved, ZooError> {
    let network = network(&spec.network)?;
    let bad = |option, message: String| Err(ZooError::Option { option, message });
    if spec.batch == 0 {
        return bad("--batch", "must be at least 1".into());
    }
    if !spec.device.supports(spec.dtype) {
        return bad(
            "--dtype",
            format!("{} has no {} arithmetic; use fp32, or --device a100 or h100", spec.device.model(), spec.dtype),
        );
    }
    let (image, seq) = if network.reads_tokens() {
        if spec.image.is_some() {
            return bad(
                "--image",
                format!("{} reads tokens, not images; set the sequence length with --seq", network.name),
            );
        }
        let seq = spec.seq.unwrap_or(gpt2::POSITIONS);
        if !(2..=gpt2::POSITIONS).contains(&seq) {
            return bad(
                "--seq",
                format!("{seq} is out of range: GPT-2 has {} positions and the loss needs 2 tokens", gpt2::POSITIONS),
            );
        }
        (None, Some(seq))
    } else {
        if spec.seq.is_some() {
            return bad("--seq", format!("{} reads images, not tokens; set the image size with --image", network.name));
        }
        let image = spec.image.or(network.default_image()).expect("image networks have a default");
        if image == 0 {
            return bad("--image", "must be at least 1".into());
        }
        if network.family == Family::UNet && !image.is_multiple_of(16) {
            return bad("--image", format!("{image} is not a multiple of 16, which U-Net's four poolings need"));
        }
        (Some(image), None)
    };
    // Every tensor is at most batch x (a few thousand channels, or heads) x
    // image^2 (or seq^2) elements of at most 8 bytes, and the largest product
    // the lowering forms (a layer's multiply-adds) multiplies that by at most
    // 2^19 more: bounding batch x side^2 by 2^32 keeps all of it inside a
    // u64, checked here once so the arithmetic downstream cannot wrap.
    let side = image.or(seq).unwrap_or(1) as u64;
    let per_batch = side.checked_mul(side);
    if per_batch.and_then(|p| p.checked_mul(spec.batch as u64)).is_none_or(|x| x > MAX_BATCH_AREA) {
        let (option, what) = if image.is_some() { ("--image", "image") } else { ("--seq", "seq") };
        let option = if spec.batch > 1 { "--batch" } else { option };
        return bad(
            option,
            format!(
                "batch {} with {what} {side}: batch x {what}^2 must be at most {MAX_BATCH_AREA} (2^32) so that \
                 every size and count of the network fits in 64 bits",
                spec.batch
            ),
        );
    }
    if spec.graph.is_none() && !network.is_chain() {
        return Err(ZooError::Network(format!(
            "{} is not a chain (its decoder reads the encoder's outputs); ask for its forward graph with --graph blocks \
             or --graph layers",
            network.name
        )));
    }
    Ok(Resolved { network, image, seq })
}

/// The layer graph of the spec's network (all blocks, with the loss).
pub fn build(spec: &Spec) -> Result<Net, ZooError> {
    let r = resolve(spec)?;
    build_resolved(spec, &r)
}

fn build_resolved(spec: &Spec, r: &Resolved) -> Result<Net, ZooError> {
    let mut b = match (r.image, r.seq) {
        (_, Some(seq)) => Builder::new(r.network.name, spec.dtype, vec![spec.batch, seq], 8),
        (Some(image), _) => {
            Builder::new(r.network.name, spec.dtype, vec![spec.batch, 3, image, image], spec.dtype.bytes())
        }
        _ => unreachable!("resolve sets one"),
    };
    match r.network.family {
        Family::ResNet(c) => resnet::build(&mut b, &c),
        Family::DenseNet(c) => densenet::build(&mut b, &c),
        Family::Inception => inception::build(&mut b),
        Family::Vgg(c) => vgg::build(&mut b, c),
        Family::Gpt2(c) => gpt2::build(&mut b, &c),
        Family::UNet => unet::build(&mut b),
    }
    b.finish().map_err(|e| match r.image {
        Some(image) => {
            ZooError::Option { option: "--image", message: format!("{image} is too small for {}: {e}", r.network.name) }
        }
        None => ZooError::Network(e),
    })
}

/// A generated chain or forward graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Generated {
    /// A chain (validated).
    Chain(Chain),
    /// A forward graph.
    Graph(ForwardGraph),
}

impl Generated {
    /// The chain, if that is what was generated.
    pub fn chain(&self) -> Option<&Chain> {
        match self {
            Generated::Chain(c) => Some(c),
            Generated::Graph(_) => None,
        }
    }

    /// The forward graph, if that is what was generated.
    pub fn graph(&self) -> Option<&ForwardGraph> {
        match self {
            Generated::Graph(g) => Some(g),
            Generated::Chain(_) => None,
        }
    }

    /// The file's text: compact JSON, one stage or node per line, defaults
    /// left out. Deterministic.
    pub fn to_json(&self) -> String {
        match self {
            Generated::Chain(c) => json::chain(c),
            Generated::Graph(g) => json::graph(g),
        }
    }
}

/// The command line that regenerates `spec`, every option explicit.
pub fn command(spec: &Spec) -> Result<String, ZooError> {
    let r = resolve(spec)?;
    Ok(command_resolved(spec, &r))
}

fn command_resolved(spec: &Spec, r: &Resolved) -> String {
    let mut cmd = format!("remat zoo {} --batch {}", r.network.name, spec.batch);
    if let Some(image) = r.image {
        cmd += &format!(" --image {image}");
    }
    if let Some(seq) = r.seq {
        cmd += &format!(" --seq {seq}");
    }
    cmd += &format!(" --dtype {} --device {}", spec.dtype, spec.device);
    if let Some(g) = spec.graph {
        cmd += &format!(" --graph {}", g.name());
    }
    if let Some((a, b)) = spec.blocks {
        cmd += &format!(" --blocks {a}-{b}");
    }
    if spec.options {
        cmd += " --options";
    }
    cmd
}

/// A short name for the generated file: `resnet50-224-b32`, `gpt2-xl-s1024-b4-bf16`,
/// `unet-256-b1-layers`, with non-default dtype and device appended.
pub fn slug(spec: &Spec) -> Result<String, ZooError> {
    let r = resolve(spec)?;
    Ok(slug_resolved(spec, &r))
}

fn slug_resolved(spec: &Spec, r: &Resolved) -> String {
    let mut s = match (r.image, r.seq) {
        (Some(image), _) => format!("{}-{image}-b{}", r.network.name, spec.batch),
        (_, Some(seq)) => format!("{}-s{seq}-b{}", r.network.name, spec.batch),
        _ => unreachable!("resolve sets one"),
    };
    if spec.dtype != Dtype::Fp32 {
        s += &format!("-{}", spec.dtype);
    }
    if spec.device != Device::A100 {
        s += &format!("-{}", spec.device);
    }
    if let Some(g) = spec.graph {
        s += &format!("-{}", g.name());
    }
    if let Some((a, b)) = spec.blocks {
        s += &format!("-part{a}-{b}");
    }
    if spec.options {
        s += "-options";
    }
    s
}

/// Generates the chain or forward graph `spec` asks for, with its provenance
/// in the metadata. Deterministic.
///
/// # Examples
///
/// ```
/// use remat::solve::min_budget;
/// use remat::zoo::{Spec, generate};
/// use remat::{Algorithm, SolveOptions, simulate, solve};
///
/// let chain = generate(&Spec { batch: 8, ..Spec::new("resnet18") })?.chain().expect("a chain").clone();
/// // The smallest budget checkpoint_sequential meets, and remat's schedule there.
/// let opts = SolveOptions::default();
/// let budget = min_budget(&chain, Algorithm::Sequential, &opts)?.expect("some K fits");
/// let solution = solve(&chain, budget, Algorithm::Auto, &opts)?;
/// let sequential = solve(&chain, budget, Algorithm::Sequential, &opts)?;
/// assert!(solution.schedule.makespan <= sequential.schedule.makespan);
/// assert_eq!(simulate(&chain, &solution.schedule.operations)?.makespan, solution.schedule.makespan);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn generate(spec: &Spec) -> Result<Generated, ZooError> {
    let r = resolve(spec)?;
    if spec.options && spec.graph.is_some() {
        return Err(ZooError::Option {
            option: "--options",
            message: "recording options belong to chain stages; a forward graph has none (drop --graph)".into(),
        });
    }
    let full = build_resolved(spec, &r)?;
    let net = match spec.blocks {
        None => full,
        Some((a, b)) => {
            let n = full.blocks.len();
            if a == 0 || a > b || b > n {
                return Err(ZooError::Option {
                    option: "--blocks",
                    message: format!("{a}-{b} is not a range within 1-{n} ({} has {n} blocks)", r.network.name),
                });
            }
            full.slice(a - 1..b).map_err(|e| ZooError::Option { option: "--blocks", message: e })?
        }
    };
    let name = slug_resolved(spec, &r);
    let meta = metadata(spec, &r, &net);
    Ok(match spec.graph {
        None => {
            let mut chain =
                lower::chain_with(&net, &name, spec.device, spec.dtype, spec.options).map_err(ZooError::Network)?;
            chain.set_metadata(meta);
            Generated::Chain(chain)
        }
        Some(g) => {
            let mut graph = match g {
                Granularity::Blocks => lower::block_graph(&net, &name, spec.device, spec.dtype),
                Granularity::Layers => lower::layer_graph(&net, &name, spec.device, spec.dtype),
            };
            graph.metadata = Some(meta);
            Generated::Graph(graph.validate().map_err(|e| ZooError::Network(e.to_string()))?)
        }
    })
}

/// What a generated file says about itself.
fn metadata(spec: &Spec, r: &Resolved, net: &Net) -> serde_json::Value {
    let input = match (r.image, r.seq) {
        (Some(image), _) => format!("batch {} of 3x{image}x{image} images, {} activations", spec.batch, spec.dtype),
        (_, Some(seq)) => format!("batch {} of {seq} token ids (int64), {} activations", spec.batch, spec.dtype),
        _ => unreachable!("resolve sets one"),
    };
    let per_sample_gmacs = net.macs() as f64 / spec.batch as f64 / 1e9;
    let sizes = match spec.graph {
        Some(Granularity::Layers) => {
            "bytes. One node per PyTorch operation (in-place runs such as BatchNorm+ReLU fused). output_size: its \
             output tensor. saved_size: the output plus the extra tensors autograd keeps for its backward (BatchNorm/\
             LayerNorm fp32 statistics, dropout masks, int64 max-pool indices, contiguous copies matmul makes); the \
             inputs it keeps are its input nodes. Overheads: temporaries alive while it runs (see chains/README.md)"
        }
        _ => {
            "bytes. output_size: the block's output tensor. saved_size: the output plus every tensor produced inside \
             the block that PyTorch autograd keeps for the backward (convolution and matmul inputs, BatchNorm/LayerNorm \
             inputs and fp32 statistics, ReLU and softmax outputs, GELU inputs, dropout masks, int64 max-pool \
             indices, contiguous copies matmul makes); the block's input is not counted (it is the previous stage's \
             output). Overheads: tensors alive while the block runs beyond those (see chains/README.md)"
        }
    };
    let shape: Vec<String> = net.input_shape.iter().map(|d| d.to_string()).collect();
    json!({
        "generator": "remat zoo: built from the architecture; sizes exact, times a roofline estimate (not measured)",
        "command": command_resolved(spec, r),
        "network": r.network.summary,
        "stages": r.network.stages_note(),
        "input": input,
        "input_shape": shape.join("x"),
        "params": net.params(),
        "forward_gmacs_per_sample": lower::round_time(per_sample_gmacs),
        "sizes": sizes,
        "times": format!(
            "ms, roofline: each kernel takes max(FLOPs / peak, bytes moved / bandwidth) on the {}; convolutions on \
             {} cores, matmuls on {} cores (PyTorch's defaults), elementwise on FP32 cores; backward: data and \
             weight gradients (2x the forward's FLOPs for convolutions and matmuls), elementwise backward kernels \
             move 1.5x to 1.7x the forward's bytes; no launch latency or efficiency loss, so a lower bound",
            spec.device.model(),
            conv_unit(spec),
            match spec.dtype { Dtype::Fp32 => "FP32", Dtype::Bf16 => "BF16 tensor" },
        ),
        "device": spec.device.describe(),
        "layers": net.nodes.len(),
    })
}

fn conv_unit(spec: &Spec) -> &'static str {
    match (spec.dtype, spec.device.tf32_tflops()) {
        (Dtype::Bf16, _) => "BF16 tensor",
        (Dtype::Fp32, Some(_)) => "TF32 tensor",
        (Dtype::Fp32, None) => "FP32",
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<18} {}", self.name, self.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_zoo_and_suggest_the_closest() {
        let e = network("resnt50").unwrap_err().to_string();
        assert!(e.contains("did you mean `resnet50`"), "{e}");
        assert!(e.contains("gpt2-xl") && e.contains("unet"), "{e}");
        let e = network("transformer").unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
        assert_eq!(network("ResNet50").unwrap().name, "resnet50");
    }

    #[test]
    fn options_that_do_not_apply_are_errors_naming_them() {
        let spec = |f: fn(&mut Spec)| {
            let mut s = Spec::new("resnet50");
            f(&mut s);
            generate(&s).unwrap_err().to_string()
        };
        assert!(spec(|s| s.seq = Some(128)).starts_with("--seq: resnet50 reads images"));
        assert!(spec(|s| s.batch = 0).starts_with("--batch"));
        let mut v = Spec::new("vgg16");
        v.image = Some(16);
        let e = generate(&v).unwrap_err().to_string();
        assert!(e.starts_with("--image: 16 is too small for vgg16: `features.17` gets a 1x1 input"), "{e}");
        let e = spec(|s| {
            s.dtype = Dtype::Bf16;
            s.device = Device::V100;
        });
        assert!(e.starts_with("--dtype: NVIDIA V100 SXM2 has no bf16"), "{e}");
        let e = spec(|s| s.blocks = Some((5, 40)));
        assert!(e.starts_with("--blocks: 5-40 is not a range within 1-22"), "{e}");
        let mut g = Spec::new("gpt2-small");
        g.image = Some(224);
        assert!(generate(&g).unwrap_err().to_string().starts_with("--image: gpt2-small reads tokens"));
        g.image = None;
        g.seq = Some(4096);
        assert!(generate(&g).unwrap_err().to_string().starts_with("--seq: 4096 is out of range"));
        let mut u = Spec::new("unet");
        assert!(generate(&u).unwrap_err().to_string().contains("--graph blocks"));
        u.graph = Some(Granularity::Layers);
        u.image = Some(100);
        assert!(generate(&u).unwrap_err().to_string().starts_with("--image: 100 is not a multiple of 16"));
    }

    #[test]
    fn commands_and_slugs_are_explicit_and_stable() {
        let mut s = Spec::new("gpt2-xl");
        s.batch = 4;
        s.dtype = Dtype::Bf16;
        assert_eq!(command(&s).unwrap(), "remat zoo gpt2-xl --batch 4 --seq 1024 --dtype bf16 --device a100");
        assert_eq!(slug(&s).unwrap(), "gpt2-xl-s1024-b4-bf16");
        let mut u = Spec::new("unet");
        u.graph = Some(Granularity::Layers);
        u.blocks = Some((1, 3));
        assert_eq!(
            command(&u).unwrap(),
            "remat zoo unet --batch 1 --image 256 --dtype fp32 --device a100 --graph layers --blocks 1-3"
        );
        assert_eq!(slug(&u).unwrap(), "unet-256-b1-layers-part1-3");
    }
}
