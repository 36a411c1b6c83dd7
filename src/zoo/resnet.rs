//! ResNets: torchvision's ImageNet ResNet-18 to -152 (and -200, the same design
//! with [3, 24, 36, 3] bottleneck blocks), and the pre-activation ResNet-1001 of
//! He et al., "Identity Mappings in Deep Residual Networks" (2016).
//!
//! Sequentialized as Rotor's `nn.Sequential` versions of these models do
//! (rotor/models/resnet.py): for ImageNet ResNets the stages are `conv1`,
//! `bn1` (BatchNorm + ReLU), `maxpool`, one stage per residual block,
//! `avgpool`, `flatten`, `fc`. For ResNet-1001: `conv1`, `bn1`, the 333
//! pre-activation bottleneck blocks, `bn_final` (BatchNorm + ReLU), `avgpool`,
//! `flatten`, `fc`: 339 stages.

use super::net::{Builder, Conv, Src};

/// The residual block design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Two 3x3 convolutions (ResNet-18/34).
    Basic,
    /// 1x1, 3x3 (with the stride, "ResNet v1.5"), 1x1 with 4x expansion.
    Bottleneck,
    /// BN-ReLU-conv ordering (He et al. 2016), 4x expansion, no ReLU after the add.
    PreActBottleneck,
}

impl BlockKind {
    fn expansion(self) -> usize {
        match self {
            BlockKind::Basic => 1,
            BlockKind::Bottleneck | BlockKind::PreActBottleneck => 4,
        }
    }
}

/// One ResNet's architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The block design.
    pub kind: BlockKind,
    /// Blocks per stage (4 stages for ImageNet ResNets, 3 for ResNet-1001).
    pub layers: &'static [usize],
    /// Bottleneck width of each stage (the output has `expansion` times as many channels).
    pub planes: &'static [usize],
    /// Classes of the classifier.
    pub classes: usize,
}

/// torchvision's ImageNet ResNet with these blocks.
pub const fn imagenet(kind: BlockKind, layers: &'static [usize]) -> Config {
    Config { kind, layers, planes: &[64, 128, 256, 512], classes: 1000 }
}

/// The pre-activation ResNet-1001 as Rotor ran it (rotor/models/resnet.py,
/// `resnet1001`): He et al.'s three stages of 111 bottleneck blocks and 3x3
/// stem of 16 channels, but with bottleneck widths 64/128/256 (outputs of
/// 256/512/1024 channels) and 10 classes.
pub const RESNET1001_ROTOR: Config =
    Config { kind: BlockKind::PreActBottleneck, layers: &[111, 111, 111], planes: &[64, 128, 256], classes: 10 };

/// He et al.'s CIFAR ResNet-1001 (Identity Mappings, Table 2): widths 16/32/64
/// (outputs 64/128/256 channels), 10 classes.
pub const RESNET1001_CIFAR: Config =
    Config { kind: BlockKind::PreActBottleneck, layers: &[111, 111, 111], planes: &[16, 32, 64], classes: 10 };

/// Builds the network into `b` (input: batch x 3 x H x W) and its loss.
pub fn build(b: &mut Builder, cfg: &Config) {
    let pre = cfg.kind == BlockKind::PreActBottleneck;
    let mut x = Src::Input;
    let mut channels;
    if pre {
        b.block("conv1");
        x = b.conv("", x, Conv::new(16, 3).pad(1));
        b.block("bn1");
        x = b.bn_relu("", x);
        channels = 16;
    } else {
        b.block("conv1");
        x = b.conv("", x, Conv::new(64, 7).stride(2).pad(3));
        b.block("bn1");
        x = b.bn_relu("", x);
        b.block("maxpool");
        x = b.max_pool("", x, 3, 2, 1);
        channels = 64;
    }
    for (stage, (&blocks, &planes)) in cfg.layers.iter().zip(cfg.planes).enumerate() {
        for i in 0..blocks {
            let stride = if i == 0 && stage > 0 { 2 } else { 1 };
            let out = planes * cfg.kind.expansion();
            let downsample = stride != 1 || channels != out;
            b.block(format!("layer{}.{i}", stage + 1));
            x = match cfg.kind {
                BlockKind::Basic => basic(b, x, planes, stride, downsample),
                BlockKind::Bottleneck => bottleneck(b, x, planes, stride, downsample),
                BlockKind::PreActBottleneck => preact_bottleneck(b, x, planes, stride, downsample),
            };
            channels = out;
        }
    }
    if pre {
        b.block("bn_final");
        x = b.bn_relu("", x);
    }
    x = b.pool_and_flatten(x, 1, 1);
    b.logits_and_loss("fc", x, cfg.classes);
}

/// torchvision's downsample: a strided 1x1 convolution and a BatchNorm.
fn downsample(b: &mut Builder, x: Src, out: usize, stride: usize) -> Src {
    let d = b.conv("downsample.0", x, Conv::new(out, 1).stride(stride));
    b.bn("downsample.1", d)
}

fn basic(b: &mut Builder, x: Src, planes: usize, stride: usize, ds: bool) -> Src {
    let c1 = b.conv("conv1", x, Conv::new(planes, 3).stride(stride).pad(1));
    let r1 = b.bn_relu("bn1", c1);
    let c2 = b.conv("conv2", r1, Conv::new(planes, 3).pad(1));
    let identity = if ds { downsample(b, x, planes, stride) } else { x };
    b.bn_add_relu("bn2", c2, identity)
}

fn bottleneck(b: &mut Builder, x: Src, planes: usize, stride: usize, ds: bool) -> Src {
    let c1 = b.conv("conv1", x, Conv::new(planes, 1));
    let r1 = b.bn_relu("bn1", c1);
    let c2 = b.conv("conv2", r1, Conv::new(planes, 3).stride(stride).pad(1));
    let r2 = b.bn_relu("bn2", c2);
    let c3 = b.conv("conv3", r2, Conv::new(planes * 4, 1));
    let identity = if ds { downsample(b, x, planes * 4, stride) } else { x };
    b.bn_add_relu("bn3", c3, identity)
}

/// Rotor's `PreActBottleneck`: its downsample is BatchNorm then a strided 1x1
/// convolution, and the residual is added in place to conv3's output.
fn preact_bottleneck(b: &mut Builder, x: Src, planes: usize, stride: usize, ds: bool) -> Src {
    let r1 = b.bn_relu("bn1", x);
    let c1 = b.conv("conv1", r1, Conv::new(planes, 1));
    let r2 = b.bn_relu("bn2", c1);
    let c2 = b.conv("conv2", r2, Conv::new(planes, 3).stride(stride).pad(1));
    let r3 = b.bn_relu("bn3", c2);
    let identity = if ds {
        let n = b.bn("downsample.0", x);
        b.conv("downsample.1", n, Conv::new(planes * 4, 1).stride(stride))
    } else {
        x
    };
    b.conv_ext("conv3", r3, Conv::new(planes * 4, 1), Some(identity), false)
}
