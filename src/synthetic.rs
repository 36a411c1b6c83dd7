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

/// `chain` with a backward that frees part of what it saved before its peak
/// (`backward_frees`, anywhere in `0..=saved_size`) on about half of its
/// stages and options, the loss included: the instances that check every
/// solver takes f_b off `B^l`'s memory as the simulator does. O(L options).
pub fn with_frees(rng: &mut Rng, chain: &Chain) -> Chain {
    let mut stages = chain.stages().to_vec();
    let mut loss = chain.loss().clone();
    for s in stages.iter_mut().chain(std::iter::once(&mut loss)) {
        if rng.chance(1, 2) {
            s.backward_frees = rng.range(0, s.saved_size);
        }
        for o in &mut s.options {
            if rng.chance(1, 2) {
                o.backward_frees = rng.range(0, o.saved_size);
            }
        }
    }
    Chain::new(format!("{}-frees", chain.name()), chain.input_size(), stages, loss)
        .expect("frees within each saved size are valid")
}

/// `chain` with up to `max_options - 1` more recording options on each stage
/// (the loss keeps none), at random: a saved size between the output and the
/// stage's own `saved_size` (sometimes above it, an option no solver should
/// want), a recompute time in `0..=max_time` (one in four times negative,
/// down to `-backward_time`: faster than option 0), and overheads that differ from the
/// stage's half of the time. The instances the option-aware solvers are
/// checked against exhaustive search on. O(L max_options).
pub fn with_options(rng: &mut Rng, chain: &Chain, max_options: usize, max_time: u64) -> Chain {
    let mut stages = chain.stages().to_vec();
    for s in &mut stages {
        let more = rng.range(0, max_options.saturating_sub(1) as u64) as usize;
        for _ in 0..more {
            let top = if rng.chance(1, 6) { s.saved_size + 3 } else { s.saved_size };
            let saved_size = rng.range(s.output_size, top.max(s.output_size));
            s.options.push(crate::chain::StageOption {
                name: None,
                saved_size,
                // Now and then faster than option 0, as a compiled stage can be.
                recompute_time: if rng.chance(1, 4) {
                    -(rng.range(0, s.backward_time as u64) as f64)
                } else {
                    rng.range(0, max_time) as f64
                },
                forward_overhead: if rng.chance(1, 2) {
                    rng.range(0, s.forward_overhead + 3)
                } else {
                    s.forward_overhead
                },
                backward_overhead: if rng.chance(1, 2) {
                    rng.range(0, s.backward_overhead + 3)
                } else {
                    s.backward_overhead
                },
                backward_frees: 0,
            });
        }
    }
    Chain::new(format!("{}-options", chain.name()), chain.input_size(), stages, chain.loss().clone())
        .expect("options of a valid chain are valid")
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

/// A stack of repeated blocks built from `chain`: its first `head` stages,
/// then `copies` copies of the `block` stages that follow them, then its
/// last `tail` stages and its loss (the stages between are dropped). The
/// chains of issue 25: `stack(&gpt2_xl, 1, 1, 2, n)` is an embedding, n
/// transformer blocks, `ln_f` and the head. Stage names get the copy's
/// number. O(head + block x copies + tail).
///
/// # Example
/// ```
/// use remat::chain::{Chain, Stage};
/// let stages = (1..=5).map(|l| Stage::simple(l as f64, 1.0, 4, 8)).collect();
/// let chain = Chain::new("c", 4, stages, Stage::zero_loss()).unwrap();
/// let stacked = remat::synthetic::stack(&chain, 1, 2, 1, 10);
/// assert_eq!(stacked.len(), 1 + 2 * 10 + 1);
/// assert_eq!(stacked.forward_time(4), 2.0);
/// ```
pub fn stack(chain: &Chain, head: usize, block: usize, tail: usize, copies: usize) -> Chain {
    let all = chain.stages();
    assert!(head + block + tail <= all.len(), "stack: {head} + {block} + {tail} stages of {}", all.len());
    let mut stages = all[..head].to_vec();
    for copy in 0..copies {
        stages.extend(all[head..head + block].iter().map(|s| {
            let mut s = s.clone();
            s.name = Some(format!("{}#{copy}", s.name.as_deref().unwrap_or("block")));
            s
        }));
    }
    stages.extend_from_slice(&all[all.len() - tail..]);
    let name = format!("{}-stack{copies}", chain.name());
    Chain::new(name, chain.input_size(), stages, chain.loss().clone()).expect("the stages of a valid chain")
}

/// The figures of [`small_forward_graph`]'s nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figures {
    /// Every time and size 1, no overheads, an input of 0 bytes: instances
    /// small enough for exhaustive search at many nodes.
    Unit,
    /// Random times and outputs; each saved and gradient size equals the
    /// output, as for a layer that keeps only its output; no overheads.
    Plain,
    /// Random times and sizes (saved at least the output), an overhead of 1
    /// on a quarter of the forwards and of the backwards.
    Random,
}

/// A small forward graph of `nodes` nodes named `f0`, `f1`, ...: node v reads
/// `f{v-1}` and, with `skips`, for v > 1 also one earlier node half the
/// time (the skip connection comes first among its inputs). Forward times
/// are drawn in 1..=2, backward times in 1..=3, outputs in 1..=3, saved
/// sizes up to 2 above the output, gradients in 1..=3 and the input in
/// 0..=2, as `figures` says. The instances the graph solvers are checked on
/// against exhaustive search and the chain DP. O(nodes).
pub fn small_forward_graph(rng: &mut Rng, nodes: usize, skips: bool, figures: Figures) -> crate::graph::ForwardGraph {
    let mut stages = Vec::with_capacity(nodes);
    let mut inputs = Vec::with_capacity(nodes);
    for v in 0..nodes {
        let mut reads = Vec::new();
        if skips && v > 1 && rng.chance(1, 2) {
            reads.push(rng.range(0, v as u64 - 2) as usize);
        }
        if v > 0 {
            reads.push(v - 1);
        }
        inputs.push(reads);
        let mut stage = match figures {
            Figures::Unit => Stage::simple(1.0, 1.0, 1, 1),
            Figures::Plain | Figures::Random => {
                let (forward, backward, output) = (rng.range(1, 2), rng.range(1, 3), rng.range(1, 3));
                Stage::simple(forward as f64, backward as f64, output, output)
            }
        };
        if figures == Figures::Random {
            stage.saved_size += rng.range(0, 2);
            stage.gradient_size = rng.range(1, 3);
            let mut overhead = || if rng.chance(1, 4) { 1 } else { 0 };
            stage.forward_overhead = overhead();
            stage.backward_overhead = overhead();
        }
        stage.name = Some(format!("f{v}"));
        stages.push(stage);
    }
    let input = if figures == Figures::Unit { 0 } else { rng.range(0, 2) };
    crate::graph::ForwardGraph::new(format!("small-graph-{nodes}"), input, stages, inputs)
        .expect("generated graphs are valid: named, each node reading earlier ones, each used")
}
