//! Inception v3 (Szegedy et al. 2016) as in torchvision, without the auxiliary
//! classifier, sequentialized as Rotor's version (rotor/models/inception.py):
//! each `BasicConv2d` of the stem as two stages (`conv`, `bn`: BatchNorm +
//! ReLU), the two stem max pools, one stage per Inception module (`Mixed_5b`
//! to `Mixed_7c`, branches inside), then `avgpool`, `dropout`, `flatten`, `fc`.
//!
//! The auxiliary classifier reads `Mixed_6e`'s output and joins the loss, which
//! a chain cannot express; Rotor folds it and everything after `Mixed_6e` into
//! one stage. remat leaves it out (`aux_logits=False`).

use super::net::{Builder, Conv, Src};

/// `BasicConv2d` inside a module: a convolution and BatchNorm + ReLU.
fn basic(b: &mut Builder, name: &str, x: Src, c: Conv) -> Src {
    let y = b.conv(&format!("{name}.conv"), x, c);
    b.bn_relu(&format!("{name}.bn"), y)
}

/// `BasicConv2d` of the stem: two stages.
fn stem(b: &mut Builder, name: &str, x: Src, c: Conv) -> Src {
    b.block(format!("{name}.conv"));
    let y = b.conv("", x, c);
    b.block(format!("{name}.bn"));
    b.bn_relu("", y)
}

fn inception_a(b: &mut Builder, x: Src, pool_features: usize) -> Src {
    let b1 = basic(b, "branch1x1", x, Conv::new(64, 1));
    let b5 = basic(b, "branch5x5_1", x, Conv::new(48, 1));
    let b5 = basic(b, "branch5x5_2", b5, Conv::new(64, 5).pad(2));
    let b3 = basic(b, "branch3x3dbl_1", x, Conv::new(64, 1));
    let b3 = basic(b, "branch3x3dbl_2", b3, Conv::new(96, 3).pad(1));
    let b3 = basic(b, "branch3x3dbl_3", b3, Conv::new(96, 3).pad(1));
    let p = b.avg_pool("branch_pool.avg_pool", x, 3, 1, 1);
    let p = basic(b, "branch_pool", p, Conv::new(pool_features, 1));
    b.cat("cat", &[b1, b5, b3, p])
}

fn inception_b(b: &mut Builder, x: Src) -> Src {
    let b3 = basic(b, "branch3x3", x, Conv::new(384, 3).stride(2));
    let bd = basic(b, "branch3x3dbl_1", x, Conv::new(64, 1));
    let bd = basic(b, "branch3x3dbl_2", bd, Conv::new(96, 3).pad(1));
    let bd = basic(b, "branch3x3dbl_3", bd, Conv::new(96, 3).stride(2));
    let p = b.max_pool("branch_pool", x, 3, 2, 0);
    b.cat("cat", &[b3, bd, p])
}

fn inception_c(b: &mut Builder, x: Src, c7: usize) -> Src {
    let b1 = basic(b, "branch1x1", x, Conv::new(192, 1));
    let b7 = basic(b, "branch7x7_1", x, Conv::new(c7, 1));
    let b7 = basic(b, "branch7x7_2", b7, Conv::rect(c7, 1, 7).pad2(0, 3));
    let b7 = basic(b, "branch7x7_3", b7, Conv::rect(192, 7, 1).pad2(3, 0));
    let bd = basic(b, "branch7x7dbl_1", x, Conv::new(c7, 1));
    let bd = basic(b, "branch7x7dbl_2", bd, Conv::rect(c7, 7, 1).pad2(3, 0));
    let bd = basic(b, "branch7x7dbl_3", bd, Conv::rect(c7, 1, 7).pad2(0, 3));
    let bd = basic(b, "branch7x7dbl_4", bd, Conv::rect(c7, 7, 1).pad2(3, 0));
    let bd = basic(b, "branch7x7dbl_5", bd, Conv::rect(192, 1, 7).pad2(0, 3));
    let p = b.avg_pool("branch_pool.avg_pool", x, 3, 1, 1);
    let p = basic(b, "branch_pool", p, Conv::new(192, 1));
    b.cat("cat", &[b1, b7, bd, p])
}

fn inception_d(b: &mut Builder, x: Src) -> Src {
    let b3 = basic(b, "branch3x3_1", x, Conv::new(192, 1));
    let b3 = basic(b, "branch3x3_2", b3, Conv::new(320, 3).stride(2));
    let b7 = basic(b, "branch7x7x3_1", x, Conv::new(192, 1));
    let b7 = basic(b, "branch7x7x3_2", b7, Conv::rect(192, 1, 7).pad2(0, 3));
    let b7 = basic(b, "branch7x7x3_3", b7, Conv::rect(192, 7, 1).pad2(3, 0));
    let b7 = basic(b, "branch7x7x3_4", b7, Conv::new(192, 3).stride(2));
    let p = b.max_pool("branch_pool", x, 3, 2, 0);
    b.cat("cat", &[b3, b7, p])
}

fn inception_e(b: &mut Builder, x: Src) -> Src {
    let b1 = basic(b, "branch1x1", x, Conv::new(320, 1));
    let b3 = basic(b, "branch3x3_1", x, Conv::new(384, 1));
    let b3a = basic(b, "branch3x3_2a", b3, Conv::rect(384, 1, 3).pad2(0, 1));
    let b3b = basic(b, "branch3x3_2b", b3, Conv::rect(384, 3, 1).pad2(1, 0));
    let b3 = b.cat("branch3x3.cat", &[b3a, b3b]);
    let bd = basic(b, "branch3x3dbl_1", x, Conv::new(448, 1));
    let bd = basic(b, "branch3x3dbl_2", bd, Conv::new(384, 3).pad(1));
    let bda = basic(b, "branch3x3dbl_3a", bd, Conv::rect(384, 1, 3).pad2(0, 1));
    let bdb = basic(b, "branch3x3dbl_3b", bd, Conv::rect(384, 3, 1).pad2(1, 0));
    let bd = b.cat("branch3x3dbl.cat", &[bda, bdb]);
    let p = b.avg_pool("branch_pool.avg_pool", x, 3, 1, 1);
    let p = basic(b, "branch_pool", p, Conv::new(192, 1));
    b.cat("cat", &[b1, b3, bd, p])
}

/// Builds the network into `b` (input: batch x 3 x H x W, 299 in the paper) and its loss.
pub fn build(b: &mut Builder) {
    let mut x = stem(b, "Conv2d_1a_3x3", Src::Input, Conv::new(32, 3).stride(2));
    x = stem(b, "Conv2d_2a_3x3", x, Conv::new(32, 3));
    x = stem(b, "Conv2d_2b_3x3", x, Conv::new(64, 3).pad(1));
    b.block("maxpool1");
    x = b.max_pool("", x, 3, 2, 0);
    x = stem(b, "Conv2d_3b_1x1", x, Conv::new(80, 1));
    x = stem(b, "Conv2d_4a_3x3", x, Conv::new(192, 3));
    b.block("maxpool2");
    x = b.max_pool("", x, 3, 2, 0);
    for (name, pool) in [("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)] {
        b.block(name);
        x = inception_a(b, x, pool);
    }
    b.block("Mixed_6a");
    x = inception_b(b, x);
    for (name, c7) in [("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)] {
        b.block(name);
        x = inception_c(b, x, c7);
    }
    b.block("Mixed_7a");
    x = inception_d(b, x);
    for name in ["Mixed_7b", "Mixed_7c"] {
        b.block(name);
        x = inception_e(b, x);
    }
    b.block("avgpool");
    x = b.adaptive_avg_pool("", x, 1, 1);
    b.block("dropout");
    x = b.dropout("", x);
    b.block("flatten");
    x = b.flatten("", x);
    b.logits_and_loss("fc", x, 1000);
}
