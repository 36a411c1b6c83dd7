//! The floating-activation dynamic program: the fastest *nested* schedule.
//!
//! # What it computes
//!
//! A sequence is **nested** when every forward reads the highest-indexed
//! activation in memory. Memory then always holds a stack
//! a^{p_0} < a^{p_1} < ... < a^{p_k} (p_0 = 0, each plain or abar) and only the
//! top is ever read: this is the paper's *weak memory persistence*
//! (Definition 4.3). Nested sequences include every persistent one, the
//! non-persistent optimum of the paper's Fig. 4, and the two kinds the printed
//! recurrence of Theorem 4.7 misses (a floating activation moved by F_none onto
//! an F_all; a floating activation moved to a *smaller* one).
//!
//! [`Thresholds::fill`] computes, for every budget up to the one asked, the fastest
//! nested sequence over the slot-rounded sizes: exactly the optimum over
//! nested sequences when a slot is one byte (`tests/suite/floating_vs_exhaustive.rs`
//! checks it against `exhaustive::fastest_nested`, the shortest path over the
//! same class, at every budget).
//!
//! # Not every optimum is nested
//!
//! The paper's Lemma 4.4 (some optimum is weakly persistent) does not hold in
//! this model: its proof delays a recomputation to a later phase, but a later
//! phase holds a different gradient (w_d^{h-1} may exceed w_d^h plus what was
//! freed) and the moved operations may land on a larger transient. Two small
//! chains in `tests/suite/floating_limits.rs` show it: a 2-stage chain whose smallest
//! budget is 15 bytes with `F_ck^1 F_none^2 F_all^3 F_all^1 B^3 F_all^2 B^2
//! B^1` (F_all^1 runs below a^2), while every nested sequence needs 20; and a
//! 4-stage chain where recomputing a^2 below a kept a^3 saves a forward. A
//! state (s, t, l, m) stands for "everything below a^{s-1} is frozen and
//! weighs so much", so a recurrence over such states cannot describe a
//! sequence that works below a held activation; describing it needs which
//! activations are held below and when they change, and no state of
//! polynomial size that does so is known to us (exhaustive search keeps the
//! whole layout). Such chains are rare in random testing (none in the
//! 5,000-chain acceptance run; about one in 25,000 chains with sizes below 4),
//! and `auto` uses exhaustive search itself on chains small enough for it.
//!
//! # The recurrence
//!
//! Sizes are in slots, `m` is the memory a sub-problem may use besides what its
//! callers hold frozen; n = L + 1 is the loss.
//!
//! - **D(s, l, m)**, 1 <= s <= l <= n: memory holds a^{s-1} (plain or abar,
//!   *frozen*: read but never deleted here, outside m) and delta^l; finish with
//!   delta^{s-1}.
//! - **F(s, t, l, m)**, 2 <= s < t <= l: memory holds a plain *floating*
//!   a^{s-1} (inside m) and delta^l; finish with delta^{t-1} and nothing else:
//!   the floating activation moves up by F_none only and is deleted by B^t as
//!   a^{t-1}.
//!
//! The answer is D(1, n, M - w_a^0): a^0 cannot float (F_none^1 would leave B^1
//! without an input).
//!
//! In either state the top of the stack is a^{s-1} and the next operation is a
//! forward of stage s (B^l needs abar^l above it). Each transition below is a
//! case of that forward, so together they cover every nested sequence; each
//! builds only valid sequences whose memory it checks, so they cover nothing
//! else:
//!
//! - **D, F_all^s** (one per option, see "Options" below): abar^s stays
//!   until B^s (nothing deletes an abar earlier), and while it is held
//!   nothing below it is read. So: F_all^s, then a nested
//!   sequence that uses abar^s as its frozen input, D(s+1, l, m - w_abar^s)
//!   (when s < l), then B^s: once B^{s+1} has run, F^{s+1} is no longer allowed
//!   and a^{s-1} is not the top, so B^s is next. F_all^s needs w_d^l + w_abar^s
//!   + o_f^s, B^s needs w_d^s + w_abar^s + w_d^{s-1} + o_b^s.
//! - **D, F_ck^s** (s < l): a^s is pushed and a^{s-1} is not read until a^s,
//!   after any F_none moves, is deleted, which only B^{t'} does (as a^{t'-1},
//!   s < t' <= l). That part is F(s+1, t', l, m) (a^s inside m), or
//!   D(s+1, l, m - w_a^s) when a^s never moves (t' = s + 1). Everything it
//!   pushed is gone by then (phase t' holds nothing above t', and abar^{t'}
//!   goes with the same B), so a^{s-1} and delta^{t'-1} remain: D(s, t'-1, m).
//!   F_ck^s needs w_d^l + w_a^s + o_f^s.
//! - **F, F_none^s**: the floating activation moves to a^s: F(s+1, t, l, m),
//!   or D(t, l, m - w_a^{t-1}) when s + 1 = t (then it stays until B^t).
//! - **F, F_ck^s**: as for D, the new a^s lives in F(s+1, t', l, m - w_a^{s-1})
//!   (a^{s-1} frozen below it); a^{s-1} still has to float up to t - 1 after
//!   B^{t'}, so t' > t (which also rules out the t' = s + 1 case), and
//!   F(s, t, t'-1, m) follows.
//! - **F, F_all^s** is impossible: abar^s would hold a^{s-1} in place until B^s
//!   deletes it, so t = s.
//!
//! Both F operations need w_a^{s-1} + w_a^s + o_f^s + w_d^l, which includes the
//! F_none case (the input is deleted only after the forward).
//!
//! # Options
//!
//! A stage s with k_s ways to record it ([the model](crate::model)'s
//! options) has one **D, F_all^s\[o\]** transition per option o, each as
//! above with option o's figures: F_all^s\[o\], then D(s+1, l, m -
//! w_abar^s\[o\]), then B^s, costing u_f^s + (u_b^s + r^s\[o\]) plus the
//! sub-problem, feasible when m is at least w_d^l + w_abar^s\[o\] + o_f^s\[o\]
//! (`forward_all_need_with`) and w_d^s + w_abar^s\[o\] + w_d^{s-1} + o_b^s\[o\]
//! (`backward_need_with`). Why this is still exact over nested sequences:
//!
//! - *Only D, F_all reads an option.* An option changes what F_all^s keeps
//!   and what the B^s consuming it costs, nothing else; F_ck and F_none do
//!   not depend on options, and F cells have no F_all move (above).
//! - *The sub-problem does not depend on the option.* Inside D(s+1, l, .)
//!   the frozen abar^s\[o\] is only read, as the input of F^{s+1} and of
//!   B^{s+1}, which accept a^s plain or recorded alike; it weighs
//!   w_abar^s\[o\] from F_all^s\[o\] to B^s whatever the sub-problem does, which
//!   is the shift of its memory. So for each o the best completion is
//!   D(s+1, l, m - w_abar^s\[o\]), and a nested sequence beginning with
//!   F_all^s\[o\] costs at least that transition's value.
//! - *Each option is one transition of the minimum*, so the cell takes the
//!   best option at every m, and the threshold pass (the same options in
//!   (max, min) form) the smallest m any option allows: feasibility stays
//!   monotone in m.
//!
//! The option taken is where the transition's value is reached first in the
//! order o = 0, 1, ... (F_all options before F_ck ones), so
//! reconstruction emits `F_all^s[o]` deterministically. A chain without
//! options has one F_all transition per D cell, computed by the same float
//! expressions as before options existed: its tables, schedules and
//! makespans are bit-identical, and the loop over options runs only where a
//! stage is recorded (L^2 / 2 D cells against the L^4 / 24 F-cell options
//! that dominate the work). With options the work grows by
//! sum_s (k_s - 1)(n - s + 1) row passes, at most 15 L^2 / 2 rows.
//!
//! # Factoring, complexity and memory
//!
//! The printed recurrence picks the move r, the next checkpoint s' and the
//! split t' at once: O(L^3) per cell, O(S L^6) in all. Taking F_none moves one
//! step at a time (F, F_none^s) factors the choice of r and s' through the F
//! cells of larger s, so a cell minimises over t' only: about L^4 / 24 cells
//! times options, O(S L^4) time and O(S L^3) memory for S slots. Cells are
//! filled in order of l - s (every cell reads cells of smaller l - s only), the
//! cells of one such diagonal in parallel. Ties go to the first option in the
//! order F_all, F_ck by increasing t' (D) and F_none, F_ck by increasing t'
//! (F), so the schedule does not depend on the thread count.
//!
//! The same options with (max, min) in place of (+, min) give each cell's
//! smallest feasible m ([`Thresholds::new`], O(L^4)): feasibility is monotone in m,
//! so that is the whole-chain minimum peak over nested sequences, and each
//! row is stored only from its threshold up. [`Thresholds::estimate`] gives the
//! exact table size before anything large is allocated;
//! [`crate::machine::memory_limit`] is what a solve may use. Reconstruction (the paper's Alg. 2, extended)
//! re-evaluates a visited cell's options in the same order and takes the first
//! that reproduces the stored value, so no choice table is kept.

use rayon::prelude::*;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{SlotChain, Slots};
use crate::solve::distinct::Distinct;

const INF: f64 = f64::INFINITY;
/// Threshold of a cell that no budget makes feasible.
const NEVER: usize = usize::MAX;

/// Longest chain the program accepts: its thresholds alone take O(L^3) memory
/// and O(L^4) time (at 500 stages, about 170 MB and 5 s of one core).
pub const MAX_STAGES: usize = 500;

/// A cell of the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cell {
    /// D(s, l): frozen input a^{s-1}, from delta^l down to delta^{s-1}.
    D(usize, usize),
    /// F(s, t, l): floating input a^{s-1}, from delta^l down to delta^{t-1}.
    F(usize, usize, usize),
}

/// Where each cell lives in the flat tables: D cells first, then F cells,
/// each run of cells that differ only in l contiguous (the threshold pass reads
/// F(s, t, t'-1) for consecutive t').
#[derive(Clone, Debug)]
struct Layout {
    n: usize,
    /// Index of D(s, s), by s.
    d_start: Vec<usize>,
    /// Index of F(s, t, t), at `s * (n + 1) + t`.
    f_start: Vec<usize>,
    cells: usize,
}

impl Layout {
    fn new(n: usize) -> Layout {
        let mut next = 0;
        let mut d_start = vec![0; n + 1];
        for (s, start) in d_start.iter_mut().enumerate().skip(1) {
            *start = next;
            next += n + 1 - s;
        }
        let mut f_start = vec![0; (n + 1) * (n + 1)];
        for s in 2..=n {
            for t in s + 1..=n {
                f_start[s * (n + 1) + t] = next;
                next += n + 1 - t;
            }
        }
        Layout { n, d_start, f_start, cells: next }
    }

    fn cells(&self) -> usize {
        self.cells
    }

    fn index(&self, cell: Cell) -> usize {
        match cell {
            Cell::D(s, l) => self.d_start[s] + (l - s),
            Cell::F(s, t, l) => self.f_start[s * (self.n + 1) + t] + (l - t),
        }
    }

    /// The cells with l - s = d, D cells first.
    fn diagonal(&self, d: usize) -> Vec<Cell> {
        let n = self.n;
        let mut cells: Vec<Cell> = (1..=n - d).map(|s| Cell::D(s, s + d)).collect();
        for s in 2..=n - d {
            cells.extend((s + 1..=s + d).map(|t| Cell::F(s, t, s + d)));
        }
        cells
    }

    /// The number of options of `cell`: its work per slot.
    fn option_count(&self, cell: Cell) -> usize {
        match cell {
            Cell::D(s, l) => 1 + (l - s),
            Cell::F(_, t, l) => 1 + (l - t),
        }
    }
}

/// What a transition does, for reconstruction.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// D: F_all^s[o] with option o, sub-problem, B^s.
    All(usize),
    /// D or F: F_ck^s, a child that dies at B^{t'}, then the rest.
    Ck,
    /// F: F_none^s, then the same problem one stage up.
    None,
}

/// One option of a cell: `base + first(m - shift) + second(m)` for
/// `m >= from`, where a missing term counts 0.
#[derive(Clone, Copy, Debug)]
struct Choice {
    kind: Move,
    base: f64,
    from: usize,
    first: Option<(Cell, usize)>,
    second: Option<Cell>,
}

/// The options of `cell`, in tie-breaking order (see the module doc).
fn options(sc: &SlotChain, cell: Cell) -> Vec<Choice> {
    let mut out = Vec::new();
    for_each_option(sc, cell, |o| out.push(o));
    out
}

/// Calls `f` on every option of `cell`, in tie-breaking order, without
/// allocating (the threshold pass visits about L^4 / 24 of them).
fn for_each_option(sc: &SlotChain, cell: Cell, mut f: impl FnMut(Choice)) {
    let uf = &sc.forward_time;
    let out = &mut f;
    match cell {
        Cell::D(s, l) => {
            // One F_all option per way to record stage s (see the module doc,
            // "Options"); option 0 is the expression used before options existed.
            for o in 0..sc.option_count(s) {
                let r = sc.recording(s, o);
                out(Choice {
                    kind: Move::All(o),
                    base: uf[s] + r.backward_time,
                    from: sc.forward_all_need_with(s, l, o).max(sc.backward_need_with(s, o)),
                    first: (s < l).then_some((Cell::D(s + 1, l), r.saved)),
                    second: None,
                });
            }
            if s < l {
                let from = sc.forward_ck_need(s, l);
                for t2 in s + 1..=l {
                    let first =
                        if t2 == s + 1 { (Cell::D(s + 1, l), sc.output[s]) } else { (Cell::F(s + 1, t2, l), 0) };
                    out(Choice {
                        kind: Move::Ck,
                        base: uf[s],
                        from,
                        first: Some(first),
                        second: Some(Cell::D(s, t2 - 1)),
                    });
                }
            }
        }
        Cell::F(s, t, l) => {
            let from = sc.forward_none_need(s, l);
            let next = if s + 1 == t { (Cell::D(t, l), sc.output[s]) } else { (Cell::F(s + 1, t, l), 0) };
            out(Choice { kind: Move::None, base: uf[s], from, first: Some(next), second: None });
            for t2 in t + 1..=l {
                out(Choice {
                    kind: Move::Ck,
                    base: uf[s],
                    from,
                    first: Some((Cell::F(s + 1, t2, l), sc.output[s - 1])),
                    second: Some(Cell::F(s, t, t2 - 1)),
                });
            }
        }
    }
}

/// Table size and work of a fill, known before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// Bytes of the cost rows and their bookkeeping.
    pub table_bytes: u64,
    /// Slot-option evaluations (1 to 3 ns each on one core, measured).
    pub work: u64,
}

/// Bytes of bookkeeping per cell: its threshold and its row header.
const CELL_BYTES: u64 = 8 + 32;

/// An upper bound of [`Thresholds::estimate`] that needs no thresholds: every row
/// full, `m_slots + 1` entries, for a chain without options (a stage with k
/// options adds k - 1 F_all options to each of its at most L + 1 D cells, a
/// small term beside the L^4 / 24 of the F cells; [`upper_estimate_shared`]
/// counts them). O(L^2).
pub fn upper_estimate(len: usize, m_slots: usize) -> Estimate {
    let lay = Layout::new(len + 1);
    let row = (m_slots as u64).saturating_add(1);
    let mut options = 0u64;
    for l in 1..=lay.n {
        // D(s, l) has 1 + l - s options; for each t, the t - 2 cells F(s, t, l)
        // (2 <= s < t) have 1 + l - t each.
        for s in 1..=l {
            options += 1 + (l - s) as u64;
        }
        for t in 3..=l {
            options += (t as u64 - 2) * (1 + (l - t) as u64);
        }
    }
    let cells = lay.cells() as u64;
    Estimate {
        table_bytes: cells.saturating_mul(CELL_BYTES).saturating_add(cells.saturating_mul(row).saturating_mul(8)),
        work: options.saturating_mul(row),
    }
}

/// [`upper_estimate`] counting only the rows [`Thresholds::fill`] fills: one group
/// (s, l) per distinct content (issue 25, see [`Thresholds::new`]), at the
/// budget in slots of `chain` under `slots`; every cell still takes its
/// bookkeeping. The caller keeps L within [`MAX_STAGES`]. O(L^2).
pub fn upper_estimate_shared(chain: &Chain, slots: Slots) -> Estimate {
    let sc = SlotChain::new(chain, slots);
    let groups = if shares_groups(&sc) { Distinct::with_input(&sc) } else { Distinct::new(&sc, false) };
    let row = (slots.capacity as u64).saturating_add(1);
    let (mut options, mut rows) = (0u64, 0u64);
    for id in 0..groups.len() {
        let (s, l) = groups.rep(id);
        // D(s, l): F_all per option of stage s, F_ck per split.
        options += (sc.option_count(s) + l - s) as u64;
        rows += 1;
        if s >= 2 {
            // F(s, t, l), t in s+1..=l: 1 + l - t options each.
            let k = (l - s) as u64;
            options += k * (k + 1) / 2;
            rows += k;
        }
    }
    let cells = Layout::new(sc.n).cells() as u64;
    Estimate {
        table_bytes: cells.saturating_mul(CELL_BYTES).saturating_add(rows.saturating_mul(row).saturating_mul(8)),
        work: options.saturating_mul(row),
    }
}

/// A cell's smallest feasible m from those of earlier diagonals: the (max,
/// min) form of its options.
fn threshold_of(sc: &SlotChain, lay: &Layout, threshold: &[usize], cell: Cell) -> usize {
    let mut best = NEVER;
    for_each_option(sc, cell, |o| {
        let first = o.first.map_or(0, |(c, shift)| threshold[lay.index(c)].saturating_add(shift));
        let second = o.second.map_or(0, |c| threshold[lay.index(c)]);
        best = best.min(o.from.max(first).max(second));
    });
    best
}

/// The thresholds of D(s, l) and of every F(s, t, l): [`threshold_of`], with
/// the F_ck options of the F cells (nearly all of the L^4 / 24) read as two
/// contiguous runs, F(s+1, t', l) gathered once for the group and
/// F(s, t, t'-1) laid out consecutively (see [`Layout`]). Debug builds check
/// each against the generic form.
fn group_thresholds(sc: &SlotChain, lay: &Layout, threshold: &[usize], s: usize, l: usize) -> Vec<(Cell, usize)> {
    let mut out = vec![(Cell::D(s, l), threshold_of(sc, lay, threshold, Cell::D(s, l)))];
    if s < 2 {
        return out;
    }
    let shift = sc.output[s - 1];
    // first[k]: the child F(s+1, t', l) for t' = s + 2 + k, with a^{s-1} held below it.
    let first: Vec<usize> =
        (s + 2..=l).map(|t2| threshold[lay.index(Cell::F(s + 1, t2, l))].saturating_add(shift)).collect();
    for t in s + 1..=l {
        let next = if s + 1 == t {
            threshold[lay.index(Cell::D(t, l))].saturating_add(sc.output[s])
        } else {
            threshold[lay.index(Cell::F(s + 1, t, l))]
        };
        let rest = lay.index(Cell::F(s, t, t));
        let rest = &threshold[rest..rest + (l - t)];
        let best = first[t - 1 - s..].iter().zip(rest).fold(next, |best, (&a, &b)| best.min(a.max(b)));
        let cell = Cell::F(s, t, l);
        let found = sc.forward_none_need(s, l).max(best);
        debug_assert_eq!(found, threshold_of(sc, lay, threshold, cell), "{cell:?}");
        out.push((cell, found));
    }
    out
}

/// True when groups of `sc` may share rows by [`Distinct::with_input`]'s
/// keys: always, now that those keys hold each stage's options as well as its
/// own figures (two stages that differ only in their options are not the same
/// group; `tests/suite/options_floating.rs` checks it). Kept as the one place that
/// says so. O(1).
fn shares_groups(_sc: &SlotChain) -> bool {
    true
}

/// The floating DP before its table is filled: a chain in slots with every
/// cell's smallest feasible m (its threshold), enough to answer feasibility
/// and the minimum peak, and to size the table; [`Thresholds::fill`] fills it.
pub struct Thresholds {
    sc: SlotChain,
    lay: Layout,
    /// The groups (s, l) keyed by content (issue 25): see [`Thresholds::canon`].
    groups: Distinct,
    /// Smallest m at which each cell is feasible (`NEVER` if none).
    threshold: Vec<usize>,
    /// The budget the table is filled for, without a^0 (`None`: below a^0).
    top: Option<usize>,
}

impl Thresholds {
    /// Computes every cell's threshold: O(L^4) time, O(L^3) memory. The
    /// caller keeps L within [`MAX_STAGES`].
    ///
    /// # Repeated stages (issue 25)
    /// The cells of group (s, l), D(s, l) and F(s, t, l), read the figures
    /// of stages s..l, w_d^{s-1} and w_a^{s-1} (the floating activation) and
    /// cells of groups inside s-1..l, and nothing that depends on position
    /// (every row runs up to the same budget). So groups whose stages,
    /// w_d^{s-1} and w_a^{s-1} are the same (`Distinct::with_input` in
    /// [`crate::solve::distinct`]; the first stage apart, its input never
    /// floats) have the same rows, bit
    /// for bit (induction on l - s, the same options in the same order with
    /// the same float operations). [`Thresholds::fill`] fills only the first
    /// occurrence of each distinct group and every read goes through
    /// `Thresholds::canon`; the read-back compares values only, so schedules are
    /// the same too. Thresholds are still computed for every cell (integer
    /// work, no slot factor).
    pub fn new(sc: SlotChain) -> Thresholds {
        Thresholds::new_keyed(sc, true)
    }

    /// [`Thresholds::new`] with every group filled on its own: the plain DP, which
    /// tests and benchmarks compare the shared one with.
    pub fn new_plain(sc: SlotChain) -> Thresholds {
        Thresholds::new_keyed(sc, false)
    }

    fn new_keyed(sc: SlotChain, share: bool) -> Thresholds {
        // `Distinct` keys a group by its stages' own figures; a stage's
        // options are read by the F_all options of D cells, so a chain with
        // options is filled group by group (the plain DP) unless its keys
        // say what the options are (see `shares_groups`).
        let share = share && shares_groups(&sc);
        let groups = if share { Distinct::with_input(&sc) } else { Distinct::new(&sc, false) };
        let lay = Layout::new(sc.n);
        let mut threshold = vec![NEVER; lay.cells()];
        for d in 0..lay.n {
            let groups: Vec<Vec<(Cell, usize)>> =
                (1..=lay.n - d).into_par_iter().map(|s| group_thresholds(&sc, &lay, &threshold, s, s + d)).collect();
            for (cell, t) in groups.into_iter().flatten() {
                threshold[lay.index(cell)] = t;
            }
        }
        let top = sc.slots.capacity.checked_sub(sc.output[0]);
        Thresholds { sc, lay, groups, threshold, top }
    }

    /// The cell whose row `cell` reads: the same cell of the first
    /// occurrence of its group (itself when that is its group).
    fn canon(&self, cell: Cell) -> Cell {
        let (s, l) = match cell {
            Cell::D(s, l) | Cell::F(s, _, l) => (s, l),
        };
        let (s2, l2) = self.groups.rep(self.groups.id(s, l));
        match cell {
            Cell::D(..) => Cell::D(s2, l2),
            Cell::F(_, t, _) => Cell::F(s2, t - s + s2, l2),
        }
    }

    /// Where `cell`'s row is stored.
    fn slot(&self, cell: Cell) -> usize {
        self.lay.index(self.canon(cell))
    }

    /// The options `cell` evaluates per slot: [`Layout::option_count`], plus
    /// one F_all per further way to record stage s in a D cell. O(1).
    fn cell_options(&self, cell: Cell) -> usize {
        match cell {
            Cell::D(s, _) => self.lay.option_count(cell) + self.sc.option_count(s) - 1,
            Cell::F(..) => self.lay.option_count(cell),
        }
    }

    /// True when group (s, l) is the first occurrence of its content.
    fn filled(&self, s: usize, l: usize) -> bool {
        self.groups.rep(self.groups.id(s, l)) == (s, l)
    }

    /// The smallest budget in slots (a^0 included) of any nested sequence
    /// under this rounding: the fill is feasible exactly from there up.
    pub fn min_peak(&self) -> usize {
        self.sc.output[0].saturating_add(self.threshold[self.lay.index(Cell::D(1, self.lay.n))])
    }

    /// True when some nested sequence fits the budget the thresholds were computed for.
    pub fn feasible(&self) -> bool {
        self.min_peak() <= self.sc.slots.capacity
    }

    fn row_len(&self, cell: Cell) -> usize {
        match self.top {
            Some(top) => (top + 1).saturating_sub(self.threshold[self.lay.index(cell)]),
            None => 0,
        }
    }

    /// The exact table size and work of [`Thresholds::fill`]. O(L^3).
    pub fn estimate(&self) -> Estimate {
        let (mut entries, mut work) = (0u64, 0u64);
        for d in 0..self.lay.n {
            for cell in self.lay.diagonal(d) {
                if self.canon(cell) != cell {
                    continue;
                }
                let len = self.row_len(cell) as u64;
                entries += len;
                work += len * self.cell_options(cell) as u64;
            }
        }
        let cells = self.lay.cells() as u64;
        Estimate { table_bytes: cells * CELL_BYTES + entries * 8, work }
    }

    /// Fills the cost rows for every m up to the budget, diagonal by diagonal,
    /// in parallel. `progress(done, total)` is called after each diagonal with
    /// work units. Time and memory as [`Thresholds::estimate`] says.
    pub fn fill(self, progress: Option<&(dyn Fn(u64, u64) + Sync)>) -> Table {
        let total = self.estimate().work;
        let mut rows: Vec<Row> = (0..self.lay.cells()).map(|_| Row::EMPTY).collect();
        let mut done = 0;
        for d in 0..self.lay.n {
            // One task per (s, l): D(s, l) and every F(s, t, l), which share the
            // rows F(s+1, t', l) they read (see `group`).
            let groups: Vec<Vec<(Cell, Row)>> = (1..=self.lay.n - d)
                .into_par_iter()
                .filter(|&s| self.filled(s, s + d))
                .map(|s| self.group(s, s + d, &rows))
                .collect();
            for (cell, row) in groups.into_iter().flatten() {
                done += row.cost.len() as u64 * self.cell_options(cell) as u64;
                rows[self.lay.index(cell)] = row;
            }
            if let Some(p) = progress {
                p(done, total);
            }
        }
        Table { thresholds: self, rows }
    }

    /// The rows of D(s, l) and of F(s, t, l) for every t, from the rows of
    /// earlier diagonals. The F_ck options of all the F cells are applied
    /// by increasing t', so each row F(s+1, t', l) is read once for every t
    /// while it is in cache; the order does not change the minima.
    fn group(&self, s: usize, l: usize, rows: &[Row]) -> Vec<(Cell, Row)> {
        let mut cells = vec![Cell::D(s, l)];
        if s >= 2 {
            cells.extend((s + 1..=l).map(|t| Cell::F(s, t, l)));
        }
        let mut out: Vec<(Cell, Row)> = cells.iter().map(|&c| (c, self.empty_row(c))).collect();
        let opts: Vec<Vec<Choice>> = cells.iter().map(|&c| options(&self.sc, c)).collect();
        // D(s, l): all its options; F(s, t, l): its F_none option (index 0).
        for o in &opts[0] {
            self.apply(&mut out[0].1, o, rows);
        }
        for (i, o) in opts.iter().enumerate().skip(1) {
            self.apply(&mut out[i].1, &o[0], rows);
        }
        // F(s, t, l)'s option for t' is its index t' - t; cell F(s, t, l) is out[t - s].
        if s >= 2 {
            for t2 in s + 2..=l {
                for t in s + 1..t2 {
                    self.apply(&mut out[t - s].1, &opts[t - s][t2 - t], rows);
                }
            }
        }
        out
    }

    fn empty_row(&self, cell: Cell) -> Row {
        match self.row_len(cell) {
            0 => Row::EMPTY,
            len => Row { lo: self.threshold[self.lay.index(cell)], cost: vec![INF; len] },
        }
    }

    /// Lowers `row` to option `o` wherever that is better.
    fn apply(&self, row: &mut Row, o: &Choice, rows: &[Row]) {
        if row.cost.is_empty() {
            return;
        }
        let top = row.lo + row.cost.len() - 1;
        let mut start = row.lo.max(o.from);
        let first = o.first.map(|(c, shift)| (&rows[self.slot(c)], shift));
        let second = o.second.map(|c| &rows[self.slot(c)]);
        if let Some((r, shift)) = first {
            start = start.max(r.lo.saturating_add(shift));
        }
        if let Some(r) = second {
            start = start.max(r.lo);
        }
        if start > top {
            return;
        }
        let out = &mut row.cost[start - row.lo..];
        // The same expression, in the same order, as `Table::value_of`.
        let base = o.base;
        match (first, second) {
            (None, _) => out.iter_mut().for_each(|c| *c = c.min(base)),
            (Some((a, shift)), None) => {
                let a = &a.cost[start - shift - a.lo..];
                out.iter_mut().zip(a).for_each(|(c, &x)| *c = c.min(base + x));
            }
            (Some((a, shift)), Some(b)) => {
                let a = &a.cost[start - shift - a.lo..];
                let b = &b.cost[start - b.lo..];
                out.iter_mut().zip(a).zip(b).for_each(|((c, &x), &y)| *c = c.min(base + x + y));
            }
        }
    }
}

/// One cell's costs for m = lo, lo + 1, ... up to the table's budget.
#[derive(Clone, Debug)]
struct Row {
    lo: usize,
    cost: Vec<f64>,
}

impl Row {
    const EMPTY: Row = Row { lo: NEVER, cost: Vec::new() };

    fn at(&self, m: usize) -> f64 {
        match m.checked_sub(self.lo) {
            Some(i) => self.cost.get(i).copied().unwrap_or(INF),
            None => INF,
        }
    }
}

/// The filled program for one chain and one budget: answers that budget and
/// every smaller one.
pub struct Table {
    thresholds: Thresholds,
    rows: Vec<Row>,
}

impl Table {
    /// The discretization the table was built with.
    pub fn slots(&self) -> Slots {
        self.thresholds.sc.slots
    }

    fn cost(&self, cell: Cell, m: usize) -> f64 {
        self.rows[self.thresholds.slot(cell)].at(m)
    }

    /// The value of option `o` at `m`, computed exactly as the fill does.
    fn value_of(&self, o: &Choice, m: usize) -> f64 {
        if m < o.from {
            return INF;
        }
        let first = match o.first {
            None => return o.base,
            Some((c, shift)) => match m.checked_sub(shift) {
                Some(m2) => self.cost(c, m2),
                None => return INF,
            },
        };
        match o.second {
            None => o.base + first,
            Some(c) => o.base + first + self.cost(c, m),
        }
    }

    /// Best makespan for a budget of `m_slots` slots (at most the table's), or
    /// infinity when no nested sequence fits.
    pub fn makespan(&self, m_slots: usize) -> f64 {
        match m_slots.checked_sub(self.thresholds.sc.output[0]) {
            Some(m) if m_slots <= self.thresholds.sc.slots.capacity => self.cost(Cell::D(1, self.thresholds.lay.n), m),
            _ => INF,
        }
    }

    /// The operation sequence reaching [`Table::makespan`] for `m_slots` slots,
    /// or `None` when infeasible. O(L) per operation.
    pub fn sequence(&self, m_slots: usize) -> Option<Vec<Op>> {
        if !self.makespan(m_slots).is_finite() {
            return None;
        }
        Some(self.sub_sequence(Cell::D(1, self.thresholds.sc.n), m_slots - self.thresholds.sc.output[0]))
    }

    /// The chain in slots the table was filled for.
    pub(crate) fn slot_chain(&self) -> &SlotChain {
        &self.thresholds.sc
    }

    /// The options of `cell` as the in-flight spine reads them
    /// ([`crate::solve::in_flight`]): (the operation that starts it, whether
    /// B^s ends it, base time, threshold, first sub-problem with its shift,
    /// second sub-problem), in tie-breaking order. O(L).
    pub(crate) fn spine_options(&self, cell: Cell) -> Vec<SpineOption> {
        let s = match cell {
            Cell::D(s, _) | Cell::F(s, _, _) => s,
        };
        options(&self.thresholds.sc, cell)
            .into_iter()
            .map(|o| SpineOption {
                op: match o.kind {
                    Move::All(option) => Op::FAll(s, option),
                    Move::Ck => Op::FCk(s),
                    Move::None => Op::FNone(s),
                },
                base: o.base,
                from: o.from,
                first: o.first,
                second: o.second,
            })
            .collect()
    }

    /// The breakpoints of `cell`'s row up to `cap`: (m, value) where it
    /// drops, by increasing m. O(cap - threshold).
    pub(crate) fn steps(&self, cell: Cell, cap: usize) -> Vec<(usize, f64)> {
        let row = &self.rows[self.thresholds.slot(cell)];
        let mut out: Vec<(usize, f64)> = Vec::new();
        for (i, &c) in row.cost.iter().enumerate() {
            let m = row.lo + i;
            if m > cap {
                break;
            }
            if c.is_finite() && out.last().is_none_or(|p| c < p.1) {
                out.push((m, c));
            }
        }
        out
    }

    /// The sequence of `cell` from m slots (its row finite at m). O(L) per
    /// operation.
    pub(crate) fn sub_sequence(&self, cell: Cell, m: usize) -> Vec<Op> {
        enum Task {
            Solve(Cell, usize),
            Emit(Op),
        }
        let sc = &self.thresholds.sc;
        let mut ops = Vec::new();
        let mut stack = vec![Task::Solve(cell, m)];
        while let Some(task) = stack.pop() {
            let (cell, m) = match task {
                Task::Emit(op) => {
                    ops.push(op);
                    continue;
                }
                Task::Solve(cell, m) => (cell, m),
            };
            let want = self.cost(cell, m);
            let o = options(sc, cell)
                .into_iter()
                .find(|o| self.value_of(o, m) == want)
                .expect("a finite cell has an option reaching its value");
            let s = match cell {
                Cell::D(s, _) | Cell::F(s, _, _) => s,
            };
            ops.push(match o.kind {
                Move::All(option) => Op::FAll(s, option),
                Move::Ck => Op::FCk(s),
                Move::None => Op::FNone(s),
            });
            if matches!(o.kind, Move::All(_)) {
                stack.push(Task::Emit(Op::B(s)));
            }
            // Stack order: the first sub-problem runs first.
            if let Some(c) = o.second {
                stack.push(Task::Solve(c, m));
            }
            if let Some((c, shift)) = o.first {
                stack.push(Task::Solve(c, m - shift));
            }
        }
        ops
    }
}

/// One option of a floating cell, for [`crate::solve::in_flight`]: `op`,
/// then `first` (at m - its shift), then `second` (at m), then B^s when `op`
/// is an F_all; it costs `base + first + second` and needs m >= `from`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpineOption {
    pub op: Op,
    pub base: f64,
    pub from: usize,
    pub first: Option<(Cell, usize)>,
    pub second: Option<Cell>,
}

/// A lower bound, in bytes, of the peak of every valid sequence (nested or
/// not), from what any sequence must do: a^0 stays until B^1; each B^l holds
/// delta^l, abar^l, a^{l-1}, delta^{l-1}; each F_all^l holds its input and some
/// delta^h with h >= l; each stage's first forward runs beside delta^{L+1}.
/// With options, abar^l and the transients are those of the option that
/// makes each figure smallest (a chain without options gets the same bound as
/// before). When the nested minimum equals it, that minimum is the exact
/// minimum of any sequence. O(L + number of options).
pub fn any_peak_lower_bound(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let (a, g) = (|l| chain.output_size(l), |l| chain.gradient_size(l));
    let a0 = |l: usize| if l >= 2 { a(0) } else { 0 };
    let mut bound = a(0) + g(n);
    // Visited from the loss down, so `min_grad` is the smallest w_d^h, h >= l.
    let mut min_grad = u64::MAX;
    for l in (1..=n).rev() {
        min_grad = min_grad.min(g(l));
        let of = chain.forward_overhead(l);
        let recordings = (0..chain.option_count(l)).map(|o| chain.recording(l, o));
        // The smallest abar^l + o_b - f_b (B^l) and abar^l + o_f (F_all^l) over the options.
        let (backward, forward) = recordings.fold((u64::MAX, u64::MAX), |(b, f), r| {
            (b.min(r.saved_size + r.backward_overhead - r.backward_frees), f.min(r.saved_size + r.forward_overhead))
        });
        bound = bound.max(a0(l) + g(l) + a(l - 1) + g(l - 1) + backward);
        bound = bound.max(a0(l) + a(l - 1) + forward + min_grad);
        if l < n {
            // Its first forward: F_ck, F_none or some F_all^l[o] (each at least a^l + o_f without options).
            bound = bound.max(a0(l) + a(l - 1) + (a(l) + of).min(forward) + g(n));
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::simulate::simulate;

    fn chain() -> Chain {
        let stages = vec![Stage::simple(1.0, 2.0, 5, 9), Stage::simple(2.0, 1.0, 2, 7), Stage::simple(1.0, 3.0, 6, 6)];
        Chain::new("c", 3, stages, Stage::zero_loss()).unwrap()
    }

    #[test]
    fn layout_is_a_bijection() {
        for n in 1..=9 {
            let lay = Layout::new(n);
            let mut seen = vec![false; lay.cells()];
            for d in 0..n {
                for cell in lay.diagonal(d) {
                    let i = lay.index(cell);
                    assert!(!seen[i], "{cell:?} collides");
                    seen[i] = true;
                }
            }
            assert!(seen.iter().all(|&b| b), "n = {n}");
        }
    }

    #[test]
    fn ample_memory_is_store_all() {
        let c = chain();
        let table = Thresholds::new(SlotChain::new(&c, Slots::new(1000, 1000))).fill(None);
        assert_eq!(table.makespan(1000), c.store_all_time());
        let ops = table.sequence(1000).unwrap();
        assert!(ops.iter().all(|op| matches!(op, Op::FAll(..) | Op::B(_))));
        assert_eq!(simulate(&c, &ops).unwrap().makespan, c.store_all_time());
    }

    #[test]
    fn threshold_is_where_the_table_turns_finite() {
        let c = chain();
        let p = crate::solve::dp::min_peak_exact::<crate::solve::dp::Floating>(&c);
        let table = Thresholds::new(SlotChain::new(&c, Slots::new(100, 100))).fill(None);
        let first = (0..=100).find(|&m| table.makespan(m).is_finite()).unwrap();
        assert_eq!(first as u64, p);
        let replay = simulate(&c, &table.sequence(first).unwrap()).unwrap();
        assert_eq!(replay.peak_memory, p);
        assert!(p >= any_peak_lower_bound(&c));
        assert_eq!(table.sequence(first - 1), None);
    }

    #[test]
    fn estimate_bounds_the_fill() {
        let c = crate::synthetic::network_like(3, 12);
        let plan = Thresholds::new(SlotChain::new(&c, Slots::new(200 << 20, 300)));
        let est = plan.estimate();
        let upper = upper_estimate(12, plan.sc.slots.capacity);
        assert!(est.table_bytes <= upper.table_bytes && est.work <= upper.work, "{est:?} {upper:?}");
        let table = plan.fill(None);
        let entries: usize = table.rows.iter().map(|r| r.cost.len()).sum();
        assert_eq!(est.table_bytes, table.rows.len() as u64 * CELL_BYTES + entries as u64 * 8);
    }
}
