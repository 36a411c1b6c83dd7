//! U-Net (Ronneberger et al. 2015) as the widely used PyTorch implementation
//! (milesial/Pytorch-UNet, `UNet(n_channels=3, n_classes=2, bilinear=False)`)
//! builds it: padded 3x3 convolutions with BatchNorm + ReLU (`DoubleConv`),
//! four 2x2 max-pool downsamplings to 1024 channels, four 2x2 transposed
//! convolutions each concatenated with the encoder output of the same size,
//! a 1x1 classifier and a per-pixel cross-entropy.
//!
//! Blocks: `inc`, `down1`..`down4`, `up1`..`up4`, `outc`. The decoder blocks
//! read the encoder's outputs, so U-Net is a graph, not a chain.

use super::net::{Builder, Conv, Src};

/// Output classes of the segmentation.
pub const CLASSES: usize = 2;

fn double_conv(b: &mut Builder, x: Src, out: usize) -> Src {
    let c1 = b.conv("conv1", x, Conv::new(out, 3).pad(1));
    let r1 = b.bn_relu("bn1", c1);
    let c2 = b.conv("conv2", r1, Conv::new(out, 3).pad(1));
    b.bn_relu("bn2", c2)
}

/// Builds the network into `b` (input: batch x 3 x H x W, H and W multiples of 16) and its loss.
pub fn build(b: &mut Builder) {
    b.block("inc");
    let mut skips = vec![double_conv(b, Src::Input, 64)];
    for (i, channels) in [128, 256, 512, 1024].into_iter().enumerate() {
        b.block(format!("down{}", i + 1));
        let p = b.max_pool("maxpool", *skips.last().expect("inc"), 2, 2, 0);
        skips.push(double_conv(b, p, channels));
    }
    let mut x = skips.pop().expect("down4");
    for (i, channels) in [512, 256, 128, 64].into_iter().enumerate() {
        b.block(format!("up{}", i + 1));
        let u = b.conv_transpose("up", x, channels, 2);
        let skip = skips.pop().expect("one skip per level");
        let c = b.cat("cat", &[skip, u]);
        x = double_conv(b, c, channels);
    }
    b.block("outc");
    x = b.conv("", x, Conv::new(CLASSES, 1).bias());
    b.loss();
    b.cross_entropy("loss", x, 1, false);
}
