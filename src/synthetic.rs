//! Deterministic pseudo-random chains for tests, benchmarks and experiments.
//!
//! The generator is a fixed SplitMix64, so a seed names the same chain on every
//! machine and every version of remat.

use crate::chain::{Chain, Stage};

/// SplitMix64: tiny, fast, and good enough to draw test instances.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den < num
    }
}

/// A small chain of `len` stages with integer sizes in `0..=max_size` and
/// integer times in `0..=max_time`, zeros included: the instances the
/// optimality tests compare against exhaustive search. Overheads, gradients
/// that differ from outputs, and a non-trivial loss appear at random.
pub fn small_chain(rng: &mut Rng, len: usize, max_size: u64, max_time: u64) -> Chain {
    let stage = |rng: &mut Rng| {
        let output = rng.range(0, max_size);
        let mut s = Stage::simple(
            rng.range(0, max_time) as f64,
            rng.range(0, max_time) as f64,
            output,
            output + if rng.chance(2, 3) { rng.range(0, max_size) } else { 0 },
        );
        if rng.chance(1, 3) {
            s.gradient_size = rng.range(0, max_size);
        }
        if rng.chance(1, 2) {
            s.forward_overhead = rng.range(0, max_size);
        }
        if rng.chance(1, 2) {
            s.backward_overhead = rng.range(0, max_size);
        }
        s
    };
    let stages = (0..len).map(|_| stage(rng)).collect();
    let loss = if rng.chance(1, 2) { stage(rng) } else { Stage::zero_loss() };
    Chain::new(format!("small-{len}"), rng.range(0, max_size), stages, loss).expect("generated chains are valid")
}

/// A chain shaped like a real network of `len` blocks: activation sizes of a
/// few MiB that shrink and grow by stages, saved sizes 1-4x the output,
/// backward about twice the forward, workspace overheads.
pub fn network_like(seed: u64, len: usize) -> Chain {
    let mut rng = Rng::new(seed);
    let mib = 1u64 << 20;
    let stages = (0..len)
        .map(|i| {
            let level = 4 + (i * 4 / len.max(1)) as u64;
            let output = mib * rng.range(level, 2 * level);
            let forward = rng.range(50, 300) as f64 / 100.0;
            let mut s =
                Stage::simple(forward, forward * rng.range(15, 25) as f64 / 10.0, output, output * rng.range(1, 4));
            s.forward_overhead = mib * rng.range(0, 4);
            s.backward_overhead = mib * rng.range(0, 12);
            s
        })
        .collect();
    Chain::new(format!("network-like-{len}"), 8 * mib, stages, Stage::zero_loss()).expect("valid")
}
