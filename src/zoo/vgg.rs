//! VGG (Simonyan and Zisserman 2015) as in torchvision, without BatchNorm,
//! sequentialized as Rotor's version (rotor/models/vgg.py): each 3x3
//! convolution with its in-place ReLU is a stage, each max pool a stage, then
//! `avgpool`, `flatten` and the classifier's five modules (linear + ReLU,
//! dropout, linear + ReLU, dropout, linear).

use super::net::{Builder, Conv, Src};

/// A stage of the feature extractor: a 3x3 convolution to that many channels
/// (`Some`), or a 2x2 max pool (`None`).
pub type Layer = Option<usize>;

const M: Layer = None;

/// VGG-11 (configuration A).
#[rustfmt::skip]
pub const VGG11: &[Layer] = &[Some(64), M, Some(128), M, Some(256), Some(256), M, Some(512), Some(512), M, Some(512), Some(512), M];
/// VGG-13 (configuration B).
#[rustfmt::skip]
pub const VGG13: &[Layer] =
    &[Some(64), Some(64), M, Some(128), Some(128), M, Some(256), Some(256), M, Some(512), Some(512), M, Some(512), Some(512), M];
/// VGG-16 (configuration D).
#[rustfmt::skip]
pub const VGG16: &[Layer] = &[
    Some(64), Some(64), M, Some(128), Some(128), M, Some(256), Some(256), Some(256), M,
    Some(512), Some(512), Some(512), M, Some(512), Some(512), Some(512), M,
];
/// VGG-19 (configuration E).
#[rustfmt::skip]
pub const VGG19: &[Layer] = &[
    Some(64), Some(64), M, Some(128), Some(128), M, Some(256), Some(256), Some(256), Some(256), M,
    Some(512), Some(512), Some(512), Some(512), M, Some(512), Some(512), Some(512), Some(512), M,
];

/// Builds the network into `b` (input: batch x 3 x H x W) and its loss.
pub fn build(b: &mut Builder, cfg: &[Layer]) {
    let mut x = Src::Input;
    for (i, layer) in cfg.iter().enumerate() {
        b.block(format!("features.{i}"));
        x = match *layer {
            Some(channels) => b.conv_ext("", x, Conv::new(channels, 3).pad(1).bias(), None, true),
            None => b.max_pool("", x, 2, 2, 0),
        };
    }
    x = b.pool_and_flatten(x, 7, 7);
    b.block("classifier.0");
    x = b.linear_relu("", x, 4096);
    b.block("classifier.1");
    x = b.dropout("", x);
    b.block("classifier.2");
    x = b.linear_relu("", x, 4096);
    b.block("classifier.3");
    x = b.dropout("", x);
    b.logits_and_loss("classifier.4", x, 1000);
}
