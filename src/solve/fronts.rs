//! The persistent dynamic program exact in bytes: every table cell is a
//! step function of memory (a Pareto front of (bytes, time)), not an array
//! over rounded slots.
//!
//! C(s, t, m) is the persistent recurrence of [`super::persistent`] (Rotor's
//! Algorithms 3 and 4 with the model's corrections): the fastest persistent
//! way to turn {a^{s-1}, delta^t} into {delta^{s-1}} with at most m bytes
//! besides a^{s-1}. As a function of m it is non-increasing and piecewise
//! constant, so it is stored as its breakpoints: points (m_0, c_0), (m_1,
//! c_1), ... with m increasing and c strictly decreasing, C(s, t, x) = c_i for
//! the last m_i <= x, infinite below m_0.
//!
//! # Exactness
//! Claim: the front of (s, t) equals C(s, t, .) of the slot DP with one-byte
//! slots (exact sizes, so the true persistent optimum) at every x up to the
//! cell's cap, with the same `f64` values bit for bit. By induction on t - s:
//! - s = t: one point, at the memory of F_all^s and B^s.
//! - s < t: each candidate of the recurrence is a function of m built from
//!   sub-chains of shorter length, whose fronts are exact by induction. The
//!   F_all candidate u_f^s + u_b^s + C(s+1, t, m - w_abar^s) changes value only
//!   at its threshold and where C(s+1, t, .) does, shifted by w_abar^s; the
//!   split candidate fwd + C(j+1, t, m - w_a^j) + C(s, j, m) only at its
//!   threshold, at the shifted breakpoints of its right part and at the
//!   breakpoints of its left part. So evaluating each candidate at that finite
//!   set of points (in the same float order as the slot DP, `(fwd + right) +
//!   left`) gives it exactly, as a step function. The minimum of step
//!   functions changes value only at their breakpoints, and the merge keeps,
//!   in increasing m, each point that is strictly below everything before it:
//!   the lower envelope exactly. The minimum of floats does not depend on the
//!   order it is taken in, so the values are the slot DP's.
//! - Pruning never drops a point of the envelope: a candidate is at least
//!   `fwd + min right + min left` (float addition is monotone), so it is
//!   skipped only over the memory where the envelope is already at or below
//!   that bound, and there min(envelope, candidate) = envelope.
//! - Recording options (issue 24, the recurrence and its proof in
//!   [`super::persistent`]): the leaf is the lower envelope of its options'
//!   one-point fronts (need_o, u_f^s + (u_b^s + r^s\[o\])), and the F_all
//!   branch is one candidate per option o, u_f^s + (u_b^s + r^s\[o\]) +
//!   C(s+1, t, m - w_abar^s\[o\]) from its own threshold, each a step function
//!   built as above (shifted by w_abar^s\[o\]); option 0's is written first,
//!   the others merged into it by their exact lower envelope (every value one
//!   of the two's, each point kept strictly below the one before), before the
//!   splits. So the front is still the minimum of all candidates, evaluated
//!   at all their breakpoints with the slot DP's float sums. The caps below
//!   still hold: a recorded abar^{s-1}\[o\] is at least w_a^{s-1} (validation
//!   raises a smaller saved size to the output), and so do the limits of
//!   [`Fronts::build_bounded`]: B^s with any option takes at least u_b^s.
//!   Cost: one more candidate per option of s, O(k K) for k options.
//! - Caps: the whole chain is asked at m = M - w_a^0 only, and any (s, t) with
//!   s > 1 is asked at most at M - w_a^0 - w_a^{s-1} (a^0 and a^{s-1} are both
//!   held while it runs; a recorded abar^{s-1} is larger). Points above a
//!   cell's cap are never read, so they are not stored.
//!
//! The schedule is read back as in [`super::persistent`]: at each cell, the
//! first candidate (F_all, then splits in increasing order) whose value equals
//! the cell's, so for a budget of M bytes it is the schedule the slot DP at
//! S = M slots returns, operation for operation.
//!
//! # Cost
//! Time O(K L^3) for fronts of at most K points and memory 16 bytes per
//! point, O(K L^2). K is the number of budgets below the cell's cap at which
//! the sub-chain's optimum changes; unlike the slot DP's it does not grow with
//! the budget in bytes, but it is not small on long chains: fronts grow about
//! linearly with the sub-chain's length (ResNet-1001: 24 points on average
//! at 10 stages, 720 at 100, 1,200 at 150). Measured with
//! `examples/exact_vs_slots.rs` (every chain of `chains/` at 1/2, 1/3 and 1/5
//! of store-all's peak, on a loaded 2-core machine):
//! - transformers and ResNets of up to 72 stages: 0.1 to 4.4 MiB of fronts
//!   in 0.01 to 0.3 s, less memory than the 500-slot table, a time between
//!   the 500-slot and the 8,000-slot DP's;
//! - DenseNet-121 and -201 (74 and 114 stages): 8 to 56 MiB and 0.2 to 7 s,
//!   more than the 500-slot table (8 to 23 MiB) and 10 to 40 times its time;
//! - ResNet-1001 and network-like chains of 339 stages: gigabytes (the
//!   network-like one, 86 million points, 1.4 GB, about 280 s against 6 s at
//!   500 slots), so [`Fronts::build_within`] gives up and the caller falls
//!   back to the slot DP (`solve::exact` decides, for `solve`).
//!
//! Repeated stages (issue 25): sub-chains that hold the same stages have the
//! same front, so each distinct one is built once
//! ([`crate::solve::distinct`]; the proof that answers are unchanged is at
//! `Fronts::build_keyed`). On a stack of N identical blocks about 5 L of the
//! L^2 / 2 sub-chains are distinct, so time falls to O(K L^2) and memory to
//! O(K L) plus 4 bytes a cell: GPT-2 XL stacks at a third of store-all take
//! 0.06 s at N = 100 (0.37 s plain) and 0.5 s at N = 200 (5 s plain), but
//! their fronts keep growing with length (8,000 points on average at N =
//! 1,000: 40 million points, 0.64 GB, about 2 to 3 minutes), which the
//! default work limit ([`Fronts::build_guarded`]) refuses.
//!
//! Given the makespan of some schedule at the budget (a baseline's, or the
//! floating table's), [`Fronts::build_bounded`] drops the points that cannot
//! lead to a faster one. A modest saving: with the 500-slot DP's makespan as
//! the ceiling, network-like L = 100 and DenseNet-121 at 1/2, 1/3 and 1/5 of
//! store-all keep 67 to 99% of their points, with the same answers.

use rayon::prelude::*;
use thiserror::Error;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{ForwardSplit, SlotChain, Slots};
use crate::solve::distinct::Distinct;

const INF: f64 = f64::INFINITY;

/// A breakpoint: from `m` bytes on, the value is `c` (until the next point).
type Point = (usize, f64);

/// C(s, t, .) as a step function (see the module documentation). Empty when
/// the sub-chain does not fit below its cap.
#[derive(Clone, Debug, Default)]
struct Front(Box<[Point]>);

impl Front {
    /// The smallest m with a finite value (`usize::MAX` if none).
    fn lo(&self) -> usize {
        self.0.first().map_or(usize::MAX, |p| p.0)
    }

    /// The smallest value (at the largest m).
    fn tail(&self) -> f64 {
        self.0.last().map_or(INF, |p| p.1)
    }

    /// Index of the step holding `x`, for `x >= lo()`. O(log K).
    fn step(&self, x: usize) -> usize {
        self.0.partition_point(|p| p.0 <= x) - 1
    }

    /// C(s, t, x). O(log K).
    fn get(&self, x: usize) -> f64 {
        match self.0.partition_point(|p| p.0 <= x) {
            0 => INF,
            i => self.0[i - 1].1,
        }
    }
}

/// Why [`Fronts::build_within`] gave up: the fronts outgrew the memory
/// allowed.
#[derive(Clone, Debug, Error, PartialEq)]
#[error(
    "the exact fronts of this {stages}-stage chain {} ({bytes} bytes after sub-chains of {done} stages)",
    match work {
        Some(w) => format!("are projected to take {w:.1e} point-steps, over the {max_work:.1e} allowed"),
        None if *projected => format!("are projected to exceed the {limit} bytes allowed"),
        None => format!("exceed the {limit} bytes allowed"),
    }
)]
pub struct FrontsTooLarge {
    /// The limit given.
    pub limit: u64,
    /// Bytes the fronts took when it gave up.
    pub bytes: u64,
    /// True when it gave up on the projection, before reaching the limit.
    pub projected: bool,
    /// Stages of the chain.
    pub stages: usize,
    /// Sub-chains of up to this many stages (plus one) were done.
    pub done: usize,
    /// When it gave up on time rather than memory: the work projected
    /// (see [`Fronts::build_guarded`]).
    pub work: Option<f64>,
    /// The work allowed.
    pub max_work: f64,
}

/// Per-thread buffers of [`Fronts::fill`].
#[derive(Default)]
struct Scratch {
    env: Vec<Point>,
    merged: Vec<Point>,
    /// One F_all option's candidate, before it is merged into `env`.
    option: Vec<Point>,
}

/// Writes the lower envelope of the fronts `a` and `b` (points by increasing
/// m, values strictly decreasing) into `out`, itself such a front: at each
/// breakpoint of either, the smaller of their two values, kept when strictly
/// below the point before. Exact: every value is one of theirs. O(|a| + |b|).
fn merge_min(a: &[Point], b: &[Point], out: &mut Vec<Point>) {
    out.clear();
    let (mut i, mut k) = (0, 0);
    let (mut va, mut vb) = (INF, INF);
    while i < a.len() || k < b.len() {
        let m = a.get(i).map_or(usize::MAX, |p| p.0).min(b.get(k).map_or(usize::MAX, |p| p.0));
        if a.get(i).is_some_and(|p| p.0 == m) {
            va = a[i].1;
            i += 1;
        }
        if b.get(k).is_some_and(|p| p.0 == m) {
            vb = b[k].1;
            k += 1;
        }
        let c = if vb < va { vb } else { va };
        if out.last().is_none_or(|p| c < p.1) {
            out.push((m, c));
        }
    }
}

/// The filled exact table for one chain, answering every budget up to the one
/// it was built for.
pub struct Fronts {
    /// The chain's figures in one-byte slots (exact).
    sc: SlotChain,
    /// The largest m the whole chain is asked at: the budget less w_a^0.
    cap: usize,
    /// The sub-chains keyed by content: (s, t)'s front is `fronts[id(s, t)]`.
    distinct: Distinct,
    /// The front of each distinct sub-chain.
    fronts: Vec<Front>,
    /// The largest m each distinct sub-chain is read at: the largest of its
    /// occurrences' caps (see [`Fronts::cell_cap`]).
    caps: Vec<usize>,
    /// The largest value a point of each distinct sub-chain keeps: the
    /// largest of its occurrences' limits (see [`Fronts::limit`]).
    limits: Vec<f64>,
    /// A makespan some schedule of the whole chain reaches at the budget
    /// (infinite when none is known): points that cannot lead to a schedule
    /// as fast are dropped (see [`Fronts::build_bounded`]).
    ceiling: f64,
    /// `done[l]` = the sum of u_f^i + u_b^i for i <= l.
    done: Vec<f64>,
    /// Point-steps spent (see [`Fronts::build_guarded`]).
    work: f64,
}

impl Fronts {
    fn front(&self, s: usize, t: usize) -> &Front {
        &self.fronts[self.distinct.id(s, t)]
    }

    /// The largest m at which (s, t) is ever read (see the module doc).
    fn cell_cap(&self, s: usize) -> usize {
        if s == 1 { self.cap } else { self.cap.saturating_sub(self.sc.output[s - 1]) }
    }

    /// Builds the fronts of `chain` for budgets up to `budget` bytes, with no
    /// limit on their size (see [`Fronts::build_within`]).
    pub fn build(chain: &Chain, budget: u64) -> Fronts {
        match Fronts::build_within(chain, budget, u64::MAX) {
            Ok(table) => table,
            Err(e) => unreachable!("no limit: {e}"),
        }
    }

    /// Builds the fronts of `chain` for budgets up to `budget` bytes, or
    /// gives up once they take, or are projected to take, more than
    /// `max_bytes` (then the caller can fall back to the slot DP).
    ///
    /// Cells are filled by diagonals t - s = 0, 1, ..., the cells of one
    /// diagonal in parallel (rayon); each reads only shorter sub-chains. Time
    /// O(K L^3), memory O(K L^2) for fronts of at most K points.
    ///
    /// The projection: fronts measured on real chains grow about linearly
    /// with the sub-chain's length or faster (ResNet-1001: 2.4 points per
    /// stage of length on average at 10 stages, 7.2 at 100, 8 at 150), so
    /// after each diagonal d the fronts still to come are estimated as that
    /// diagonal's average per stage of length times the sum of (L - e) e over
    /// the diagonals e > d, and it gives up as soon as that estimate exceeds
    /// the limit (rather than seconds later, when the limit is reached). It
    /// only decides when to give up; a table that is returned is exact.
    pub fn build_within(chain: &Chain, budget: u64, max_bytes: u64) -> Result<Fronts, FrontsTooLarge> {
        Fronts::build_bounded(chain, budget, max_bytes, INF)
    }

    /// [`Fronts::build_within`] answering only at `budget` itself, given
    /// `ceiling`, the makespan of some schedule that fits it (infinite when
    /// none is known): the makespan and schedule at `budget` are the same,
    /// and smaller budgets may be answered slower or not at all.
    ///
    /// Why it is exact: every schedule of the whole chain runs each stage's
    /// forward and backward at least once, so one that runs sub-chain
    /// (s, t) in time c takes at least c + R(s, t), R being the sum of
    /// u_f + u_b over the stages outside (s, t). A point of (s, t)'s front
    /// with c > ceiling - R(s, t) therefore only leads to schedules slower
    /// than the ceiling, hence than the optimum, and is dropped (with a
    /// margin of 1e-9 of the ceiling for the rounding of float sums). A
    /// front so cut equals the exact one wherever its value is at most
    /// ceiling - R(s, t), and is higher (or infinite) elsewhere; a cell built
    /// from cut fronts is therefore exact wherever its own value is at most
    /// its limit (its optimal candidate reads only points within theirs,
    /// since the stages outside the sub-chain take at least their own
    /// times), and the whole chain, whose R is 0, is exact at every budget
    /// where its optimum is at most the ceiling, the budget asked among them.
    /// The read-back picks the first candidate equal to the cell, and an
    /// optimal candidate reads only kept points, so the schedule is also the
    /// same.
    pub fn build_bounded(chain: &Chain, budget: u64, max_bytes: u64, ceiling: f64) -> Result<Fronts, FrontsTooLarge> {
        Fronts::build_keyed(chain, budget, max_bytes, INF, ceiling, true)
    }

    /// [`Fronts::build_bounded`] that also gives up when its *work* is
    /// projected to exceed `max_work` point-steps. Filling a front of K
    /// points for a sub-chain of d + 1 stages walks d candidates over up to
    /// K points, so the work of a diagonal is counted as d times its points,
    /// and the diagonals left are projected as in the memory guard (fronts
    /// growing in proportion to their length: the diagonal e costs that
    /// average times e^2 per distinct sub-chain). Sharing sub-chains (issue
    /// 25) makes long stacks fit in memory whose fronts still take minutes
    /// (GPT-2 XL, 1,000 blocks: 28 million points, 1.7e10 point-steps, 2
    /// minutes), which only this guard catches. It depends on the chain, the
    /// budget and the ceiling only, so the same input gets the same answer.
    pub fn build_guarded(
        chain: &Chain,
        budget: u64,
        max_bytes: u64,
        max_work: f64,
        ceiling: f64,
    ) -> Result<Fronts, FrontsTooLarge> {
        Fronts::build_keyed(chain, budget, max_bytes, max_work, ceiling, true)
    }

    /// [`Fronts::build`] with every sub-chain solved on its own, even where
    /// another holds the same stages: the plain DP, which the tests and
    /// benchmarks compare the shared one with. Same fronts, same answers.
    pub fn build_unshared(chain: &Chain, budget: u64) -> Fronts {
        match Fronts::build_keyed(chain, budget, u64::MAX, INF, INF, false) {
            Ok(table) => table,
            Err(e) => unreachable!("no limit: {e}"),
        }
    }

    /// The build, with the sub-chains keyed by content when `share` (see
    /// [`crate::solve::distinct`]): one front per distinct sub-chain, filled
    /// at its representative occurrence with the largest cap and limit of
    /// all its occurrences.
    ///
    /// Why sharing changes no answer: two occurrences of one distinct
    /// sub-chain read the same figures and fronts of the same shorter
    /// distinct sub-chains, so by induction on the length their uncut
    /// fronts are the same function, with the same `f64` values. The cap
    /// and the limit only cut that function (the fill stores the function
    /// up to the cap and the points at most the limit, and every step of it
    /// is a truncation), so the shared front, cut at the largest cap and
    /// limit, equals each occurrence's own front wherever that one is
    /// defined, and holds more points beyond. Those extra points are never
    /// read at a smaller cap, and the extra points past a smaller limit are
    /// exact values of the function, so a cell built from them is exact
    /// wherever it was before ([`Fronts::build_bounded`]'s argument holds
    /// for any cut at or above the limit). Sub-chains read by the
    /// representative are asked at most at their own caps: reading from
    /// (s, t) at m <= cap(s), the split's (j + 1, t) is read at m - w_a^j
    /// <= cap - w_a^j = cap(j + 1), its (s, j) at m <= cap(s), and F_all's
    /// (s + 1, t) at m - w_abar^s <= cap(s + 1) (w_abar^s >= w_a^s), and
    /// the occurrence with the largest cap lies within the one of (s, t)
    /// with the largest cap. So the makespans are the same bit for bit, and
    /// the read-back, which looks only at values, picks the same candidate
    /// at every cell: the schedules are the same operation for operation.
    fn build_keyed(
        chain: &Chain,
        budget: u64,
        max_bytes: u64,
        max_work: f64,
        ceiling: f64,
        share: bool,
    ) -> Result<Fronts, FrontsTooLarge> {
        let sc = SlotChain::new(chain, Slots::with_slot(u64::MAX, 1));
        let n = sc.n;
        let cap = usize::try_from(budget).unwrap_or(usize::MAX).saturating_sub(sc.output[0]);
        let feasible = usize::try_from(budget).is_ok_and(|b| b >= sc.output[0]);
        let mut done = vec![0.0; n + 1];
        for l in 1..=n {
            done[l] = done[l - 1] + (sc.forward_time[l] + sc.backward_time[l]);
        }
        let per_cell = std::mem::size_of::<Front>() as u64;
        let per_point = std::mem::size_of::<Point>() as u64;
        // Refused before the keys and cells are allocated: on a long chain
        // they alone can exceed the limit.
        let stages = chain.len();
        let early =
            |bytes| FrontsTooLarge { limit: max_bytes, bytes, projected: true, stages, done: 0, work: None, max_work };
        let keys = Distinct::bytes(n);
        if keys > max_bytes {
            return Err(early(keys));
        }
        let distinct = Distinct::new(&sc, share);
        let cells = distinct.len();
        let mut bytes = keys + cells as u64 * (per_cell + 16);
        if bytes > max_bytes {
            return Err(early(bytes));
        }
        let mut table = Fronts {
            sc,
            cap,
            distinct,
            fronts: Vec::new(),
            caps: vec![0; cells],
            limits: vec![-INF; cells],
            ceiling,
            done,
            work: 0.0,
        };
        table.fronts.resize_with(cells, Front::default);
        if !feasible {
            return Ok(table);
        }
        let mut caps = std::mem::take(&mut table.caps);
        let mut limits = std::mem::take(&mut table.limits);
        for (s, t, id) in table.distinct.cells() {
            caps[id] = caps[id].max(table.cell_cap(s));
            limits[id] = limits[id].max(table.limit(s, t));
        }
        (table.caps, table.limits) = (caps, limits);
        for d in 0..n {
            let ids = table.distinct.of_length(d);
            let filled: Vec<Front> =
                ids.clone().into_par_iter().map_init(Scratch::default, |scratch, id| table.fill(id, scratch)).collect();
            let points: u64 = filled.iter().map(|f| f.0.len() as u64).sum();
            bytes += points * per_point;
            table.work += (d * points as usize) as f64;
            let too_large = |projected, work| FrontsTooLarge {
                limit: max_bytes,
                bytes,
                projected,
                stages,
                done: d,
                work,
                max_work,
            };
            if bytes > max_bytes {
                return Err(too_large(false, None));
            }
            if d > 0 {
                // The diagonals left, if their fronts keep growing in
                // proportion to their length from this one's average.
                let per_length = points as f64 / ids.len() as f64 / d as f64;
                let (mut rest, mut rest_work) = (0.0, 0.0);
                for e in d + 1..n {
                    let k = (table.distinct.of_length(e).len() * e) as f64;
                    rest += k;
                    rest_work += k * e as f64;
                }
                if bytes as f64 + per_length * rest * per_point as f64 > max_bytes as f64 {
                    return Err(too_large(true, None));
                }
                let work = table.work + per_length * rest_work;
                if work > max_work {
                    return Err(too_large(true, Some(work)));
                }
            }
            for (id, front) in ids.zip(filled) {
                table.fronts[id] = front;
            }
        }
        Ok(table)
    }

    /// The largest value a point of (s, t) keeps (see
    /// [`Fronts::build_bounded`]).
    fn limit(&self, s: usize, t: usize) -> f64 {
        let outside = self.done[s - 1] + (self.done[self.sc.n] - self.done[t]);
        self.ceiling - outside + 1e-9 * self.ceiling.abs().max(1.0)
    }

    /// The front of distinct sub-chain `id` from the fronts of shorter
    /// sub-chains, at its representative (s, t), its cap and its limit.
    fn fill(&self, id: usize, scratch: &mut Scratch) -> Front {
        let sc = &self.sc;
        let (s, t) = self.distinct.rep(id);
        let cap = self.caps[id];
        let Scratch { env, merged, option } = scratch;
        if s == t {
            // F_all^s[o] B^s for each option o that fits under the cap:
            // their lower envelope.
            env.clear();
            for o in 0..sc.option_count(s) {
                let need = sc.forward_all_need_with(s, s, o).max(sc.backward_need_with(s, o));
                if need <= cap {
                    option.clear();
                    option.push((need, sc.forward_time[s] + sc.recording(s, o).backward_time));
                    merge_min(env, option, merged);
                    std::mem::swap(env, merged);
                }
            }
            return Front(env.as_slice().into());
        }
        env.clear();
        // F_all^s[o], then (s + 1, t) beside abar^s[o], then B^s, for each
        // option o: option 0 written into `env` directly, the others merged.
        let sub = self.front(s + 1, t);
        for o in 0..sc.option_count(s) {
            let r = sc.recording(s, o);
            let w = r.saved;
            let from = sc
                .forward_all_need_with(s, t, o)
                .max(sc.backward_need_with(s, o))
                .max(w)
                .max(sub.lo().saturating_add(w));
            if from > cap {
                continue;
            }
            let out = if env.is_empty() { &mut *env } else { &mut *option };
            out.clear();
            let base = sc.forward_time[s] + r.backward_time;
            let i0 = sub.step(from - w);
            out.push((from, base + sub.0[i0].1));
            for &(m, c) in &sub.0[i0 + 1..] {
                if m.saturating_add(w) > cap {
                    break;
                }
                // Float sums of two falling values may tie.
                if base + c < out[out.len() - 1].1 {
                    out.push((m + w, base + c));
                }
            }
            if !option.is_empty() {
                merge_min(env, option, merged);
                std::mem::swap(env, merged);
                option.clear();
            }
        }
        // F_ck^s F_none^{s+1..j}, then (j + 1, t) beside a^j, then (s, j).
        for ForwardSplit { split, need: need_fwd, time: fwd } in sc.forward_splits(s, t) {
            let j = split - 1;
            let (right, left) = (self.front(split, t), self.front(s, j));
            let w = sc.output[j];
            let from = need_fwd.max(w).max(right.lo().saturating_add(w)).max(left.lo());
            if from > cap {
                continue;
            }
            // The candidate is never below `bound`; from the first point of
            // the envelope at or below it on, it cannot improve anything.
            let bound = fwd + right.tail() + left.tail();
            // `cap` is usize::MAX for an unbounded sub-problem (a zero-sized
            // chain at budget 0 reaches it): the end saturates there.
            let stop = env.get(env.partition_point(|p| p.1 > bound)).map_or(cap.saturating_add(1), |p| p.0);
            if stop <= from {
                continue;
            }
            let split = Split { fwd, right, w, left };
            if split.relax(env, from, stop, merged) {
                std::mem::swap(env, merged);
            }
        }
        let limit = self.limits[id];
        Front(env[env.partition_point(|p| p.1 > limit)..].into())
    }

    /// Best makespan for a budget of `budget` bytes (at most the build's), or
    /// infinity when no persistent schedule fits. O(log K).
    pub fn makespan(&self, budget: u64) -> f64 {
        match self.top(budget) {
            Some(m) => self.front(1, self.sc.n).get(m),
            None => INF,
        }
    }

    /// m of the whole chain for `budget` bytes, if within the table.
    fn top(&self, budget: u64) -> Option<usize> {
        let m = usize::try_from(budget).ok()?.checked_sub(self.sc.output[0])?;
        (m <= self.cap).then_some(m)
    }

    /// The smallest budget, in bytes, at which a persistent schedule fits
    /// (`None` if none up to the build's budget). O(1).
    pub fn min_budget(&self) -> Option<u64> {
        let lo = self.front(1, self.sc.n).lo();
        (lo <= self.cap).then(|| (lo + self.sc.output[0]) as u64)
    }

    /// Points stored in all fronts (the table's size: 16 bytes each).
    pub fn points(&self) -> usize {
        self.fronts.iter().map(|f| f.0.len()).sum()
    }

    /// Bytes the table takes: its fronts and the keys of its cells.
    pub fn bytes(&self) -> u64 {
        (self.fronts.len() * (std::mem::size_of::<Front>() + 16) + self.points() * std::mem::size_of::<Point>()) as u64
            + Distinct::bytes(self.sc.n)
    }

    /// The work the build took, in point-steps (see
    /// [`Fronts::build_guarded`]).
    pub fn work(&self) -> f64 {
        self.work
    }

    /// The distinct sub-chains the table solved (of L (L + 1) / 2 and the
    /// loss's, see [`crate::solve::distinct`]).
    pub fn distinct_cells(&self) -> usize {
        self.distinct.len()
    }

    /// How (s, t) starts at m in the optimal sequence: F_all^s\[o\], or
    /// F_ck^s .. F_none^{s'-1}; the first candidate, in the order
    /// F_all^s\[0\], F_all^s\[1\], ..., then s' = s+1..=t, whose value is the
    /// cell's (the slot DP's tie-break). O((t - s + options) log K).
    fn choice(&self, s: usize, t: usize, m: usize) -> crate::solve::persistent::Start {
        crate::solve::persistent::choice(&self.sc, s, t, m, |s, t, m| self.front(s, t).get(m))
    }

    /// The operation sequence reaching [`Fronts::makespan`] at `budget`
    /// bytes, or `None` when infeasible. O(L log K) per F_all or F_ck.
    pub fn sequence(&self, budget: u64) -> Option<Vec<Op>> {
        if !self.makespan(budget).is_finite() {
            return None;
        }
        let top = self.top(budget)?;
        Some(crate::solve::persistent::sequence(&self.sc, top, |s, t, m| self.choice(s, t, m)))
    }

    /// The chain in one-byte slots the fronts were built for.
    pub(crate) fn slot_chain(&self) -> &SlotChain {
        &self.sc
    }

    /// The largest m besides a^{s-1} at which a sub-chain (s, t) is exact:
    /// the budget less w_a^0, less w_a^{s-1} for s > 1 (see the module
    /// documentation). O(1).
    pub(crate) fn exact_up_to(&self, s: usize) -> usize {
        self.cell_cap(s)
    }

    /// The breakpoints of C(s, t, .) up to m = `cap`, by increasing m. O(K).
    pub(crate) fn steps(&self, s: usize, t: usize, cap: usize) -> Vec<(usize, f64)> {
        self.front(s, t).0.iter().copied().take_while(|p| p.0 <= cap).collect()
    }

    /// The persistent sequence of sub-chain (s, t) from m bytes besides
    /// a^{s-1} (C(s, t, m) must be finite). O(L log K) per F_all or F_ck.
    pub(crate) fn sub_sequence(&self, s: usize, t: usize, m: usize) -> Vec<Op> {
        crate::solve::persistent::sequence_of(&self.sc, s, t, m, |s, t, m| self.choice(s, t, m))
    }
}

/// The candidate of one split as a function of m: `fwd + right(m - w) +
/// left(m)`, for m at or above its threshold (where both terms are finite).
/// Non-increasing in m, like its two fronts.
struct Split<'a> {
    fwd: f64,
    right: &'a Front,
    w: usize,
    left: &'a Front,
}

impl Split<'_> {
    /// Its value from the steps `i` of the right front and `k` of the left,
    /// summed as the slot DP sums it.
    fn value(&self, i: usize, k: usize) -> f64 {
        self.fwd + self.right.0[i].1 + self.left.0[k].1
    }

    /// The next breakpoint after steps `i` and `k`: its m (`usize::MAX` if
    /// none) and the steps there.
    fn next(&self, i: usize, k: usize) -> (usize, usize, usize) {
        let mr = self.right.0.get(i + 1).map_or(usize::MAX, |p| p.0.saturating_add(self.w));
        let ml = self.left.0.get(k + 1).map_or(usize::MAX, |p| p.0);
        let m = mr.min(ml);
        (m, i + usize::from(mr == m), k + usize::from(ml == m))
    }

    /// Writes `min(env, self)` into `out` and returns true, or returns false
    /// when the candidate is nowhere below `env` over `[from, stop)` (then
    /// `out` is garbage); `env` is below the candidate from `stop` on. Both
    /// are fronts (points by increasing m, values strictly decreasing), and
    /// so is `out`. O(|env| + |self|) over the window, sequential.
    ///
    /// The candidate and the envelope are walked together, breakpoint by
    /// breakpoint. Candidates that improve anything mostly do so over short
    /// stretches (on ResNet-1001, 9% of their points end up in the
    /// envelope), so only those stretches are written, between copies of
    /// the envelope's unchanged runs: a stretch starts where the candidate
    /// drops below the envelope (at one of its own breakpoints, or at
    /// `from`) and ends at the first breakpoint of the envelope that is at
    /// or below it (between two of those the envelope is constant and the
    /// candidate non-increasing). Exact: every value written is the
    /// candidate's own sum or the envelope's, and each point kept is strictly
    /// below the one before it.
    fn relax(&self, env: &[Point], from: usize, stop: usize, out: &mut Vec<Point>) -> bool {
        out.clear();
        // Envelope points before `copied` are in `out` or replaced.
        let mut copied = 0;
        let (mut i, mut k) = (self.right.step(from - self.w), self.left.step(from));
        let mut c = self.value(i, k);
        let mut m = from;
        // The envelope's next breakpoint after m.
        let mut f = env.partition_point(|p| p.0 <= m);
        // The last value written while in a stretch.
        let mut last = None::<f64>;
        let (mut xn, mut i2, mut k2) = self.next(i, k);
        loop {
            let ev = if f == 0 { INF } else { env[f - 1].1 };
            match last {
                None if c < ev => {
                    let ip = env.partition_point(|p| p.0 < m);
                    out.extend_from_slice(&env[copied..ip]);
                    out.push((m, c));
                    last = Some(c);
                }
                Some(l) if c < ev && c < l => {
                    out.push((m, c));
                    last = Some(c);
                }
                // Below the envelope still, at the value already written.
                Some(_) if c < ev => {}
                Some(l) => {
                    // The stretch ends at the envelope's point at m.
                    copied = f - 1;
                    if env[copied].1 >= l {
                        copied += 1;
                    }
                    last = None;
                }
                None => {}
            }
            let y = env.get(f).map_or(usize::MAX, |p| p.0);
            m = y.min(xn);
            if m >= stop {
                break;
            }
            if y == m {
                f += 1;
            }
            if xn == m {
                (i, k) = (i2, k2);
                c = self.value(i, k);
                (xn, i2, k2) = self.next(i, k);
            }
        }
        if let Some(l) = last {
            copied = env.partition_point(|p| p.0 < stop);
            if env.get(copied).is_some_and(|p| p.0 == stop && p.1 >= l) {
                copied += 1;
            }
        } else if out.is_empty() {
            return false;
        }
        out.extend_from_slice(&env[copied..]);
        true
    }
}

/// The fastest persistent makespan at `budget` bytes and its operations,
/// exact in bytes (`None` when no persistent schedule fits). Same answer as
/// the slot DP with one-byte slots. Time O(K L^3), memory O(K L^2) (see the
/// module documentation).
pub fn fastest(chain: &Chain, budget: u64) -> Option<(f64, Vec<Op>)> {
    let table = Fronts::build(chain, budget);
    let ops = table.sequence(budget)?;
    Some((table.makespan(budget), ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{Rng, network_like, small_chain};

    /// Every front is stored in its one canonical form, points strictly
    /// increasing in m and strictly decreasing in value: a tied point would
    /// cost memory and time and change nothing. Random chains whose float
    /// sums tie often (small whole times) and a network-like one.
    fn assert_canonical(chain: &Chain, budget: u64) {
        let table = Fronts::build(chain, budget);
        for (n, front) in table.fronts.iter().enumerate() {
            for w in front.0.windows(2) {
                assert!(w[0].0 < w[1].0 && w[0].1 > w[1].1, "front {n} of {chain:?} at {budget}: {w:?}");
            }
        }
    }

    #[test]
    fn fronts_are_canonical() {
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let len = rng.range(1, 9) as usize;
            let chain = small_chain(&mut rng, len, 8, 3);
            for budget in [10, 20, 40, 80] {
                assert_canonical(&chain, budget);
            }
        }
        let chain = network_like(3, 40);
        assert_canonical(&chain, u64::MAX / 4);
    }
}
