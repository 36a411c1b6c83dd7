//! Graph schedules lifted from the chain DP of the sequentialized network.
//!
//! A forward graph in topological order is cut into *blocks* (consecutive
//! node ranges) at positions where few values cross the cut (one tensor
//! between the blocks of a ResNet, an Inception module or a transformer
//! layer). The blocks form a chain ([`block_chain`]): a block's times are the
//! sums of its nodes', its output `a^b` is every value crossing the cut after
//! it, its recorded data `abar^b` every value it computes plus what passes
//! through it, its gradient `delta^b` every gradient node that a node at or
//! before the cut still needs. Where several values cross a cut all of them
//! are counted (a value that passes several cuts is counted at each), so the
//! chain over-counts memory.
//!
//! The chain DP ([`crate::solve::solve`], persistent) solves the block chain;
//! its schedule is translated into `compute` operations on the Checkmate graph
//! ([`translate`]): a forward of block b computes the block's nodes in order,
//! a backward computes their gradient nodes in reverse, `B^{L+1}` the
//! `loss-grad` node. Frees are placed by liveness ([`with_frees`]): each copy
//! of a value is freed right after the last operation that reads it before
//! the value is computed again. Because the first forward pass of every
//! chain schedule computes every block in order, every read is preceded by a
//! compute, so the translation of *any* chain schedule is a valid graph
//! schedule, with the chain's makespan (each chain operation costs what its
//! computes cost).
//!
//! The chain model and the Checkmate graph's accounting differ (the network
//! input stays resident, values live until their last reader, the chain
//! over-counts shared values), so the replayed peak is not the chain's: the
//! chain budget is bisected for the largest one whose lifted schedule the
//! graph simulator replays within the graph budget, and the replayed makespan
//! is what counts. Several cut sets are tried (at most one, two or three
//! values crossing, or every position), and the fastest replay is kept.
//!
//! For a path with `saved_size = output_size` the block chain of the finest
//! cut set is the path's own chain, and the translation of a chain schedule
//! has its makespan and at most its peak (see the tests).

use std::num::NonZeroUsize;
use std::time::Instant;

use crate::chain::{Chain, Stage};
use crate::graph::backward::backward_index;
use crate::graph::milp;
use crate::graph::simulate::{GraphReplay, simulate};
use crate::graph::staged::Staged;
use crate::graph::{CheckmateGraph, ForwardGraph, GraphOp};
use crate::schedule::Op;
use crate::solve::{Algorithm, SolveOptions};

/// The most blocks a block chain has: finer cut sets are coarsened to this
/// many (the persistent DP costs about L^3 / 6 x slots steps, and it runs a
/// dozen times a cut set).
pub const MAX_BLOCKS: usize = 80;

/// Memory slots of the chain DP in the lift (fewer than a chain solve's 500:
/// the replay, not the slot rounding, decides what fits).
pub const SLOTS: usize = 200;

/// Bisection steps on the chain budget per cut set.
const BISECTION_STEPS: usize = 12;

/// A lifted schedule that fits the graph budget.
#[derive(Clone, Debug)]
pub struct Lifted {
    /// The operations on the Checkmate graph (computes and frees).
    pub ops: Vec<GraphOp>,
    /// Their replay (peak within the budget).
    pub replay: GraphReplay,
    /// How many blocks the chain had.
    pub blocks: usize,
    /// The chain budget whose DP schedule this is.
    pub chain_budget: u64,
    /// The cut set (`at most 1 value crossing`, ...).
    pub cuts: String,
    /// Seconds spent lifting.
    pub seconds: f64,
}

/// No lifted schedule fits the budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoLift {
    /// The lowest replayed peak of any lifted schedule tried (a budget at
    /// which a lifted schedule exists), when one was tried.
    pub lowest_peak: Option<u64>,
}

/// For each forward node `u`, the last forward node reading it (`u` itself
/// for the output). O(n + |E|).
fn last_readers(forward: &ForwardGraph) -> Vec<usize> {
    (0..forward.len()).map(|u| forward.users(u).last().copied().unwrap_or(u)).collect()
}

/// How many values cross the cut after node `k`, for each `k < n - 1`: the
/// nodes `u <= k` read by a node after `k`. O(n + |E|).
pub fn crossing_counts(forward: &ForwardGraph) -> Vec<usize> {
    let n = forward.len();
    let last = last_readers(forward);
    let mut diff = vec![0i64; n + 1];
    for (u, &l) in last.iter().enumerate() {
        if l > u {
            diff[u] += 1;
            diff[l] -= 1;
        }
    }
    let mut out = Vec::with_capacity(n.saturating_sub(1));
    let mut running = 0i64;
    for d in diff.iter().take(n.saturating_sub(1)) {
        running += d;
        out.push(running as usize);
    }
    out
}

/// The cut positions (block ends, the last node always one) where at most
/// `max_crossing` values cross, coarsened to at most [`MAX_BLOCKS`] blocks
/// by keeping a cut only once the block since the previous cut has about
/// `n / MAX_BLOCKS` nodes. O(n).
pub fn cuts(counts: &[usize], n: usize, max_crossing: usize) -> Vec<usize> {
    let candidates: Vec<usize> = (0..n.saturating_sub(1)).filter(|&k| counts[k] <= max_crossing).collect();
    let spacing = if candidates.len() + 1 > MAX_BLOCKS { n.div_ceil(MAX_BLOCKS) } else { 1 };
    let mut out = Vec::new();
    let mut start = 0;
    for k in candidates {
        if k + 1 - start >= spacing {
            out.push(k);
            start = k + 1;
        }
    }
    out.push(n - 1);
    out
}

/// Sum of sizes, None on overflow.
fn sum(it: impl Iterator<Item = u64>) -> Option<u64> {
    it.into_iter().try_fold(0u64, u64::checked_add)
}

/// The chain of blocks ending at `ends` (see the module documentation), or
/// None when a figure overflows. With `passing`, a value that crosses a
/// block without being made there (a skip connection) is counted in the
/// block's output and recorded data (the chain over-counts); without, only
/// values the block makes are (the chain under-counts skips). Either way the
/// lifted schedule is replayed, so both are safe; each fits other budgets
/// better. O(blocks x (n + |E|)).
pub fn block_chain(forward: &ForwardGraph, graph: &CheckmateGraph, ends: &[usize], passing: bool) -> Option<Chain> {
    let n = forward.len();
    let last = last_readers(forward);
    let size = |v: usize| graph.node(v).size;
    let mut stages = Vec::with_capacity(ends.len());
    let mut start = 0;
    for (b, &end) in ends.iter().enumerate() {
        let nodes = start..=end;
        let f = |v: usize| forward.stage(v);
        let forward_time: f64 = nodes.clone().map(|v| f(v).forward_time).sum();
        let backward_time: f64 = nodes.clone().map(|v| f(v).backward_time).sum();
        // a^b: every value crossing the cut after `end` (after the last
        // block, the network's output, which the loss reads).
        let crossing = |u: usize| u <= end && (last[u] > end || u == n - 1);
        let first = if passing { 0 } else { start };
        let output = sum((first..=end).filter(|&u| crossing(u)).map(size))?;
        let through = sum((first..start).filter(|&u| crossing(u)).map(size))?;
        let saved = sum(nodes.clone().map(size))?.checked_add(through)?;
        // delta^b: gradient nodes of later nodes that read a node up to `end`
        // (the loss gradient after the last block).
        let gradient = if b + 1 == ends.len() {
            graph.node(n).size
        } else {
            sum((end + 1..n)
                .filter(|&w| forward.inputs(w).iter().any(|&u| u <= end))
                .map(|w| size(backward_index(n, w))))?
        };
        // Gradients made and consumed inside the block: transient to the chain.
        let internal = sum(nodes
            .clone()
            .filter(|&v| {
                let ins = forward.inputs(v);
                !ins.is_empty() && ins.iter().all(|&u| u >= start)
            })
            .map(|v| size(backward_index(n, v))))?;
        let forward_overhead = nodes.clone().map(|v| f(v).forward_overhead).max().unwrap_or(0);
        let backward_overhead =
            nodes.clone().map(|v| f(v).backward_overhead).max().unwrap_or(0).checked_add(internal)?;
        stages.push(Stage {
            name: Some(format!("{}..{}", forward.node_name(start), forward.node_name(end))),
            forward_time,
            backward_time,
            output_size: output,
            saved_size: saved.max(output),
            gradient_size: gradient,
            forward_overhead,
            recording_overhead: None,
            backward_overhead,
            backward_frees: 0,
            options: Vec::new(),
        });
        start = end + 1;
    }
    Chain::new(forward.name(), forward.input_size(), stages, Stage::zero_loss()).ok()
}

/// The Checkmate-graph computes of a chain schedule over the blocks ending at
/// `ends` (module documentation). O(operations x block size).
pub fn translate(n: usize, ends: &[usize], ops: &[Op]) -> Vec<usize> {
    let blocks = ends.len();
    let range = |l: usize| {
        let start = if l == 1 { 0 } else { ends[l - 2] + 1 };
        start..=ends[l - 1]
    };
    let mut out = Vec::new();
    for &op in ops {
        match op {
            Op::FAll(l, _) | Op::FCk(l) | Op::FNone(l) if l <= blocks => out.extend(range(l)),
            Op::B(l) if l == blocks + 1 => out.push(n),
            Op::B(l) if l <= blocks => out.extend(range(l).rev().map(|v| backward_index(n, v))),
            _ => {} // the zero loss's forward
        }
    }
    out
}

/// Adds frees to a sequence of computes: each copy of a value is freed right
/// after the last compute reading it before the value is computed again (a
/// copy nothing reads right after it is made); the last node's final copy is
/// kept. The memory-minimal frees for these computes. O(computes + reads).
pub fn with_frees(graph: &CheckmateGraph, computes: &[usize]) -> Vec<GraphOp> {
    let n = graph.len();
    let mut copy_of = vec![usize::MAX; n];
    let mut last_read: Vec<usize> = (0..computes.len()).collect();
    for (p, &v) in computes.iter().enumerate() {
        for &u in &graph.node(v).inputs {
            if copy_of[u] != usize::MAX {
                last_read[copy_of[u]] = p;
            }
        }
        copy_of[v] = p;
    }
    let mut frees_after: Vec<Vec<usize>> = vec![Vec::new(); computes.len()];
    for (p, &v) in computes.iter().enumerate() {
        if v == n - 1 && copy_of[v] == p {
            continue;
        }
        frees_after[last_read[p]].push(v);
    }
    let mut ops = Vec::with_capacity(2 * computes.len());
    for (p, &v) in computes.iter().enumerate() {
        ops.push(GraphOp::Compute(v));
        ops.extend(frees_after[p].iter().map(|&u| GraphOp::Free(u)));
    }
    ops
}

/// The staged (R, S) form of a schedule whose first computes come in node
/// order (as a lifted one's do): stage t holds what is resident when the
/// first compute of t-1 and its frees are done, and computes the recomputes
/// that follow, then t. None when a stage would compute a node twice or out
/// of order (no staged form). The MILP's warm start. O(operations + n^2).
pub fn staged_form(graph: &CheckmateGraph, ops: &[GraphOp]) -> Option<Staged> {
    let n = graph.len();
    let mut staged = Staged::frontier(n);
    let mut resident = vec![false; n];
    let mut stage = 0; // the stage in progress: the next node computed for the first time
    let mut last_in_stage: Option<usize> = None;
    let mut open = true; // the stage's S row is not taken yet
    for &op in ops {
        match op {
            GraphOp::Compute(v) => {
                if open {
                    staged.s[stage][..stage].copy_from_slice(&resident[..stage]);
                    open = false;
                }
                if last_in_stage.is_some_and(|l| l >= v) || v > stage {
                    return None;
                }
                last_in_stage = Some(v);
                resident[v] = true;
                if v == stage {
                    stage += 1;
                    last_in_stage = None;
                    open = true;
                    if stage == n {
                        break;
                    }
                } else {
                    staged.r[stage][v] = true;
                }
            }
            GraphOp::Free(v) => resident[v] = false,
        }
    }
    (stage == n).then_some(staged)
}

/// The fastest lifted schedule of `forward` (whose Checkmate graph is `graph`)
/// within `budget` bytes, over the cut sets and chain budgets tried, stopping
/// at `deadline` with the best so far. Deterministic when no deadline stops
/// it. Each chain solve is `solve -a persistent` on at most [`MAX_BLOCKS`]
/// blocks (exact in bytes where its fronts fit, else the DP at [`SLOTS`]
/// slots), about a dozen per cut set, each followed by an O(ops) replay.
pub fn lift(
    forward: &ForwardGraph,
    graph: &CheckmateGraph,
    budget: u64,
    deadline: Option<Instant>,
) -> Result<Lifted, NoLift> {
    let start = Instant::now();
    let n = forward.len();
    let counts = crossing_counts(forward);
    let mut sets: Vec<(String, Vec<usize>)> = Vec::new();
    for (label, max) in [
        ("at most 1 value crossing", 1),
        ("at most 2 values crossing", 2),
        ("at most 3 values crossing", 3),
        ("every position", usize::MAX),
    ] {
        let ends = cuts(&counts, n, max);
        if !sets.iter().any(|(_, e)| *e == ends) {
            sets.push((label.to_string(), ends));
        }
    }
    let mut best: Option<Lifted> = None;
    let mut lowest_peak: Option<u64> = None;
    let mut chains: Vec<(String, &Vec<usize>, Chain)> = Vec::new();
    for (label, ends) in &sets {
        for passing in [true, false] {
            let Some(chain) = block_chain(forward, graph, ends, passing) else { continue };
            if !chains.iter().any(|(_, e, c)| *e == ends && c.stages() == chain.stages()) {
                let how = if passing { "skips counted at every cut" } else { "skips counted once" };
                chains.push((format!("{label}, {how}"), ends, chain));
            }
        }
    }
    for (label, ends, chain) in &chains {
        let ends: &[usize] = ends;
        if milp::passed(deadline) {
            break;
        }
        // The replayed schedule at chain budget `m`, if the chain DP has one.
        let mut attempt = |m: u64| -> Option<(Vec<GraphOp>, GraphReplay)> {
            // At most one slot a byte (exact below SLOTS bytes).
            let slots = NonZeroUsize::new(SLOTS.min(usize::try_from(m).unwrap_or(usize::MAX)))?;
            let opts = SolveOptions { slots, ..SolveOptions::default() };
            let solution = crate::solve::solve(chain, m, Algorithm::Persistent, &opts).ok()?;
            let ops = with_frees(graph, &translate(n, ends, &solution.schedule.operations));
            let replay = simulate(graph, &ops).ok()?;
            lowest_peak = Some(lowest_peak.map_or(replay.peak_memory, |p| p.min(replay.peak_memory)));
            Some((ops, replay))
        };
        let consider = |m: u64, found: Option<(Vec<GraphOp>, GraphReplay)>, best: &mut Option<Lifted>| -> bool {
            let Some((ops, replay)) = found else { return false };
            if replay.peak_memory > budget {
                return false;
            }
            if best.as_ref().is_none_or(|b| replay.makespan < b.replay.makespan) {
                *best = Some(Lifted {
                    ops,
                    replay,
                    blocks: ends.len(),
                    chain_budget: m,
                    cuts: label.clone(),
                    seconds: 0.0,
                });
            }
            true
        };
        // Everything the chain holds, counted twice (the input and its
        // gradient, every recorded value, output and gradient, every
        // transient): the store-all schedule fits this chain budget.
        let top = chain
            .stages()
            .iter()
            .try_fold(chain.input_size(), |acc, s| {
                acc.checked_add(s.saved_size)?
                    .checked_add(s.output_size)?
                    .checked_add(s.gradient_size)?
                    .checked_add(s.forward_overhead)?
                    .checked_add(s.backward_overhead)
            })
            .and_then(|sum| sum.checked_mul(2))
            .unwrap_or(u64::MAX / 2);
        let found = attempt(top);
        if consider(top, found, &mut best) {
            continue; // no recomputation needed: nothing beats it in this set
        }
        // The chain over-counts memory, so the chain budget that fits may be
        // above the graph budget as well as below it: start from the graph
        // budget and bisect within [0, top].
        let m = budget.min(top);
        let found = attempt(m);
        let solved = found.is_some();
        let (mut lo, mut hi) = if consider(m, found, &mut best) || !solved { (m, top) } else { (0, m) };
        // Invariant: `lo` fits or is too low for the chain DP, `hi` does not
        // fit; bisect for the largest chain budget that fits, keeping the
        // fastest replay seen.
        for _ in 0..BISECTION_STEPS {
            if hi - lo <= 1.max(hi / 200) || milp::passed(deadline) {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            let found = attempt(mid);
            let solved = found.is_some();
            if consider(mid, found, &mut best) {
                lo = mid;
            } else if solved {
                hi = mid;
            } else {
                lo = mid; // the chain DP has nothing this low
            }
        }
    }
    match best {
        Some(mut b) => {
            b.seconds = start.elapsed().as_secs_f64();
            Ok(b)
        }
        None => Err(NoLift { lowest_peak }),
    }
}
