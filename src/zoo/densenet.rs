//! DenseNet-BC (Huang et al. 2017) as in torchvision, sequentialized as Rotor's
//! version (rotor/models/densenet.py): `conv0`, `norm0` (BatchNorm + ReLU),
//! `pool0`, one stage per dense layer, each transition as three stages (`norm`,
//! `conv`, `pool`), `norm5`, `avgpool`, `flatten`, `classifier`.
//!
//! As a stage, a dense layer takes the concatenation of everything before it
//! and returns `cat([x, new_features])`, so its output grows by the growth rate
//! each layer and it keeps the BatchNorm-ReLU of its whole input: the quadratic
//! memory of naive DenseNets (Pleiss et al. 2017) that rematerialization
//! addresses.

use super::net::{Builder, Conv, Src};

/// One DenseNet's architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Channels each dense layer adds (k).
    pub growth: usize,
    /// Dense layers per block.
    pub blocks: [usize; 4],
    /// Channels of the stem convolution.
    pub init: usize,
}

/// The bottleneck width of a dense layer is `BN_SIZE * growth`.
const BN_SIZE: usize = 4;

/// Builds the network into `b` (input: batch x 3 x H x W) and its loss.
pub fn build(b: &mut Builder, cfg: &Config) {
    b.block("conv0");
    let mut x = b.conv("", Src::Input, Conv::new(cfg.init, 7).stride(2).pad(3));
    b.block("norm0");
    x = b.bn_relu("", x);
    b.block("pool0");
    x = b.max_pool("", x, 3, 2, 1);
    let mut channels = cfg.init;
    for (i, &layers) in cfg.blocks.iter().enumerate() {
        for j in 0..layers {
            b.block(format!("denseblock{}.denselayer{}", i + 1, j + 1));
            let n1 = b.bn_relu("norm1", x);
            let c1 = b.conv("conv1", n1, Conv::new(BN_SIZE * cfg.growth, 1));
            let n2 = b.bn_relu("norm2", c1);
            let c2 = b.conv("conv2", n2, Conv::new(cfg.growth, 3).pad(1));
            x = b.cat("cat", &[x, c2]);
            channels += cfg.growth;
        }
        if i + 1 < cfg.blocks.len() {
            let t = format!("transition{}", i + 1);
            b.block(format!("{t}.norm"));
            x = b.bn_relu("", x);
            b.block(format!("{t}.conv"));
            channels /= 2;
            x = b.conv("", x, Conv::new(channels, 1));
            b.block(format!("{t}.pool"));
            x = b.avg_pool("", x, 2, 2, 0);
        }
    }
    b.block("norm5");
    x = b.bn_relu("", x);
    x = b.pool_and_flatten(x, 1, 1);
    b.logits_and_loss("classifier", x, 1000);
}
