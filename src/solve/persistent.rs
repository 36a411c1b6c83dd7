//! The persistent dynamic program: Rotor's Algorithms 3 and 4 with the
//! corrections of [the model](crate::model).
//!
//! C(s, t, m) is the fastest persistent way to turn {a^{s-1}, delta^t} into
//! {delta^{s-1}} using at most m slots besides a^{s-1}. Either the chain starts
//! with F_all^s (then solve (s+1, t) with m - w_abar^s and finish with B^s), or
//! with F_ck^s F_none^{s+1} .. F_none^{s'-1}, which leaves a^{s'-1} stored while
//! (s', t) is solved with m - w_a^{s'-1}, after which (s, s'-1) remains.
//!
//! Corrections to the published recurrence:
//! - the F_all branch subtracts w_abar^s (the paper prints w_a^s);
//! - the F_all forward is checked with delta^t resident (w_d^t + w_abar^s +
//!   o_f^s), not delta^s;
//! - the F_none steps are checked only up to the split s' actually chosen (the
//!   paper's bound over every j < t rejects feasible splits).
//!
//! # Recording options (issue 24)
//! A stage may be recorded in several ways, F_all^s\[o\] for o = 0, 1, ...
//! ([the model](crate::model)): option o keeps w_abar^s\[o\] bytes until B^s,
//! has transient o_f^s\[o\] while it runs, and makes B^s take u_b^s + r^s\[o\]
//! with transient o_b^s\[o\]. The recurrence becomes
//!
//! ```text
//! C(s, s, m) = min over o with m >= need(s, s, o) of  u_f^s + (u_b^s + r^s[o])
//! C(s, t, m) = min( min over o with m >= need(s, t, o) and m >= w_abar^s[o] of
//!                       u_f^s + (u_b^s + r^s[o]) + C(s+1, t, m - w_abar^s[o]),
//!                   min over s' of  [the split candidates, unchanged] )
//! need(s, t, o) = max(w_d^t + w_abar^s[o] + o_f^s[o],            (F_all^s[o])
//!                     w_d^s + w_abar^s[o] + w_d^{s-1} + o_b^s[o]) (B^s)
//! ```
//!
//! (`forward_all_need_with` and `backward_need_with` of [`SlotChain`]).
//! Why this is the optimum over persistent sequences that may record each
//! stage with any option: a persistent sequence of (s, t) that starts with
//! F_all^s\[o\] is F_all^s\[o\], then a persistent sequence of (s+1, t), then
//! B^s. The option o is visible to nothing but that branch: abar^s\[o\] is
//! created by F_all^s\[o\] and consumed by B^s, the only operations that read
//! it, so between them it is a constant w_abar^s\[o\] bytes beside whatever
//! (s+1, t) does, and the sub-chain (s+1, t) reads a^s or abar^s only as its
//! input (F_ck^{s+1} and F_all^{s+1} accept either, and a persistent
//! sub-sequence never runs F_none^{s+1}, the one operation that would delete
//! it), so its sequences, their memory and their times do not depend on o.
//! The option's other effects, o_f^s\[o\] and the time and transient of B^s,
//! belong to the two operations of the branch itself. So for a fixed o the
//! branch is the old F_all branch with w_abar^s, o_f^s, o_b^s and u_b^s
//! replaced by the option's figures, whose optimum is u_f^s + (u_b^s +
//! r^s\[o\]) + C(s+1, t, m - w_abar^s\[o\]) under the two memory checks, by the
//! old proof; the optimum over all sequences starting with an F_all of s is
//! the minimum of these over o. The split branch records no stage s itself
//! (F_ck^s keeps only a^s), and its sub-chains are solved optimally, options
//! included, by induction on t - s; the leaf (s, s) is F_all^s\[o\] B^s for
//! some o. Hence C is the persistent optimum with options, and with one
//! option per stage the recurrence is the old one, operation for operation.
//!
//! Every row stays non-increasing in m (a minimum of non-increasing
//! candidates), infinite below a threshold and constant from some point on
//! (every candidate is), so the storage below holds unchanged. Option 0 keeps
//! its place as the first candidate: the read-back takes the first of
//! F_all^s\[0\], F_all^s\[1\], ..., then the splits, whose value equals the cell.
//!
//! Cost: the F_all branch of (s, t) is evaluated once per option, O(k S) for
//! k options, against O((t - s) S) for the splits, so options cost O(k S L^2)
//! more, nothing in the split loop; a chain without options runs the same
//! operations as before (one option, option 0), with the same results bit for
//! bit.
//!
//! # How the table is computed (issue 8)
//! The recurrence is O(S L^3): for each (s, t) and split s' the candidate over
//! the whole memory axis is `fwd + C(s', t, m - w) + C(s, s'-1, m)`, two shifted
//! rows added. The loop over m is the inner loop, over contiguous `f64` slices
//! zipped together (no bounds checks, vectorised by the compiler). Its results
//! equal those of the straightforward triple loop bit for bit (the test
//! `tests/suite/persistent_reference.rs` holds that loop and checks it), because:
//! - every candidate is computed with the same operations in the same order,
//!   `(fwd + right) + left`, and the minimum of a set of floats does not depend
//!   on the order it is taken in;
//! - no choice table is stored: [`Table::sequence`] recomputes, for the few
//!   cells on the path, the first candidate (F_all, then the splits in
//!   increasing order) whose value equals the cell, which is exactly the one
//!   the triple loop's strict `<` kept.
//!
//! Costs stay `f64`: in `f32` the sums of real-valued times round differently,
//! the makespan would no longer equal the simulator's, and near-ties would pick
//! other splits (the reference test shows such a case).
//!
//! Structure that cuts the work and the memory:
//! - each row C(s, t, .) is non-increasing in m, infinite below a threshold and
//!   constant from some point on (once the sub-chain fits with everything
//!   saved, more memory does not help). A row is stored from its threshold to
//!   the start of its constant tail only, so short sub-chains take little room,
//!   and the loop over m is cut where either row turns constant.
//! - a split is skipped below its own threshold (where either sub-chain or the
//!   forwards do not fit). Every candidate is at least `fwd + min right + min
//!   left` (float addition is monotone): a split stops at the first m where
//!   the row is already below that (the row being non-increasing, so is the
//!   rest), and a block of `STRIDE` values is skipped when the candidate at
//!   its end (its smallest there) is not below the row at its start (its
//!   largest there). Without these, ~2.5x more values would be visited.
//! - cache tiles: cells are filled by `TILE` x `TILE` tiles. For the splits
//!   whose sub-chains lie outside the tile, the rows of one split s' serve
//!   every cell of the tile (right rows (s', t) for the tile's t, left rows
//!   (s, s' - 1) for its s), so a row is read from memory once per tile
//!   instead of once per cell; the few splits inside the tile follow, cell by
//!   cell. Tiles of one anti-diagonal of tiles only read tiles nearer the
//!   diagonal and are filled in parallel with rayon.
//!
//! Complexity: O(S L^3) time in the worst case, much less in practice, and at
//! most (L+1)(L+2)/2 rows of at most S' + 1 `f64` (S' = the budget in slots,
//! between S and 2S - 1), O(S L^2) memory; see [`table_bytes_estimate`].
//! Measured (benches/persistent.rs) at 500 slots on a 339-stage chain: about
//! 0.8 s on one core of a loaded 2-core machine, against 8 s for the triple
//! loop.

use rayon::prelude::*;

use crate::schedule::Op;
use crate::slots::{ForwardSplit, SlotChain, Slots};
use crate::solve::distinct::Distinct;

/// Longest chain the persistent DP accepts (its table has L^2 / 2 rows).
pub const MAX_STAGES: usize = u16::MAX as usize - 2;

const INF: f64 = f64::INFINITY;

/// One row C(s, t, .) of the table, for m in `0..=budget`.
#[derive(Clone, Debug)]
struct Row {
    /// The smallest feasible m; the row is infinite below (and everywhere when
    /// it is `usize::MAX`).
    lo: usize,
    /// The row's value on its constant tail, its minimum (kept beside `lo` so
    /// that bounds need not touch the values).
    tail: f64,
    /// C(s, t, lo), C(s, t, lo + 1), ...: from the last entry on, the row is
    /// constant. Empty only for an infeasible row.
    vals: Box<[f64]>,
}

impl Row {
    /// The row left in `acc` (`budget + 1` values) by the candidates.
    fn from_acc(acc: &[f64]) -> Row {
        let lo = acc.partition_point(|&c| c == INF);
        let Some(&tail) = acc[lo..].last() else {
            return Row::infeasible();
        };
        let flat = lo + acc[lo..].partition_point(|&c| c > tail);
        Row { lo, tail, vals: acc[lo..=flat].into() }
    }

    fn infeasible() -> Row {
        Row { lo: usize::MAX, tail: INF, vals: Box::new([]) }
    }

    /// C(s, t, m).
    fn get(&self, m: usize) -> f64 {
        if m < self.lo {
            return INF;
        }
        self.vals[(m - self.lo).min(self.vals.len() - 1)]
    }

    /// The stored values from `x` (>= `lo`) up to the start of the tail,
    /// at most `len` of them: the row at `x`, `x + 1`, ... while explicit.
    fn explicit_from(&self, x: usize, len: usize) -> &[f64] {
        let from = (x - self.lo).min(self.vals.len() - 1);
        let to = (self.vals.len() - 1).min(from + len);
        &self.vals[from..to]
    }
}

/// `acc[i] = min(acc[i], (base + right[i]) + left[i])`: the hot loop. Written
/// as a select over zipped slices so that it vectorises and has no bounds
/// checks; the association of the sum is the triple loop's.
fn relax_both(acc: &mut [f64], base: f64, right: &[f64], left: &[f64]) {
    for ((a, &r), &l) in acc.iter_mut().zip(right).zip(left) {
        let c = base + r + l;
        *a = if c < *a { c } else { *a };
    }
}

/// `acc[i] = min(acc[i], (base + right[i]) + left)`.
fn relax_right(acc: &mut [f64], base: f64, right: &[f64], left: f64) {
    for (a, &r) in acc.iter_mut().zip(right) {
        let c = base + r + left;
        *a = if c < *a { c } else { *a };
    }
}

/// `acc[i] = min(acc[i], base + left[i])` (the base already holds the right
/// term when it is constant).
fn relax_left(acc: &mut [f64], base: f64, left: &[f64]) {
    for (a, &l) in acc.iter_mut().zip(left) {
        let c = base + l;
        *a = if c < *a { c } else { *a };
    }
}

/// `acc[i] = min(acc[i], c)`.
fn relax_const(acc: &mut [f64], c: f64) {
    for a in acc.iter_mut() {
        *a = if c < *a { c } else { *a };
    }
}

/// `acc[i] = min(acc[i], base + row(x + i))` for a row feasible at `x`.
fn relax_row(acc: &mut [f64], base: f64, row: &Row, x: usize) {
    let head = row.explicit_from(x, acc.len());
    let (a_head, a_tail) = acc.split_at_mut(head.len());
    relax_left(a_head, base, head);
    relax_const(a_tail, base + row.tail);
}

/// `acc[i] = min(acc[i], (base + right(xr + i)) + left(xl + i))` for rows
/// feasible at `xr` and `xl`, cut where each row turns constant.
fn relax_split(acc: &mut [f64], base: f64, right: &Row, xr: usize, left: &Row, xl: usize) {
    let r = right.explicit_from(xr, acc.len());
    let l = left.explicit_from(xl, acc.len());
    let (both, rest) = acc.split_at_mut(r.len().min(l.len()));
    relax_both(both, base, r, l);
    let k = both.len();
    let (one, rest) = rest.split_at_mut(r.len().max(l.len()) - k);
    if r.len() > k {
        relax_right(one, base, &r[k..], left.tail);
    } else {
        relax_left(one, base + right.tail, &l[k..]);
    }
    relax_const(rest, base + right.tail + left.tail);
}

/// Side of the square tiles of (s, t) cells filled together: a row a tile
/// reads for one split serves `TILE` cells. 16 was faster than 4 and 8 at
/// L = 339 (8 keeps the accumulators in L2, but reads rows twice as often).
const TILE: usize = 16;

/// Splits taken together for each cell of a tile, so that the cell's
/// accumulator stays in L1 across them.
const JB: usize = 8;

/// Memory values checked together against a split's lower bound (16 and 8
/// visit fewer values but spend more on the checks).
const STRIDE: usize = 32;

/// The filled DP table for one chain and one discretization. Answers every
/// budget up to the one it was built for, with the same slot size.
pub struct Table {
    sc: SlotChain,
    /// The sub-chains keyed by content (in slots): (s, t)'s row is
    /// `rows[id(s, t)]` (see [`Table::build`]).
    distinct: Distinct,
    /// The row of each distinct sub-chain.
    rows: Vec<Row>,
    /// `fwd[index(s, j)]` = u_f^s + u_f^{s+1} + ... + u_f^j, summed in that
    /// order (as the triple loop does): the forwards before split s' = j + 1.
    fwd: Vec<f64>,
    /// `need[index(s, j)]`: memory of F_ck^s F_none^{s+1} .. F_none^j besides
    /// a^{s-1} and the gradient: max(w_a^s + o_f^s, max_{s<i<=j} w_a^{i-1} +
    /// w_a^i + o_f^i).
    need: Vec<usize>,
}

/// The (s, t) cells of one tile: s in `rows`, t in `cols`, s <= t.
#[derive(Clone, Copy)]
struct Tile {
    rows: (usize, usize),
    cols: (usize, usize),
}

impl Tile {
    fn contains(&self, s: usize, t: usize) -> bool {
        (self.rows.0..=self.rows.1).contains(&s) && (self.cols.0..=self.cols.1).contains(&t)
    }

    /// Position of cell (s, t) in the tile's buffers.
    fn slot(&self, s: usize, t: usize) -> usize {
        (s - self.rows.0) * TILE + (t - self.cols.0)
    }
}

impl Table {
    fn index(&self, s: usize, t: usize) -> usize {
        let n = self.sc.n;
        (s - 1) * n - (s - 1) * s.saturating_sub(2) / 2 + (t - s)
    }

    fn row(&self, s: usize, t: usize) -> &Row {
        &self.rows[self.distinct.id(s, t)]
    }

    /// Fills the table for budgets up to `sc.slots.capacity` slots.
    /// `progress(done, total)` is called as tiles complete.
    ///
    /// The cells are filled by square tiles, the tiles of one anti-diagonal
    /// of tiles in parallel (rayon), each tile reading only finished tiles and
    /// itself. Time O(S L^3) at worst (see the module documentation for what
    /// it skips); memory at most [`table_bytes_estimate`] up to rounding ties.
    ///
    /// # Repeated stages (issue 25)
    /// Sub-chains holding the same stages (the same figures in slots, and
    /// the same w_d^{s-1}, see [`crate::solve::distinct`]) have the same row:
    /// the recurrence reads nothing else, and no cap or position enters a
    /// slot row. Each distinct row is stored once. When at most a quarter of
    /// the cells are distinct (a stack of repeated blocks), the distinct
    /// rows are filled by length, each at its first occurrence, one cell at
    /// a time (in parallel within a length) instead of by tiles: the same
    /// candidates with the same float operations, so the same rows bit for
    /// bit, and the read-back, which only compares values, returns the same
    /// schedules. Time O(S D L) for D distinct sub-chains, memory O(S D +
    /// L^2).
    pub fn build(sc: SlotChain, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Table {
        Table::build_keyed(sc, progress, true)
    }

    /// [`Table::build`] with every sub-chain filled on its own, by tiles:
    /// the plain DP, which tests and benchmarks compare the shared one with.
    pub fn build_plain(sc: SlotChain) -> Table {
        Table::build_keyed(sc, None, false)
    }

    fn build_keyed(sc: SlotChain, progress: Option<&(dyn Fn(u64, u64) + Sync)>, share: bool) -> Table {
        let n = sc.n;
        let cells = n * (n + 1) / 2;
        let distinct = Distinct::new(&sc, share);
        let shared = distinct.len() * 4 <= cells;
        let rows = distinct.len();
        let mut table = Table { rows: Vec::new(), fwd: vec![0.0; cells], need: vec![0; cells], sc, distinct };
        table.rows.resize_with(rows, Row::infeasible);
        for s in 1..=n {
            let sc = &table.sc;
            let mut fwd = sc.forward_time[s];
            let mut need = sc.output[s].saturating_add(sc.forward_overhead[s]);
            for j in s..=n {
                if j > s {
                    fwd += sc.forward_time[j];
                    need =
                        need.max(sc.output[j - 1].saturating_add(sc.output[j]).saturating_add(sc.forward_overhead[j]));
                }
                let k = table.index(s, j);
                table.fwd[k] = fwd;
                table.need[k] = need;
            }
        }
        if shared {
            table.fill_distinct(progress);
            return table;
        }
        let blocks = n.div_ceil(TILE);
        let block = |b: usize| (b * TILE + 1, ((b + 1) * TILE).min(n));
        let total: u64 = (0..n as u64).map(|d| (n as u64 - d) * (d + 1)).sum();
        let mut done = 0;
        for d in 0..blocks {
            let tiles: Vec<Tile> = (0..blocks - d).map(|b| Tile { rows: block(b), cols: block(b + d) }).collect();
            let filled: Vec<Vec<(usize, usize, Row)>> = tiles
                .par_iter()
                .map_init(|| vec![Vec::new(); TILE * TILE], |accs, &tile| table.fill_tile(tile, accs))
                .collect();
            for (index, d, row) in filled.into_iter().flatten() {
                done += d as u64 + 1;
                table.rows[index] = row;
            }
            if let Some(p) = progress {
                p(done, total);
            }
        }
        table
    }

    /// Fills the distinct rows by length, each at its representative (s, t),
    /// the rows of one length in parallel; `progress` counts splits as
    /// [`Table::build`] does.
    fn fill_distinct(&mut self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) {
        let n = self.sc.n;
        let budget = self.sc.slots.capacity;
        let total: u64 = (0..n).map(|d| (self.distinct.of_length(d).len() * (d + 1)) as u64).sum();
        let mut done = 0;
        for d in 0..n {
            let ids = self.distinct.of_length(d);
            let filled: Vec<Row> = ids
                .clone()
                .into_par_iter()
                .map_init(Vec::new, |acc, id| {
                    let (s, t) = self.distinct.rep(id);
                    self.fill_cell(s, t, budget, acc)
                })
                .collect();
            for (id, row) in ids.clone().zip(filled) {
                self.rows[id] = row;
            }
            done += (ids.len() * (d + 1)) as u64;
            if let Some(p) = progress {
                p(done, total);
            }
        }
    }

    /// The row of (s, t) from the rows of shorter sub-chains: the candidates
    /// of the tiled fill, in the same order (F_all, then the splits by
    /// increasing s').
    fn fill_cell(&self, s: usize, t: usize, budget: usize, acc: &mut Vec<f64>) -> Row {
        if s == t {
            return leaf_row(&self.sc, s, budget);
        }
        acc.clear();
        acc.resize(budget + 1, INF);
        self.relax_all(s, t, self.row(s + 1, t), acc);
        for j in s..t {
            self.relax_split(s, t, j, self.row(j + 1, t), self.row(s, j), acc);
        }
        Row::from_acc(acc)
    }

    /// Fills the cells of `tile`, whose rows of shorter sub-chains outside the
    /// tile are final. Returns each cell's row id, t - s and row.
    fn fill_tile(&self, tile: Tile, accs: &mut [Vec<f64>]) -> Vec<(usize, usize, Row)> {
        let budget = self.sc.slots.capacity;
        let cells = || {
            (tile.cols.0..=tile.cols.1).flat_map(move |t| (tile.rows.0..=tile.rows.1.min(t)).rev().map(move |s| (s, t)))
        };
        for (s, t) in cells() {
            // Allocated on first use: a tile of a short chain has few cells.
            let acc = &mut accs[tile.slot(s, t)];
            acc.clear();
            acc.resize(budget + 1, INF);
        }
        // Splits s' = j + 1 whose two sub-chains (s, j) and (j + 1, t) lie in
        // finished tiles for every cell of the tile: loop over them outermost
        // so that the rows of one split serve every cell.
        let diagonal = tile.rows == tile.cols;
        if !diagonal {
            let mut j0 = tile.rows.1;
            while j0 < tile.cols.0 {
                let j1 = (j0 + JB).min(tile.cols.0);
                for t in tile.cols.0..=tile.cols.1 {
                    for s in tile.rows.0..=tile.rows.1 {
                        let acc = &mut accs[tile.slot(s, t)];
                        for j in j0..j1 {
                            self.relax_split(s, t, j, self.row(j + 1, t), self.row(s, j), acc);
                        }
                    }
                }
                j0 = j1;
            }
        }
        // The remaining splits read cells of this tile: fill the cells in an
        // order where those are done (t up, s down).
        let mut local: Vec<Row> = std::iter::repeat_with(Row::infeasible).take(TILE * TILE).collect();
        for (s, t) in cells() {
            let get = |a: usize, b: usize| if tile.contains(a, b) { &local[tile.slot(a, b)] } else { self.row(a, b) };
            let acc = &mut accs[tile.slot(s, t)];
            let row = if s == t {
                leaf_row(&self.sc, s, budget)
            } else {
                self.relax_all(s, t, get(s + 1, t), acc);
                let inner = if diagonal { s..t } else { s..tile.rows.1 };
                for j in inner.chain(if diagonal { 0..0 } else { tile.cols.0..t }) {
                    self.relax_split(s, t, j, get(j + 1, t), get(s, j), acc);
                }
                Row::from_acc(acc)
            };
            local[tile.slot(s, t)] = row;
        }
        cells()
            .map(|(s, t)| {
                (self.distinct.id(s, t), t - s, std::mem::replace(&mut local[tile.slot(s, t)], Row::infeasible()))
            })
            .collect()
    }

    /// The F_all^s candidates of (s, t), one per option o of stage s:
    /// F_all^s\[o\], (s+1, t) beside abar^s\[o\], B^s (taking u_b^s + r^s\[o\]).
    /// O(S) per option; a stage without options has the one candidate of
    /// option 0, computed as before options existed.
    fn relax_all(&self, s: usize, t: usize, sub: &Row, acc: &mut [f64]) {
        let sc = &self.sc;
        for o in 0..sc.option_count(s) {
            let r = sc.recording(s, o);
            let w = r.saved;
            let from =
                sc.forward_all_need_with(s, t, o).max(sc.backward_need_with(s, o)).max(w).max(sub.lo.saturating_add(w));
            if from <= sc.slots.capacity {
                relax_row(&mut acc[from..], sc.forward_time[s] + r.backward_time, sub, from - w);
            }
        }
    }

    /// The candidate of (s, t) with split s' = j + 1: F_ck^s F_none^{s+1..j},
    /// then (j + 1, t) = `right` beside a^j, then (s, j) = `left`.
    fn relax_split(&self, s: usize, t: usize, j: usize, right: &Row, left: &Row, acc: &mut [f64]) {
        let sc = &self.sc;
        let budget = sc.slots.capacity;
        let k = self.index(s, j);
        let w = sc.output[j];
        let from = sc.gradient[t].saturating_add(self.need[k]).max(w).max(right.lo.saturating_add(w)).max(left.lo);
        if from > budget {
            return;
        }
        let fwd = self.fwd[k];
        // Every candidate of this split is at least `bound`; where the row is
        // already there (a suffix: the row is non-increasing) it cannot
        // improve it.
        let bound = fwd + right.tail + left.tail;
        let mut a = from;
        while a <= budget && acc[a] > bound {
            let b = (a + STRIDE).min(budget + 1);
            let low = fwd + right.get(b - 1 - w) + left.get(b - 1);
            if low < acc[a] {
                relax_split(&mut acc[a..b], fwd, right, a - w, left, a);
            }
            a = b;
        }
    }

    /// The discretization the table was built with.
    pub fn slots(&self) -> Slots {
        self.sc.slots
    }

    /// Bytes the table takes (rows and per-cell sums).
    pub fn bytes(&self) -> u64 {
        let cells = self.fwd.len() * (std::mem::size_of::<f64>() + std::mem::size_of::<usize>());
        let rows = self.rows.len() * std::mem::size_of::<Row>();
        let vals: usize = self.rows.iter().map(|r| r.vals.len() * std::mem::size_of::<f64>()).sum();
        (cells + rows + vals) as u64 + Distinct::bytes(self.sc.n)
    }

    /// The distinct sub-chains (rows) the table holds, of the L (L + 1) / 2
    /// cells and the loss's.
    pub fn distinct_cells(&self) -> usize {
        self.rows.len()
    }

    /// The smallest budget, in slots, at which the table finds a schedule
    /// (`None` if none up to its budget). Every larger budget up to the
    /// table's is feasible too. O(1).
    pub fn min_budget_slots(&self) -> Option<usize> {
        let row = self.row(1, self.sc.n);
        (row.lo <= self.sc.slots.capacity).then(|| row.lo + self.sc.output[0])
    }

    /// The smallest budget, in slots, whose makespan is at most
    /// `max_makespan` (`None` if even the table's budget is slower): the
    /// makespan is non-increasing in the budget, so this is a binary search.
    /// O(log S).
    pub fn min_budget_for_makespan(&self, max_makespan: f64) -> Option<usize> {
        let first = self.min_budget_slots()?;
        let budget = self.sc.slots.capacity;
        let (mut lo, mut hi) = (first, budget + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.makespan(mid) <= max_makespan { hi = mid } else { lo = mid + 1 }
        }
        (lo <= budget).then_some(lo)
    }

    /// Best makespan for a budget of `m_slots` slots (at most the table's), or
    /// infinity when infeasible. O(1).
    pub fn makespan(&self, m_slots: usize) -> f64 {
        let a0 = self.sc.output[0];
        if m_slots < a0 || m_slots > self.sc.slots.capacity {
            return INF;
        }
        self.row(1, self.sc.n).get(m_slots - a0)
    }

    /// How (s, t) starts at m in the optimal sequence (see [`Start`]). The
    /// first candidate, in the order F_all^s\[0\], F_all^s\[1\], ..., then
    /// s' = s+1..=t, whose value is the cell's (the tie-break of the triple
    /// loop), recomputed with the same float operations. O(t - s + options).
    fn choice(&self, s: usize, t: usize, m: usize) -> Start {
        debug_assert!(self.row(s, t).get(m).is_finite());
        choice(&self.sc, s, t, m, |s, t, m| self.row(s, t).get(m))
    }

    /// The operation sequence reaching [`Table::makespan`] for `m_slots` slots,
    /// or `None` when infeasible. O(L) per F_all or F_ck of the sequence.
    pub fn sequence(&self, m_slots: usize) -> Option<Vec<Op>> {
        if !self.makespan(m_slots).is_finite() {
            return None;
        }
        Some(sequence(&self.sc, m_slots - self.sc.output[0], |s, t, m| self.choice(s, t, m)))
    }

    /// The chain in slots the table was filled for.
    pub(crate) fn slot_chain(&self) -> &SlotChain {
        &self.sc
    }

    /// C(s, t, m), m besides a^{s-1} (infinite where nothing fits). O(1).
    pub(crate) fn cost(&self, s: usize, t: usize, m: usize) -> f64 {
        self.row(s, t).get(m)
    }

    /// The breakpoints of C(s, t, .) up to m = `cap`: each (m, C(s, t, m))
    /// where the row drops, by increasing m (the row's exact step function,
    /// as [`crate::solve::fronts`] stores it). O(length of the row).
    pub(crate) fn steps(&self, s: usize, t: usize, cap: usize) -> Vec<(usize, f64)> {
        let row = self.row(s, t);
        let mut out: Vec<(usize, f64)> = Vec::new();
        for (i, &c) in row.vals.iter().enumerate() {
            let m = row.lo + i;
            if m > cap {
                break;
            }
            if out.last().is_none_or(|p| c < p.1) {
                out.push((m, c));
            }
        }
        out
    }

    /// The persistent sequence of sub-chain (s, t) from m slots besides
    /// a^{s-1} (C(s, t, m) must be finite). O(L) per F_all or F_ck.
    pub(crate) fn sub_sequence(&self, s: usize, t: usize, m: usize) -> Vec<Op> {
        sequence_of(&self.sc, s, t, m, |s, t, m| self.choice(s, t, m))
    }
}

/// How a sub-chain (s, t) starts in an optimal persistent sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// `All(o)`: F_all^s\[o\], then (s+1, t) beside abar^s\[o\], then B^s (for
    /// s = t: F_all^s\[o\] B^s).
    All(usize),
    /// `Split(s')`: F_ck^s F_none^{s+1} .. F_none^{s'-1}, then (s', t)
    /// beside a^{s'-1}, then (s, s'-1).
    Split(usize),
}

/// The memory (besides a^{s-1}) and the time of the leaf (s, s) recorded
/// with option o: F_all^s\[o\] then B^s.
fn leaf(sc: &SlotChain, s: usize, o: usize) -> (usize, f64) {
    let need = sc.forward_all_need_with(s, s, o).max(sc.backward_need_with(s, o));
    (need, sc.forward_time[s] + sc.recording(s, o).backward_time)
}

/// The row of the leaf (s, s) up to `budget`: at each m, the fastest option
/// whose F_all^s\[o\] and B^s fit in m. A stage without options gives the
/// one-value row of option 0. O(k (h - l)) for k options whose needs span
/// l..=h slots (O(1) without options).
fn leaf_row(sc: &SlotChain, s: usize, budget: usize) -> Row {
    let k = sc.option_count(s);
    if k == 1 {
        let (need, c) = leaf(sc, s, 0);
        if need > budget {
            return Row::infeasible();
        }
        return Row { lo: need, tail: c, vals: Box::new([c]) };
    }
    let options: Vec<(usize, f64)> = (0..k).map(|o| leaf(sc, s, o)).filter(|&(need, _)| need <= budget).collect();
    let Some(lo) = options.iter().map(|o| o.0).min() else {
        return Row::infeasible();
    };
    let hi = options.iter().map(|o| o.0).max().unwrap_or(lo);
    let mut vals = vec![INF; hi - lo + 1];
    for &(need, c) in &options {
        relax_const(&mut vals[need - lo..], c);
    }
    let tail = vals[vals.len() - 1];
    let flat = vals.partition_point(|&c| c > tail);
    vals.truncate(flat + 1);
    Row { lo, tail, vals: vals.into() }
}

/// How sub-chain (s, t) starts at m slots in an optimal persistent sequence,
/// given its cost function `cost(s, t, m)` (the slot table's rows, or the
/// exact fronts of [`crate::solve::fronts`]). The first candidate, in the
/// order F_all^s\[0\], F_all^s\[1\], ..., then s' = s+1..=t, whose value is the
/// cell's (recomputed with the same float operations as the fill, so ties
/// break the same way in both). O(t - s + options) lookups.
pub(crate) fn choice(sc: &SlotChain, s: usize, t: usize, m: usize, cost: impl Fn(usize, usize, usize) -> f64) -> Start {
    let target = cost(s, t, m);
    if s == t {
        let o = (0..sc.option_count(s))
            .find(|&o| {
                let (need, c) = leaf(sc, s, o);
                m >= need && c == target
            })
            .expect("a finite leaf is one of its options");
        return Start::All(o);
    }
    for o in 0..sc.option_count(s) {
        let r = sc.recording(s, o);
        let w = r.saved;
        if m >= sc.forward_all_need_with(s, t, o).max(sc.backward_need_with(s, o)).max(w)
            && sc.forward_time[s] + r.backward_time + cost(s + 1, t, m - w) == target
        {
            return Start::All(o);
        }
    }
    for ForwardSplit { split, need: need_fwd, time: fwd_time } in sc.forward_splits(s, t) {
        let j = split - 1;
        let w = sc.output[j];
        if m >= need_fwd.max(w) && fwd_time + cost(split, t, m - w) + cost(s, j, m) == target {
            return Start::Split(split);
        }
    }
    unreachable!("a finite cell is one of its candidates")
}

/// The persistent sequence of the whole chain from `m` slots besides a^0,
/// following `choice(s, t, m)` (see [`choice`]) down the sub-chains, without
/// recursion. O(L) choices.
pub(crate) fn sequence(sc: &SlotChain, m: usize, choice: impl Fn(usize, usize, usize) -> Start) -> Vec<Op> {
    sequence_of(sc, 1, sc.n, m, choice)
}

/// [`sequence`] of the sub-chain (s, t) from `m` slots besides a^{s-1}.
pub(crate) fn sequence_of(
    sc: &SlotChain,
    s: usize,
    t: usize,
    m: usize,
    choice: impl Fn(usize, usize, usize) -> Start,
) -> Vec<Op> {
    enum Task {
        Solve(usize, usize, usize),
        Emit(Op),
    }
    let mut ops = Vec::new();
    let mut stack = vec![Task::Solve(s, t, m)];
    while let Some(task) = stack.pop() {
        let (s, t, m) = match task {
            Task::Emit(op) => {
                ops.push(op);
                continue;
            }
            Task::Solve(s, t, m) => (s, t, m),
        };
        match choice(s, t, m) {
            Start::All(o) => {
                ops.push(Op::FAll(s, o));
                stack.push(Task::Emit(Op::B(s)));
                if s < t {
                    stack.push(Task::Solve(s + 1, t, m - sc.recording(s, o).saved));
                }
            }
            Start::Split(split) => {
                ops.push(Op::FCk(s));
                ops.extend((s + 1..split).map(Op::FNone));
                // Stack order: (split, t) runs first, then (s, split - 1).
                stack.push(Task::Solve(s, split - 1, m));
                stack.push(Task::Solve(split, t, m - sc.output[split - 1]));
            }
        }
    }
    ops
}

/// The memory [`Table::build`] for `sc` is expected to take, in bytes, before
/// building it: its distinct rows, its per-cell sums and keys, and the
/// accumulators of each rayon thread. O(L^2).
///
/// A row C(s, t, .) is stored up to the point where the sub-chain fits with
/// every activation saved (past it the row is constant), and at most to the
/// budget. With recording options this counts option 0 everywhere: that
/// store-all reaches the row's smallest value (no option is faster than
/// option 0, whose recompute time is 0), so the row is constant from there
/// on, if not earlier, and the count stays an upper bound. The estimate counts each row from m = 0 (so it is high by the rows'
/// thresholds) and assumes no row keeps falling past that point, which only a
/// rounding tie between equal real costs (zero forward times) can break.
/// Sub-chains holding the same stages share one row ([`Table::build`]), so
/// only distinct rows are counted: a stack of 1,000 identical blocks takes
/// about 5,000 rows, not 500,000.
pub fn table_bytes_estimate(sc: &SlotChain) -> u64 {
    let n = sc.n;
    let budget = sc.slots.capacity as u64;
    let distinct = Distinct::new(sc, n <= crate::solve::distinct::ESTIMATE_MAX_STAGES);
    let cells = (n * (n + 1) / 2) as u64;
    let shared = distinct.len() * 4 <= n * (n + 1) / 2;
    let per_cell = (2 * std::mem::size_of::<f64>() + std::mem::size_of::<usize>() + 4) as u64;
    let per_row = (std::mem::size_of::<Row>() + std::mem::size_of::<f64>()) as u64;
    let threads = rayon::current_num_threads() as u64;
    let tile = if shared { 1 } else { TILE.min(n) as u64 };
    let mut total = (tile * tile * threads).saturating_mul(budget.saturating_add(1).saturating_mul(8));
    total = total.saturating_add(cells * per_cell);
    // store_all[s] = the smallest m at which F_all^s .. F_all^t B^t .. B^s fits
    // in (s, t), for the current t.
    let mut store_all = vec![0usize; n + 2];
    for t in 1..=n {
        for s in (1..=t).rev() {
            let need = sc.forward_all_need(s, t).max(sc.backward_need(s));
            store_all[s] =
                if s == t { need } else { need.max(sc.saved[s]).max(sc.saved[s].saturating_add(store_all[s + 1])) };
            if distinct.rep(distinct.id(s, t)) != (s, t) {
                continue;
            }
            let len = (store_all[s] as u64).min(budget);
            total = total.saturating_add(per_row.saturating_add(len.saturating_mul(8)));
        }
    }
    total
}

/// The smallest peak, in slots and a^0 included, of any persistent sequence
/// under the rounding of `sc`, each recorded stage with its best option: the
/// min-max form of the same recurrence (a minimum over the options wherever
/// it records), so the DP at budget M is feasible exactly when M >= this
/// value. O(L^3 + k L^2) for k options a stage.
pub fn min_peak_slots(sc: &SlotChain) -> usize {
    min_peak_of_family(sc, true)
}

/// [`min_peak_slots`] for the persistent family (`keep_all`: F_all^s\[o\] then
/// the rest is a choice at every s < t, for every option o) or for revolve's,
/// which is the same recurrence without that choice (it only ever
/// checkpoints, and records its leaves with option 0: a baseline). O(L^3).
///
/// Sub-chains holding the same stages have the same smallest peak (the
/// recurrence reads what [`crate::solve::distinct`] keys by, and integer
/// max and min are exact), so each distinct one is computed once: O(D L)
/// for D distinct sub-chains.
pub(crate) fn min_peak_of_family(sc: &SlotChain, keep_all: bool) -> usize {
    let n = sc.n;
    let distinct = Distinct::new(sc, true);
    let mut p = vec![usize::MAX; distinct.len()];
    let at = |s: usize, t: usize| distinct.id(s, t);
    for d in 0..n {
        for id in distinct.of_length(d) {
            let (s, t) = distinct.rep(id);
            // Revolve records only at leaves, and with option 0 (a baseline).
            let options = if keep_all { sc.option_count(s) } else { 1 };
            let mut best = if s == t {
                (0..options).map(|o| leaf(sc, s, o).0).min().unwrap_or(usize::MAX)
            } else if keep_all {
                (0..options)
                    .map(|o| {
                        sc.forward_all_need_with(s, t, o)
                            .max(sc.backward_need_with(s, o))
                            .max(sc.recording(s, o).saved.saturating_add(p[at(s + 1, t)]))
                    })
                    .min()
                    .unwrap_or(usize::MAX)
            } else {
                usize::MAX
            };
            for ForwardSplit { split, need: need_fwd, .. } in sc.forward_splits(s, t) {
                let j = split - 1;
                let cand = need_fwd.max(sc.output[j].saturating_add(p[at(split, t)])).max(p[at(s, j)]);
                best = best.min(cand);
            }
            p[at(s, t)] = best;
        }
    }
    sc.output[0].saturating_add(p[at(1, n)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Chain;
    use crate::chain::Stage;
    use crate::simulate::simulate;

    #[test]
    fn ample_memory_is_store_all() {
        let stages = (1..=4).map(|l| Stage::simple(l as f64, 1.0, 3, 4)).collect();
        let chain = Chain::new("c", 2, stages, Stage::zero_loss()).unwrap();
        let table = Table::build(SlotChain::new(&chain, Slots::new(1000, 1000)), None);
        let ops = table.sequence(1000).unwrap();
        assert_eq!(table.makespan(1000), chain.store_all_time());
        assert!(ops.iter().all(|op| matches!(op, Op::FAll(..) | Op::B(_))));
        assert_eq!(simulate(&chain, &ops).unwrap().makespan, chain.store_all_time());
    }

    #[test]
    fn min_peak_matches_table_threshold() {
        let stages = vec![Stage::simple(1.0, 1.0, 5, 9), Stage::simple(2.0, 1.0, 2, 7), Stage::simple(1.0, 3.0, 6, 6)];
        let chain = Chain::new("c", 3, stages, Stage::zero_loss()).unwrap();
        let p = crate::solve::dp::min_peak_exact::<crate::solve::dp::Persistent>(&chain);
        let table = Table::build(SlotChain::new(&chain, Slots::new(100, 100)), None);
        let first = (0..=100).find(|&m| table.makespan(m).is_finite()).unwrap();
        assert_eq!(first as u64, p);
        let ops = table.sequence(first).unwrap();
        assert_eq!(simulate(&chain, &ops).unwrap().peak_memory, p);
    }
}
