//! Micro-batches in flight (issue 28): the fastest persistent schedule of one
//! micro-batch on a pipeline rank that holds `n` micro-batches at once.
//!
//! Under a pipeline schedule (GPipe, 1F1B) a rank runs the forward passes of
//! several micro-batches before their backward passes. Between the two, each
//! micro-batch keeps its **residue** R: the bytes its schedule holds just
//! before its first backward operation `B^{L+1}` (the input a^0, delta^{L+1}
//! and everything the first forward pass stored), see
//! [the model](crate::model). While one micro-batch runs its schedule, the
//! other n - 1 hold their residues, so the rank needs
//!
//! ```text
//! (n - 1) R + peak <= M
//! ```
//!
//! and the problem is the fastest schedule under that constraint; n = 1 is
//! the plain problem. R and the peak both depend on the schedule, so the
//! budget is not simply lowered by a constant.
//!
//! # The recurrence
//! In a persistent schedule of (1, L+1) the first forward pass is its
//! **spine**: the chain of starts of (s, L+1) for s = 1, then s + 1 after an
//! F_all^s, or s' after a split F_ck^s .. F_none^{s'-1}, down to the leaf
//! F_all^{L+1}. What the spine stores (abar^s\[o\] for an F_all, a^{s'-1} for a
//! split, abar^{L+1} at the leaf), with a^0 and delta^{L+1}, is exactly what
//! is held when B^{L+1} starts, the residue. Everything else the schedule
//! does is a left part (s, s'-1) of a split, which runs after the spine's
//! stores right of it are freed and does not add to the residue, so it is
//! solved by the plain persistent table C ([`super::persistent`], or exactly
//! in bytes by [`super::fronts`]).
//!
//! So the spine from s is described by three numbers: its need N (the C-style
//! memory besides a^{s-1} it runs in), the residue r it stores from s on, and
//! its time. For each s, from L+1 down to 1, the **spine front** F(s) is the
//! set of (N, r, time) not dominated in all three, built from the same
//! candidates as C(s, L+1, .), each keeping its residue:
//!
//! ```text
//! leaf (s = L+1), option o:  (need(s, s, o),  w_abar^s[o] + w_d^{L+1},  u_f^s + (u_b^s + r^s[o]))
//! F_all^s[o], p in F(s+1):    (max(need(s, L+1, o), w + N_p),  w + r_p,  (u_f^s + (u_b^s + r^s[o])) + time_p)
//!                             with w = w_abar^s[o]
//! split s', p in F(s'),       (m,  w + r_p,  (fwd + time_p) + C(s, s'-1, m))
//!   for m = max(need_fwd, w + N_p) and every breakpoint of C(s, s'-1, .) above it,  w = w_a^{s'-1}
//! ```
//!
//! (the memory checks are [`super::persistent`]'s). Since the rank's memory
//! (n - 1)(w_a^0 + r) + w_a^0 + N grows with N and r, and the time with each
//! part, a dominated point never gives a better schedule, and each candidate
//! is a real schedule (its left part is C's at m), so the answer
//!
//! ```text
//! min { time : (N, r, time) in F(1),  (n - 1)(w_a^0 + r) + w_a^0 + N <= M }
//! ```
//!
//! is the persistent optimum under the constraint. Why: take an optimal
//! persistent schedule; by induction from the leaf, its spine from s is at
//! least as slow as some point of F(s) with no larger N and r (the left parts
//! replaced by C's optimum at the m they ran in, which is no slower, and
//! the spine's own operations the same). For n = 1 the minimum over F(1) at
//! N <= M - w_a^0 is C(1, L+1, M - w_a^0), since every candidate of C's
//! recurrence is among the spine's; `solve` with one micro-batch does not
//! come here at all.
//!
//! Exactness: with the exact fronts (one-byte slots) every size is exact, so
//! the answer is exact in bytes; with S slots, sizes are rounded up as in
//! the slot DP, so the schedule still fits in bytes (the simulator checks it).
//! Exhaustive search ([`super::exhaustive::fastest_in_flight`]) judges it in
//! the tests.
//!
//! # The floating DP
//! The same construction over the floating DP's cells ([`super::floating`]):
//! the first forward pass runs through the cells that still hold
//! delta^{L+1}, D(s, L+1) and F(s, t, L+1). Each option of such a cell starts
//! with a forward, continues the pass in its first sub-problem (a cell of the
//! same kind, at m less what the option freezes below it, its *shift*), and
//! leaves its second sub-problem (if any) for after B^{L+1} has passed it.
//! So a spine point of a cell is (need, residue, time) with the residue =
//! the shift + the first sub-problem's residue (a floating activation lies
//! inside its F cell's memory, so it is counted where it ends up: frozen by
//! a later shift, or held at the leaf), and the second sub-problem read from
//! the table at m, as for the persistent spine; the leaf D(L+1, L+1) keeps
//! abar^{L+1}\[o\] and delta^{L+1}. The answer is the optimum over nested
//! sequences in the table's slots (at one-byte slots, exhaustive search
//! over nested sequences with micro-batches in flight gives the same
//! makespans: the unit tests check it). `floating` answers with it or with the
//! persistent optimum, whichever is faster, as with one micro-batch.
//!
//! # Cost
//! A split s' of s combines |F(s')| spine points with the breakpoints of
//! C(s, s'-1, .): O(sum over s, s' of |F(s')| K) candidates for fronts of K
//! points, each front kept Pareto by a sort and a staircase, O(c log c) for c
//! candidates, on top of the table C itself. Memory O(sum |F(s)|).

use std::collections::BTreeMap;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{ForwardSplit, SlotChain, Slots};
use crate::solve::dp::SlotDp;
use crate::solve::exact::{self, Answer};
use crate::solve::floating;
use crate::solve::fronts::{Fronts, FrontsTooLarge};
use crate::solve::persistent::Table;
use crate::solve::{
    AUTO_BASELINES, Algorithm, Solution, SolveError, SolveOptions, checked_in_flight, dp, exhaustive, limits,
};

/// What the spine reads of the plain persistent optimum C: the slot table or
/// the exact fronts.
pub(crate) trait Cells {
    /// The chain in the units of the table (slots, or bytes for the fronts).
    fn slot_chain(&self) -> &SlotChain;
    /// The breakpoints of C(s, t, .) up to `cap`, by increasing m.
    fn steps(&self, s: usize, t: usize, cap: usize) -> Vec<(usize, f64)>;
    /// The sequence of (s, t) at m.
    fn sub_sequence(&self, s: usize, t: usize, m: usize) -> Vec<Op>;
    /// The largest m besides a^{s-1} at which sub-chains (s, .) are read.
    fn cap(&self, s: usize) -> usize;
}

impl Cells for Table {
    fn slot_chain(&self) -> &SlotChain {
        Table::slot_chain(self)
    }
    fn steps(&self, s: usize, t: usize, cap: usize) -> Vec<(usize, f64)> {
        Table::steps(self, s, t, cap)
    }
    fn sub_sequence(&self, s: usize, t: usize, m: usize) -> Vec<Op> {
        Table::sub_sequence(self, s, t, m)
    }
    fn cap(&self, s: usize) -> usize {
        let sc = Table::slot_chain(self);
        let held = if s == 1 { sc.output[0] } else { sc.output[0].saturating_add(sc.output[s - 1]) };
        sc.slots.capacity.saturating_sub(held)
    }
}

impl Cells for Fronts {
    fn slot_chain(&self) -> &SlotChain {
        Fronts::slot_chain(self)
    }
    fn steps(&self, s: usize, t: usize, cap: usize) -> Vec<(usize, f64)> {
        Fronts::steps(self, s, t, cap)
    }
    fn sub_sequence(&self, s: usize, t: usize, m: usize) -> Vec<Op> {
        Fronts::sub_sequence(self, s, t, m)
    }
    fn cap(&self, s: usize) -> usize {
        self.exact_up_to(s)
    }
}

/// How a spine point starts (s, L+1).
#[derive(Clone, Copy, Debug)]
enum How {
    /// F_all^s\[o\], then the point `next` of F(s+1) (none at the leaf), then B^s.
    All { option: usize, next: usize },
    /// F_ck^s .. F_none^{split-1}, the point `next` of F(split), then the left
    /// part (s, split-1) at m = the point's need.
    Split { split: usize, next: usize },
}

/// A point of a spine front: need N, residue r (in the table's units) and
/// time, not dominated in all three by another point of the front.
/// `how` says how the point starts its cell (`How` for the persistent
/// spine, `FloatingHow` for the floating one).
#[derive(Clone, Copy, Debug)]
struct Point<H = How> {
    need: usize,
    residue: usize,
    time: f64,
    how: H,
}

/// The spine fronts F(1), ..., F(L+1) of a chain (see the module
/// documentation).
pub(crate) struct Spine {
    fronts: Vec<Vec<Point>>,
    /// w_a^0 in the table's units.
    input: usize,
}

/// The rank's memory bound for a spine point of F(1): (n - 1)(w_a^0 + r) +
/// w_a^0 + N; `None` past `usize::MAX`, which no capacity holds (issue 36:
/// saturated, it fitted a capacity of `usize::MAX`).
fn rank_memory<H>(input: usize, p: &Point<H>, in_flight: usize) -> Option<usize> {
    let residue = input.checked_add(p.residue)?;
    residue.checked_mul(in_flight - 1)?.checked_add(input)?.checked_add(p.need)
}

/// The fastest point of a top front whose rank memory with `in_flight`
/// micro-batches is at most `capacity`, as (time, index): the first in the
/// front's order (by need, then residue) among equally fast ones. O(|front|).
fn best_of<H>(front: &[Point<H>], input: usize, capacity: usize, in_flight: usize) -> Option<(f64, usize)> {
    let mut best: Option<(f64, usize)> = None;
    for (i, p) in front.iter().enumerate() {
        if rank_memory(input, p, in_flight).is_some_and(|m| m <= capacity) && best.is_none_or(|b| p.time < b.0) {
            best = Some((p.time, i));
        }
    }
    best
}

impl Spine {
    /// Builds every spine front from the plain optimum `cells`, or gives up
    /// (`Err` with the candidates made) once more than `limit` candidates
    /// have been made. Time and memory: see the module documentation.
    pub(crate) fn build(cells: &impl Cells, limit: usize) -> Result<Spine, usize> {
        let sc = cells.slot_chain();
        let n = sc.n;
        let mut fronts: Vec<Vec<Point>> = vec![Vec::new(); n + 2];
        let mut made = 0usize;
        for s in (1..=n).rev() {
            if made > limit {
                return Err(made);
            }
            let cap = cells.cap(s);
            let mut cand = Vec::new();
            if s == n {
                for o in 0..sc.option_count(s) {
                    let r = sc.recording(s, o);
                    cand.push(Point {
                        need: sc.forward_all_need_with(s, s, o).max(sc.backward_need_with(s, o)),
                        residue: r.saved.saturating_add(sc.gradient[n]),
                        time: sc.forward_time[s] + r.backward_time,
                        how: How::All { option: o, next: usize::MAX },
                    });
                }
            } else {
                for o in 0..sc.option_count(s) {
                    let r = sc.recording(s, o);
                    let w = r.saved;
                    let floor = sc.forward_all_need_with(s, n, o).max(sc.backward_need_with(s, o)).max(w);
                    let head = sc.forward_time[s] + r.backward_time;
                    for (next, p) in fronts[s + 1].iter().enumerate() {
                        cand.push(Point {
                            need: floor.max(w.saturating_add(p.need)),
                            residue: w.saturating_add(p.residue),
                            time: head + p.time,
                            how: How::All { option: o, next },
                        });
                    }
                }
                // `split` names the point's How::Split as well as the front.
                for ForwardSplit { split, need: need_fwd, time: fwd_time } in sc.forward_splits(s, n) {
                    let j = split - 1;
                    let w = sc.output[j];
                    let left = cells.steps(s, j, cap);
                    if left.is_empty() {
                        continue;
                    }
                    for (next, p) in fronts[split].iter().enumerate() {
                        let base = need_fwd.max(w).max(w.saturating_add(p.need));
                        if base > cap {
                            continue;
                        }
                        let head = fwd_time + p.time;
                        let residue = w.saturating_add(p.residue);
                        let first = left.partition_point(|q| q.0 <= base);
                        let at_base = (first > 0).then(|| (base, left[first - 1].1));
                        for (m, c) in at_base.into_iter().chain(left[first..].iter().copied()) {
                            cand.push(Point { need: m, residue, time: head + c, how: How::Split { split, next } });
                        }
                    }
                }
            }
            made += cand.len();
            fronts[s] = pareto(cand, cap);
        }
        Ok(Spine { fronts, input: sc.output[0] })
    }

    /// The fastest point of F(1) whose rank memory with `in_flight`
    /// micro-batches is at most `capacity`, as (time, index). The first in
    /// the front's order (by need, then residue) among equally fast ones. O(|F(1)|).
    fn best(&self, capacity: usize, in_flight: usize) -> Option<(f64, usize)> {
        best_of(&self.fronts[1], self.input, capacity, in_flight)
    }

    /// The smallest rank memory of any point of F(1) with `in_flight`
    /// micro-batches (`None` when every point's is past `usize::MAX`). O(|F(1)|).
    fn min_memory(&self, in_flight: usize) -> Option<usize> {
        self.fronts[1].iter().filter_map(|p| rank_memory(self.input, p, in_flight)).min()
    }

    /// The operations of point `index` of F(1). O(L) per F_all or F_ck.
    fn sequence(&self, cells: &impl Cells, index: usize) -> Vec<Op> {
        let mut ops = Vec::new();
        // The left parts run after the spine's backward from their split on,
        // in reverse order of their splits: B^{L+1} .. B^{s'}, then (s, s'-1).
        let mut after: Vec<Vec<Op>> = Vec::new();
        let (mut s, mut i) = (1, index);
        loop {
            let p = self.fronts[s][i];
            match p.how {
                How::All { option, next } => {
                    ops.push(Op::FAll(s, option));
                    after.push(vec![Op::B(s)]);
                    if next == usize::MAX {
                        break;
                    }
                    (s, i) = (s + 1, next);
                }
                How::Split { split, next } => {
                    ops.push(Op::FCk(s));
                    ops.extend((s + 1..split).map(Op::FNone));
                    after.push(cells.sub_sequence(s, split - 1, p.need));
                    (s, i) = (split, next);
                }
            }
        }
        ops.extend(after.into_iter().rev().flatten());
        ops
    }
}

/// How a point of a floating spine cell starts: option `option` of the
/// cell, whose first sub-problem continues the spine at its point `next`
/// (`usize::MAX` when it has none).
#[derive(Clone, Copy, Debug)]
struct FloatingHow {
    option: usize,
    next: usize,
}

/// The spine fronts of the floating DP: for each cell on the first forward
/// pass (those holding delta^{L+1}: D(s, L+1) and F(s, t, L+1)), the Pareto
/// set of (need, residue, time) over the cell's options, each option's first
/// sub-problem a spine cell (the continuation of the forward pass) and its
/// second one (what runs after B^{L+1} has passed it) read from the table,
/// as for the persistent spine. The residue of an option is its shift (what
/// it freezes below the first sub-problem) plus the first sub-problem's; a
/// floating activation is inside the F cell's memory, and so inside its
/// residue until it is frozen (see `floating`'s module documentation for the
/// cells and options). The leaf D(L+1, L+1) keeps abar^{L+1} and
/// delta^{L+1}.
struct FloatingSpine {
    fronts: std::collections::HashMap<floating::Cell, Vec<Point<FloatingHow>>>,
    /// Candidates made so far (the build gives up past `limit`).
    made: usize,
    /// The most candidates to make ([`spine_limit`]).
    limit: usize,
    input: usize,
    cap: usize,
}

impl FloatingSpine {
    /// The spine fronts of `table`, or `Err` with the candidates made once
    /// more than `limit` were.
    fn build(table: &floating::Table, limit: usize) -> Result<FloatingSpine, usize> {
        let sc = table.slot_chain();
        let cap = sc.slots.capacity.saturating_sub(sc.output[0]);
        let mut spine = FloatingSpine { fronts: Default::default(), made: 0, limit, input: sc.output[0], cap };
        let mut steps: std::collections::HashMap<floating::Cell, Vec<(usize, f64)>> = Default::default();
        spine.front(table, floating::Cell::D(1, sc.n), &mut steps);
        if spine.made > limit { Err(spine.made) } else { Ok(spine) }
    }

    /// Fills the front of `cell` and of the spine cells below it. Recursion
    /// depth at most 2 L (each first sub-problem starts one stage up).
    fn front(
        &mut self,
        table: &floating::Table,
        cell: floating::Cell,
        steps: &mut std::collections::HashMap<floating::Cell, Vec<(usize, f64)>>,
    ) {
        if self.fronts.contains_key(&cell) {
            return;
        }
        if self.made > self.limit {
            // Given up: the build reports it; stop growing.
            self.fronts.insert(cell, Vec::new());
            return;
        }
        let sc = table.slot_chain();
        let n = sc.n;
        let mut cand: Vec<Point<FloatingHow>> = Vec::new();
        let mut push = |need, residue, time, how| cand.push(Point { need, residue, time, how });
        for (option, o) in table.spine_options(cell).into_iter().enumerate() {
            let Some((first, shift)) = o.first else {
                // The leaf D(L+1, L+1): F_all^{L+1}[o] B^{L+1}.
                let crate::schedule::Op::FAll(l, k) = o.op else { unreachable!("only the leaf has no sub-problem") };
                let residue = sc.recording(l, k).saved.saturating_add(sc.gradient[n]);
                push(o.from, residue, o.base, FloatingHow { option, next: usize::MAX });
                continue;
            };
            self.front(table, first, steps);
            let second = o.second.map(|c| steps.entry(c).or_insert_with(|| table.steps(c, self.cap)).clone());
            for (next, p) in self.fronts[&first].iter().enumerate() {
                let base = o.from.max(p.need.saturating_add(shift));
                if base > self.cap {
                    continue;
                }
                let head = o.base + p.time;
                let residue = shift.saturating_add(p.residue);
                let how = FloatingHow { option, next };
                match &second {
                    None => push(base, residue, head, how),
                    Some(left) => {
                        let k = left.partition_point(|q| q.0 <= base);
                        let at_base = (k > 0).then(|| (base, left[k - 1].1));
                        for (m, c) in at_base.into_iter().chain(left[k..].iter().copied()) {
                            push(m, residue, head + c, how);
                        }
                    }
                }
            }
        }
        self.made += cand.len();
        let kept = pareto(cand, self.cap);
        self.fronts.insert(cell, kept);
    }

    /// The fastest point of D(1, L+1) within `capacity` with `in_flight`
    /// micro-batches, as (time, index).
    fn best(&self, capacity: usize, in_flight: usize, top: floating::Cell) -> Option<(f64, usize)> {
        best_of(&self.fronts[&top], self.input, capacity, in_flight)
    }

    /// The operations of point `index` of `cell`.
    fn sequence(&self, table: &floating::Table, cell: floating::Cell, index: usize, ops: &mut Vec<Op>) {
        let Point { need, how, .. } = self.fronts[&cell][index];
        let o = table.spine_options(cell)[how.option];
        ops.push(o.op);
        if let Some((first, _)) = o.first {
            self.sequence(table, first, how.next, ops);
        }
        if let Some(second) = o.second {
            ops.extend(table.sub_sequence(second, need));
        }
        if let Op::FAll(s, _) = o.op {
            ops.push(Op::B(s));
        }
    }
}

/// The fastest nested schedule (the floating DP at `opts.slots` slots) at
/// `budget` bytes with `in_flight` micro-batches, with the makespan it
/// predicts, or `None` when it has none. Errors: the floating DP's checks.
pub(crate) fn floating(
    chain: &Chain,
    budget: u64,
    in_flight: usize,
    opts: &SolveOptions,
) -> Result<Option<(Vec<Op>, u64, f64)>, SolveError> {
    let slots = opts.slots.get();
    let disc = Slots::new(budget, slots);
    let Some(table) = dp::table_up_to::<dp::Floating>(chain, budget, disc.slot, slots, opts.progress)? else {
        return Ok(None);
    };
    // Too many candidates: no floating answer, `solve_floating` keeps the
    // persistent one.
    let Ok(spine) = FloatingSpine::build(&table, spine_limit(opts)) else { return Ok(None) };
    let top = floating::Cell::D(1, table.slot_chain().n);
    let Some((time, index)) = spine.best(disc.capacity, in_flight, top) else { return Ok(None) };
    let mut ops = Vec::new();
    spine.sequence(&table, top, index, &mut ops);
    Ok(Some((ops, disc.slot, time)))
}

/// The most candidates a spine build makes before it gives up, unless
/// `exact_memory` is set (about 1 s and 100 MB): exact spine fronts grow with the product of the
/// fronts they combine, which on long chains with several micro-batches in
/// flight is millions of points (DenseNet-121 with 4 in flight did not
/// finish in 5 minutes). Past it, `persistent` answers with the residue
/// sweep over the slot table and `floating` with the
/// persistent answer.
pub const SPINE_CANDIDATES: usize = 5_000_000;

/// [`SPINE_CANDIDATES`], or no limit when `exact_memory` is set (asking for
/// exactness means waiting for it, as for the fronts).
fn spine_limit(opts: &SolveOptions) -> usize {
    if opts.exact_memory.is_some() { usize::MAX } else { SPINE_CANDIDATES }
}

/// The most (stages^2 x residue caps x slots) steps [`sweep`] takes before
/// it tries only every g-th residue cap (a few seconds).
const SWEEP_WORK: usize = 3_000_000_000;

/// The persistent optimum with `in_flight` micro-batches over the slot
/// table, by a sweep over the residue cap rho (in slots, a^0 included),
/// with the makespan it predicts and its operations.
///
/// For a cap rho on the residue, the current micro-batch has m = capacity -
/// (n - 1) rho - w_a^0 besides a^0 at the top, and both m and what the
/// spine may still store, A = rho - w_a^0 - (stored so far), fall by each
/// store: m = A + (capacity - n rho) all along the spine. So the spine is a
/// one-dimensional program over A:
///
/// ```text
/// E(s, A) = min( F_all^s[o]: (u_f^s + (u_b^s + r^s[o])) + E(s+1, A - w_abar^s[o])   (checks at m = A + D, A >= w)
///                split s':   (fwd + E(s', A - w_a^{s'-1})) + C(s, s'-1, A + D),
///                leaf s = L+1: A >= w_abar^{L+1}[o] + w_d^{L+1} and need <= A + D )
/// ```
///
/// with D = capacity - n rho, and the answer min over rho of E(1, rho - w_a^0).
/// A schedule with residue R is found at rho = R, and one found at rho has
/// residue at most rho, so this is the optimum in the table's slots when
/// every rho is tried. Time O(L^2 rho_max^2) for rho_max = (capacity - w_a^0) /
/// (n - 1); past [`SWEEP_WORK`] only every g-th rho is tried (then the
/// answer fits and may be slower than the optimum).
fn sweep(table: &Table, in_flight: usize) -> Option<(f64, Vec<Op>)> {
    let sc = table.slot_chain();
    let n = sc.n;
    let capacity = sc.slots.capacity;
    let a0 = sc.output[0];
    let others = in_flight.saturating_sub(1).max(1);
    let rho_max = capacity.saturating_sub(a0) / others;
    if rho_max < a0 {
        return None;
    }
    let caps = rho_max - a0 + 1;
    let work = (n * n).saturating_mul(caps).saturating_mul(caps);
    let stride = work.div_ceil(SWEEP_WORK).max(1);
    let mut best: Option<(f64, usize)> = None;
    let mut rho = rho_max;
    loop {
        if let Some(time) = sweep_at(table, in_flight, rho, None)
            && best.is_none_or(|b| time < b.0)
        {
            best = Some((time, rho));
        }
        if rho < a0 + stride {
            break;
        }
        rho -= stride;
    }
    let (time, rho) = best?;
    let mut ops = Vec::new();
    sweep_at(table, in_flight, rho, Some(&mut ops));
    Some((time, ops))
}

/// E(1, rho - w_a^0) of [`sweep`] for one cap rho, and with `ops` the
/// schedule reaching it. O(L^2 rho).
fn sweep_at(table: &Table, in_flight: usize, rho: usize, ops: Option<&mut Vec<Op>>) -> Option<f64> {
    let sc = table.slot_chain();
    let n = sc.n;
    let capacity = sc.slots.capacity;
    let a0 = sc.output[0];
    let top = rho.checked_sub(a0)?;
    // m = A + D must not be negative: A >= -D.
    let d = capacity as i64 - (in_flight as i64) * rho as i64;
    let m_at = |a: usize| -> Option<usize> { usize::try_from(a as i64 + d).ok() };
    // e[s][A] for A in 0..=top, and the choice reaching it.
    let mut e = vec![vec![f64::INFINITY; top + 1]; n + 2];
    let mut how = vec![vec![How::All { option: usize::MAX, next: 0 }; top + 1]; n + 2];
    for s in (1..=n).rev() {
        for a in 0..=top {
            let Some(m) = m_at(a) else { continue };
            let (mut v, mut h) = (f64::INFINITY, How::All { option: usize::MAX, next: 0 });
            for o in 0..sc.option_count(s) {
                let r = sc.recording(s, o);
                if s == n {
                    let need = sc.forward_all_need_with(s, s, o).max(sc.backward_need_with(s, o));
                    let t = sc.forward_time[s] + r.backward_time;
                    if need <= m && a >= r.saved.saturating_add(sc.gradient[n]) && t < v {
                        (v, h) = (t, How::All { option: o, next: usize::MAX });
                    }
                    continue;
                }
                let floor = sc.forward_all_need_with(s, n, o).max(sc.backward_need_with(s, o)).max(r.saved);
                if floor <= m && a >= r.saved {
                    let t = sc.forward_time[s] + r.backward_time + e[s + 1][a - r.saved];
                    if t < v {
                        (v, h) = (t, How::All { option: o, next: 0 });
                    }
                }
            }
            if s < n {
                // `split` names the choice as well as the row of `e`.
                for ForwardSplit { split, need: need_fwd, time: fwd } in sc.forward_splits(s, n) {
                    let j = split - 1;
                    let w = sc.output[j];
                    if need_fwd.max(w) > m || a < w {
                        continue;
                    }
                    let t = fwd + e[split][a - w] + table.cost(s, j, m);
                    if t < v {
                        (v, h) = (t, How::Split { split, next: 0 });
                    }
                }
            }
            e[s][a] = v;
            how[s][a] = h;
        }
    }
    let time = e[1][top];
    if !time.is_finite() {
        return None;
    }
    if let Some(ops) = ops {
        let mut after: Vec<Vec<Op>> = Vec::new();
        let (mut s, mut a) = (1, top);
        loop {
            let m = m_at(a).expect("a finite cell has m >= 0");
            match how[s][a] {
                How::All { option, next } => {
                    ops.push(Op::FAll(s, option));
                    after.push(vec![Op::B(s)]);
                    if next == usize::MAX {
                        break;
                    }
                    (s, a) = (s + 1, a - sc.recording(s, option).saved);
                }
                How::Split { split, .. } => {
                    ops.push(Op::FCk(s));
                    ops.extend((s + 1..split).map(Op::FNone));
                    after.push(table.sub_sequence(s, split - 1, m));
                    (s, a) = (split, a - sc.output[split - 1]);
                }
            }
        }
        ops.extend(after.into_iter().rev().flatten());
    }
    Some(time)
}

/// The points of `cand` with need at most `cap` that no other point
/// dominates (no larger need, residue and time, one of them smaller); among
/// equal points the first. Sorted by need, then residue. O(c log c).
fn pareto<H>(mut cand: Vec<Point<H>>, cap: usize) -> Vec<Point<H>> {
    cand.retain(|p| p.need <= cap && p.time.is_finite());
    // Stable: equal points keep the order they were generated in.
    cand.sort_by(|a, b| a.need.cmp(&b.need).then(a.residue.cmp(&b.residue)).then(a.time.total_cmp(&b.time)));
    // The points kept so far, as a staircase: residue -> the least time at
    // that residue or below, strictly decreasing as the residue grows.
    let mut stair: BTreeMap<usize, f64> = BTreeMap::new();
    let mut out = Vec::new();
    for p in cand {
        if stair.range(..=p.residue).next_back().is_some_and(|(_, &t)| t <= p.time) {
            continue;
        }
        let beaten: Vec<usize> = stair.range(p.residue..).take_while(|(_, t)| **t >= p.time).map(|(&r, _)| r).collect();
        for r in beaten {
            stair.remove(&r);
        }
        stair.insert(p.residue, p.time);
        out.push(p);
    }
    out
}

/// The fastest persistent schedule at `budget` bytes with `in_flight`
/// micro-batches in flight, exact in bytes where the plain persistent solve
/// is ([`exact::persistent`]: the fronts when they fit, else the slot table at
/// `opts.slots` slots, kept by [`exact::choose`]), with the makespan it predicts. Errors: those of the
/// slot DP's checks; an infeasible budget names [`min_budget`]'s.
pub(crate) fn persistent(
    chain: &Chain,
    budget: u64,
    in_flight: usize,
    opts: &SolveOptions,
) -> Result<Answer, SolveError> {
    let slots = opts.slots.get();
    dp::Persistent::check(chain, slots)?;
    let table = crate::solve::persistent::table_bytes_estimate(&SlotChain::new(chain, Slots::new(budget, slots)));
    limits::table_memory(Algorithm::Persistent, table, chain.len(), slots)?;
    let limit = exact::limit(opts, || exact::fronts_limit(chain, budget, slots));
    let max_work = exact::work_limit(opts);
    let exact = Fronts::build_guarded(chain, budget, limit, max_work, f64::INFINITY).and_then(|fronts| {
        let spine_limit = spine_limit(opts);
        let spine = Spine::build(&fronts, spine_limit).map_err(|made| FrontsTooLarge {
            limit,
            bytes: fronts.bytes(),
            projected: false,
            stages: chain.len(),
            done: chain.len(),
            work: Some(made as f64),
            max_work: spine_limit as f64,
        })?;
        let capacity = usize::try_from(budget).unwrap_or(usize::MAX);
        Ok(spine.best(capacity, in_flight).map(|(makespan, index)| {
            let points = fronts.points() + spine.fronts.iter().map(Vec::len).sum::<usize>();
            (makespan, spine.sequence(&fronts, index), points)
        }))
    });
    // As `exact::persistent`: the slot table only where the exact answer gave
    // up, read by the residue sweep (its cost does not grow with the fronts).
    let table = exact.is_err().then(|| {
        let sc = SlotChain::new(chain, Slots::new(budget, slots));
        let disc = sc.slots;
        let table = Table::build(sc, opts.progress);
        sweep(&table, in_flight).map(|(makespan, ops)| ((ops, disc.slot, makespan), makespan))
    });
    let kept = exact::choose(exact, table.flatten());
    let note = format!("{in_flight} micro-batches in flight; {}", kept.note(opts).unwrap_or_default());
    match kept {
        exact::Choice::Exact { makespan, ops, .. } => Ok(Answer { ops, slot_size: 1, makespan, note }),
        exact::Choice::Table { answer: (ops, slot_size, makespan), .. } => {
            Ok(Answer { ops, slot_size, makespan, note })
        }
        exact::Choice::Neither => Err(SolveError::Infeasible {
            algorithm: Algorithm::Persistent,
            budget,
            min_budget: min_budget(chain, in_flight, opts),
        }),
    }
}

/// The smallest budget at which [`persistent`] with `in_flight`
/// micro-batches returns a schedule: exact when the fronts fit at `in_flight`
/// times the smallest persistent peak (a budget every chain meets: the
/// smallest peak's schedule has a residue at most its peak), else the
/// smallest the slot table meets, by [`crate::slots::smallest_feasible_budget`].
/// `None` when none is found.
pub(crate) fn min_budget(chain: &Chain, in_flight: usize, opts: &SolveOptions) -> Option<u64> {
    let slots = opts.slots.get();
    let peak = dp::min_peak_exact::<dp::Persistent>(chain);
    // Every residue holds a^0: past u64::MAX bytes, no budget works.
    let lower = chain.output_size(0).checked_mul(in_flight as u64 - 1)?.checked_add(peak)?;
    let upper = peak.saturating_mul(in_flight as u64);
    let limit = exact::limit(opts, || exact::fronts_limit(chain, upper, slots));
    if let Ok(fronts) = Fronts::build_guarded(chain, upper, limit, exact::work_limit(opts), f64::INFINITY)
        && let Ok(spine) = Spine::build(&fronts, spine_limit(opts))
    {
        return spine.min_memory(in_flight).map(|m| m as u64);
    }
    let feasible = |budget: u64| {
        let table = Table::build(SlotChain::new(chain, Slots::new(budget, slots)), None);
        sweep(&table, in_flight).is_some()
    };
    crate::slots::smallest_feasible_budget(lower, slots, feasible)
}

/// `auto` with micro-batches in flight runs exhaustive search only on
/// chains of at most this many stages (options counted as
/// [`exhaustive::equivalent_stages`] does): its states keep several labels
/// (time with the peak so far or the residue), a few times a plain search.
pub const AUTO_IN_FLIGHT_EXHAUSTIVE_STAGES: usize = 6;

/// [`crate::solve::solve`] with `opts.in_flight` > 1 micro-batches in flight:
/// the fastest schedule of `algorithm` whose peak plus `in_flight - 1`
/// residues fits `budget`, replayed ([`Replay::rank_peak`]).
///
/// - `persistent`: the optimum of its class ([`persistent`]);
/// - `exhaustive`: the optimum over every schedule
///   ([`exhaustive::fastest_in_flight`]);
/// - `auto`: exhaustive search up to [`AUTO_IN_FLIGHT_EXHAUSTIVE_STAGES`]
///   stages, else the fastest of the DP auto would run for one micro-batch
///   (floating where its cost is modest, else persistent) and the
///   [`AUTO_BASELINES`] (ties to the DP);
/// - a baseline: its schedule at the largest budget of its own whose rank
///   memory fits, found by bisection (what a user of that tool would try);
/// - `floating`: the floating DP's spine ([`floating`]), or the persistent
///   optimum where faster.
///
/// [`Replay::rank_peak`]: crate::simulate::Replay::rank_peak
pub(crate) fn solve(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Solution, SolveError> {
    let k = opts.in_flight.get();
    match algorithm {
        Algorithm::Persistent => {
            let answer = persistent(chain, budget, k, opts)?;
            let mut solution =
                checked_in_flight(chain, budget, algorithm, answer.ops, answer.slot_size, answer.makespan, k)?;
            solution.detail = Some(answer.note);
            Ok(solution)
        }
        // Within its stage limit: `crate::solve::solve` checked it.
        Algorithm::Exhaustive => match exhaustive::fastest_in_flight(chain, budget, k) {
            Some((time, ops)) => checked_in_flight(chain, budget, algorithm, ops, 1, time, k),
            None => Err(SolveError::Infeasible { algorithm, budget, min_budget: exhaustive_min_budget(chain, k) }),
        },
        Algorithm::Floating => solve_floating(chain, budget, opts),
        Algorithm::Auto => auto(chain, budget, opts),
        baseline => baseline_in_flight(chain, budget, baseline, opts),
    }
}

/// `floating` with micro-batches in flight: the floating DP's spine at
/// `opts.slots` slots, or the persistent optimum (exact in bytes where its
/// fronts fit) where that is faster (every persistent schedule is nested),
/// as the plain `floating` solve does.
fn solve_floating(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let k = opts.in_flight.get();
    let table = floating(chain, budget, k, opts)?;
    let persistent = match persistent(chain, budget, k, opts) {
        Ok(answer) => Some(answer),
        Err(SolveError::Infeasible { .. }) => None,
        Err(e) => return Err(e),
    };
    let ceiling = table.as_ref().map_or(f64::INFINITY, |t| t.2);
    match (table, persistent) {
        (_, Some(answer)) if answer.makespan < ceiling => {
            let mut solution = checked_in_flight(
                chain,
                budget,
                Algorithm::Floating,
                answer.ops,
                answer.slot_size,
                answer.makespan,
                k,
            )?;
            solution.detail = Some(format!("{}, faster than the floating table", answer.note));
            Ok(solution)
        }
        (Some((ops, slot_size, time)), _) => {
            let mut solution = checked_in_flight(chain, budget, Algorithm::Floating, ops, slot_size, time, k)?;
            solution.detail = Some(format!("{k} micro-batches in flight"));
            Ok(solution)
        }
        (None, _) => Err(SolveError::Infeasible {
            algorithm: Algorithm::Floating,
            budget,
            min_budget: min_budget(chain, k, opts),
        }),
    }
}

/// `auto` with micro-batches in flight (see [`solve`]).
fn auto(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let k = opts.in_flight.get();
    let equivalent = exhaustive::equivalent_stages(chain);
    if equivalent <= AUTO_IN_FLIGHT_EXHAUSTIVE_STAGES {
        let mut solution = solve(chain, budget, Algorithm::Exhaustive, opts)?;
        solution.reason = Some(format!(
            "{} stages, {k} micro-batches in flight: exact search over every memory state and residue is cheap",
            chain.len()
        ));
        return Ok(solution);
    }
    // The floating DP (which also tries the persistent optimum) where auto
    // would run it for one micro-batch, else the persistent DP.
    let dp = match crate::solve::auto_choice(chain, budget, opts).algorithm {
        Algorithm::Floating => Algorithm::Floating,
        _ => Algorithm::Persistent,
    };
    let mut best = match solve(chain, budget, dp, opts) {
        Ok(solution) => Some(solution),
        Err(SolveError::Infeasible { .. }) => None,
        Err(e) => return Err(e),
    };
    let mut won_by_baseline = false;
    for &b in AUTO_BASELINES {
        let candidate = match solve(chain, budget, b, opts) {
            Ok(solution) => solution,
            Err(SolveError::Infeasible { .. }) => continue,
            Err(e) => return Err(e),
        };
        if best.as_ref().is_none_or(|x| candidate.schedule.makespan < x.schedule.makespan) {
            best = Some(candidate);
            won_by_baseline = true;
        }
    }
    let Some(mut solution) = best else {
        return Err(SolveError::Infeasible {
            algorithm: Algorithm::Auto,
            budget,
            min_budget: min_budget(chain, k, opts),
        });
    };
    solution.schedule.algorithm = Algorithm::Auto.name().to_string();
    solution.reason = Some(if won_by_baseline {
        format!("{k} micro-batches in flight: a baseline was faster than the persistent optimum rounded to slots")
    } else {
        format!(
            "{k} micro-batches in flight: the {dp} DP under (n - 1) x residue + peak, at least as fast as every \
             baseline"
        )
    });
    Ok(solution)
}

/// A baseline at the largest budget of its own (found by bisection, to
/// 1/2^20 of `budget`) whose rank memory with `opts.in_flight` micro-batches
/// fits `budget`, the fastest such schedule seen. O(20) solves of the baseline.
fn baseline_in_flight(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Solution, SolveError> {
    let k = opts.in_flight.get();
    let plain = SolveOptions { in_flight: std::num::NonZeroUsize::MIN, ..*opts };
    // Some(true): fits; Some(false): over the budget; None: the baseline has
    // nothing at that budget of its own.
    let attempt = |b: u64| -> Result<(Option<bool>, Option<Solution>), SolveError> {
        match crate::solve::solve(chain, b, algorithm, &plain) {
            Ok(s) => {
                let fits = s.replay.rank_peak(k).is_some_and(|m| m <= budget);
                Ok((Some(fits), fits.then_some(s)))
            }
            Err(SolveError::Infeasible { .. }) => Ok((None, None)),
            Err(e) => Err(e),
        }
    };
    let mut best: Option<(Solution, u64)> = None;
    let (first, found) = attempt(budget)?;
    if first.is_none() {
        return Err(SolveError::Infeasible { algorithm, budget, min_budget: None });
    }
    if let Some(s) = found {
        best = Some((s, budget));
    } else {
        let (mut lo, mut hi) = (0u64, budget);
        let step = (budget >> 20).max(1);
        while hi - lo > step {
            let mid = lo + (hi - lo) / 2;
            match attempt(mid)? {
                (Some(true), Some(s)) => {
                    if best.as_ref().is_none_or(|b| s.schedule.makespan < b.0.schedule.makespan) {
                        best = Some((s, mid));
                    }
                    lo = mid;
                }
                (Some(false), _) => hi = mid,
                _ => lo = mid,
            }
        }
    }
    let Some((found, inner)) = best else {
        return Err(SolveError::Infeasible { algorithm, budget, min_budget: None });
    };
    let mut solution = checked_in_flight(
        chain,
        budget,
        algorithm,
        found.schedule.operations,
        found.slot_size,
        found.solver_makespan,
        k,
    )?;
    let inner_note = if inner == budget {
        String::new()
    } else {
        format!("planned for {} of its own so that {k} micro-batches fit; ", crate::size::format_size(inner))
    };
    let detail = format!("{inner_note}{}", found.detail.unwrap_or_default()).trim_end_matches("; ").to_string();
    solution.detail = (!detail.is_empty()).then_some(detail);
    Ok(solution)
}

/// The smallest budget at which exhaustive search finds a schedule with
/// `in_flight` micro-batches ([`exhaustive::min_peak_in_flight`]).
fn exhaustive_min_budget(chain: &Chain, in_flight: usize) -> Option<u64> {
    exhaustive::min_peak_in_flight(chain, in_flight)
}

/// [`crate::solve::min_budget`] with `opts.in_flight` > 1: exact for
/// `exhaustive`, the persistent DP's (exact where its fronts fit) for
/// `persistent` and for `auto` beyond its exhaustive range, `None` for the
/// baselines (their bisection has no smallest budget to name).
pub(crate) fn min_budget_for(
    chain: &Chain,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Option<u64>, SolveError> {
    let k = opts.in_flight.get();
    match algorithm {
        // Within its stage limit: `crate::solve::min_budget` checked it.
        Algorithm::Exhaustive => Ok(exhaustive_min_budget(chain, k)),
        Algorithm::Auto if exhaustive::equivalent_stages(chain) <= AUTO_IN_FLIGHT_EXHAUSTIVE_STAGES => {
            Ok(exhaustive_min_budget(chain, k))
        }
        // floating answers with the persistent optimum where that is faster,
        // so the persistent smallest budget is one it meets.
        Algorithm::Persistent | Algorithm::Auto | Algorithm::Floating => {
            dp::Persistent::check(chain, opts.slots.get())?;
            Ok(min_budget(chain, k, opts))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(need: usize, residue: usize, time: f64) -> Point {
        Point { need, residue, time, how: How::All { option: 0, next: usize::MAX } }
    }

    /// The floating spine alone (not the persistent answer `solve` may
    /// prefer), at one-byte slots, equals exhaustive search over nested
    /// sequences with the same micro-batches in flight, on 600 random chains
    /// of 1 to 4 stages (a third with options), k = 1..=4, eight budgets each;
    /// its schedules replay within the budget at the makespan claimed.
    #[test]
    fn floating_spine_equals_nested_exhaustive_search() {
        use crate::simulate::simulate;
        use crate::solve::exhaustive::{fastest_nested_in_flight, min_peak_nested};
        use crate::synthetic::{Rng, small_chain, with_options};
        let mut rng = Rng::new(4);
        let (mut cases, mut feasible) = (0, 0);
        for c in 0..600 {
            let len = rng.range(1, 4) as usize;
            let plain = small_chain(&mut rng, len, 8, 3);
            let chain = if c % 3 == 0 { with_options(&mut rng, &plain, 3, 3) } else { plain };
            let (lo, _) = min_peak_nested(&chain);
            let opts = crate::solve::SolveOptions::default();
            let store_all = crate::solve::solve(&chain, u64::MAX / 8, crate::solve::Algorithm::StoreAll, &opts);
            let store_all = store_all.unwrap().replay;
            for k in 1..=4usize {
                let hi = store_all.rank_peak(k).unwrap() + 2;
                for i in 0..8u64 {
                    let budget = lo - 1 + (hi - lo + 1) * i / 7;
                    let opts = SolveOptions {
                        slots: std::num::NonZeroUsize::new(budget as usize).unwrap(),
                        ..SolveOptions::default()
                    };
                    cases += 1;
                    let got = floating(&chain, budget, k, &opts).unwrap();
                    let want = fastest_nested_in_flight(&chain, budget, k);
                    match (&got, &want) {
                        (None, None) => {}
                        (Some((ops, slot, time)), Some((w, _))) => {
                            feasible += 1;
                            assert_eq!(*slot, 1);
                            assert!(
                                (time - w).abs() <= 1e-9 * w.max(1.0),
                                "{chain:?} at {budget}, k {k}: {time} vs {w}"
                            );
                            let r = simulate(&chain, ops).unwrap();
                            assert!(r.rank_peak(k).unwrap() <= budget, "{chain:?} at {budget}, k {k}: {ops:?}");
                            assert!((r.makespan - time).abs() <= 1e-9 * time.max(1.0));
                        }
                        _ => panic!("{chain:?} at {budget}, k {k}: floating {got:?}, nested search {want:?}"),
                    }
                }
            }
        }
        assert!(feasible > cases / 3, "{cases} cases, {feasible} feasible");
    }

    /// Over the same slot table (coarse slots, so rounding matters), the
    /// residue sweep and the spine fronts give the same makespan, and the
    /// sweep's schedule replays with its rank memory within the budget, on
    /// 400 random chains of 1 to 6 stages and 2 to 4 micro-batches.
    #[test]
    fn sweep_equals_the_spine_over_the_slot_table() {
        use crate::simulate::simulate;
        use crate::synthetic::{Rng, small_chain};
        let mut rng = Rng::new(9);
        let mut feasible = 0;
        for _ in 0..400 {
            let len = rng.range(1, 6) as usize;
            let chain = small_chain(&mut rng, len, 50, 4);
            let k = rng.range(2, 4) as usize;
            let budget = rng.range(100, 900);
            let table = Table::build(SlotChain::new(&chain, Slots::new(budget, 20)), None);
            let spine = Spine::build(&table, usize::MAX).unwrap();
            let want = spine.best(table.slot_chain().slots.capacity, k).map(|b| b.0);
            let got = sweep(&table, k);
            assert_eq!(got.as_ref().map(|g| g.0), want, "{chain:?} at {budget}, k {k}");
            if let Some((time, ops)) = got {
                feasible += 1;
                let r = simulate(&chain, &ops).unwrap();
                assert!(r.rank_peak(k).unwrap() <= budget && (r.makespan - time).abs() <= 1e-9 * time.max(1.0));
            }
        }
        assert!(feasible > 100, "{feasible}");
    }

    #[test]
    fn pareto_keeps_exactly_the_undominated() {
        let cand = vec![
            point(5, 5, 5.0),
            point(5, 5, 5.0), // equal: the first is kept
            point(4, 6, 4.0),
            point(6, 4, 6.0),
            point(6, 6, 6.0), // dominated by (5, 5, 5)
            point(7, 1, 9.0),
            point(7, 9, 3.0),
            point(9, 9, 9.0),  // dominated
            point(20, 0, 0.0), // above the cap
        ];
        let kept: Vec<(usize, usize, f64)> = pareto(cand, 10).iter().map(|p| (p.need, p.residue, p.time)).collect();
        assert_eq!(kept, vec![(4, 6, 4.0), (5, 5, 5.0), (6, 4, 6.0), (7, 1, 9.0), (7, 9, 3.0)]);
    }
}
