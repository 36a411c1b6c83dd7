//! Exhaustive search: the shortest path over memory states, exact in bytes.
//!
//! This is the oracle every other solver is tested against: it explores every
//! valid sequence of [the model](crate::model)'s operation table (as the simulator accepts
//! them) and so finds the true optimum, feasibility included.
//!
//! A state is how each activation a^0..a^{L+1} is held (absent, plain, or
//! saved with option o, see [the model](crate::model)'s options) plus the
//! index t of the gradient delta^t in memory: at most
//! (L+2) prod_l (2 + k_l) states for k_l options of stage l (3^(L+2) (L+2)
//! without options), with O(L + sum_l k_l) moves each; Dijkstra runs in
//! O(V log V + E). Only moves whose output can still be used are generated
//! (exactly those the simulator accepts: `F_all^l[o]` for every option o of
//! stage l), so nothing optimal is cut.
//!
//! # Options
//! A held abar^l remembers the option o it was recorded with: it weighs
//! w_abar^l\[o\] until `B^l`, and that `B^l` takes u_b^l + r^l\[o\] with
//! transient o_b^l\[o\], the simulator's rules. Two states that differ only in
//! the option of a held abar are different states (neither dominates the
//! other in general: one may be smaller and the other faster to consume), so
//! every option is explored and the search stays exact. Its size is bounded
//! through [`equivalent_stages`], which callers compare with their stage
//! limits instead of the plain length.
//!
//! [`fastest_nested`] and [`min_peak_nested`] search the same graph restricted
//! to *nested* sequences (every forward reads the highest-indexed activation in
//! memory; the paper's weak memory persistence): the exact oracle for the class
//! the floating DP optimises over (see `floating`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::Held;
use crate::solve::distinct::FastHasher;

/// Largest chain (number of stages L, without the loss) the search accepts.
/// Few of the 3^(L+2) states are reachable: L = 14 takes about a second on a
/// network-like chain, and each further stage multiplies that by about 2.3.
/// A chain with options is held to this by its [`equivalent_stages`] (never
/// below L).
pub const MAX_STAGES: usize = 14;

/// Packed state: 2 bits per activation a^0..a^{L+1} (bits 0..48), the
/// gradient index at bit 48, and the option of each held abar^l in 4 bits at
/// bit 64 + 4 l (zero for option 0, so a chain without options uses the same
/// low 64 bits, in the same order, as before options existed).
type State = u128;

const GRAD_SHIFT: u32 = 48;
const OPTION_SHIFT: u32 = 64;

/// The number of stages of a chain *without* options whose memory states
/// are at least as many as `chain`'s: the smallest E with
/// prod_{l=1..=L} (2 + k_l) <= 3^E, for k_l the options of stage l (each
/// activation is absent, plain or saved with one of k_l options). L for a
/// chain without options. Every stage limit on exhaustive search
/// ([`MAX_STAGES`], the guards', `auto`'s, the reports') is compared with
/// this, so options cannot make the search run away. O(L).
pub fn equivalent_stages(chain: &Chain) -> usize {
    // weight = prod / 3^e <= 1 after each stage (exactly 1.0 throughout
    // without options: 3.0 / 3.0 is exact).
    let (mut e, mut weight) = (0usize, 1.0f64);
    for l in 1..=chain.len() {
        weight *= (2 + chain.option_count(l)) as f64;
        while weight > 1.0 + 1e-9 {
            weight /= 3.0;
            e += 1;
        }
    }
    e
}

fn held(state: State, l: usize) -> Held {
    match (state >> (2 * l)) & 3 {
        0 => Held::Absent,
        1 => Held::Plain,
        _ => Held::Saved,
    }
}

fn with_held(state: State, l: usize, h: Held) -> State {
    let code = match h {
        Held::Absent => 0,
        Held::Plain => 1,
        Held::Saved => 2,
    };
    (state & !(3 << (2 * l))) | (code << (2 * l))
}

/// The option the held abar^l of `state` was recorded with (0 when not saved).
/// Activations a^16 and above (chains longer than [`MAX_STAGES`], which
/// callers refuse with options) have no option bits and read option 0.
fn option(state: State, l: usize) -> usize {
    if l >= 16 {
        return 0;
    }
    ((state >> (OPTION_SHIFT + 4 * l as u32)) & 15) as usize
}

fn with_option(state: State, l: usize, o: usize) -> State {
    if l >= 16 {
        assert_eq!(o, 0, "exhaustive search packs options of a^0..=a^15 only: callers keep chains within MAX_STAGES");
        return state;
    }
    let shift = OPTION_SHIFT + 4 * l as u32;
    (state & !(15 << shift)) | ((o as State) << shift)
}

fn grad(state: State) -> usize {
    ((state >> GRAD_SHIFT) & 255) as usize
}

fn with_grad(state: State, t: usize) -> State {
    (state & !(255 << GRAD_SHIFT)) | ((t as State) << GRAD_SHIFT)
}

/// Bytes stored in `state`.
fn stored(fig: &Figures, state: State) -> u64 {
    let mut total = fig.gradient[grad(state)];
    for l in 0..=fig.n {
        total += match held(state, l) {
            Held::Absent => 0,
            Held::Plain => fig.output[l],
            Held::Saved => fig.recordings[l][option(state, l)].saved_size,
        };
    }
    total
}

/// The figures of a chain the moves read, gathered once per search (indexed
/// like the model; `recordings[l][o]` is [`Chain::recording`]). O(L + options).
struct Figures {
    n: usize,
    output: Vec<u64>,
    gradient: Vec<u64>,
    forward_time: Vec<f64>,
    forward_overhead: Vec<u64>,
    recordings: Vec<Vec<crate::chain::Recording>>,
}

impl Figures {
    fn new(chain: &Chain) -> Figures {
        let n = chain.len() + 1;
        let stage = |f: &dyn Fn(usize) -> f64| -> Vec<f64> { std::iter::once(0.0).chain((1..=n).map(f)).collect() };
        Figures {
            n,
            output: (0..=n).map(|l| chain.output_size(l)).collect(),
            gradient: (0..=n).map(|l| chain.gradient_size(l)).collect(),
            forward_time: stage(&|l| chain.forward_time(l)),
            forward_overhead: std::iter::once(0).chain((1..=n).map(|l| chain.forward_overhead(l))).collect(),
            recordings: std::iter::once(Vec::new())
                .chain((1..=n).map(|l| (0..chain.option_count(l)).map(|o| chain.recording(l, o)).collect()))
                .collect(),
        }
    }
}

// SipHash on 128-bit states made the search measurably slower than on the
// 64-bit states of a chain without options; the maps are private and never
// iterated, so the hasher changes nothing but speed.
type StateMap<V> = HashMap<State, V, BuildHasherDefault<FastHasher>>;

/// Every move out of `state`: (operation, next state, memory while it runs, time).
/// With `nested`, only forwards whose input is the highest activation held.
fn moves(fig: &Figures, state: State, nested: bool, out: &mut Vec<(Op, State, u64, f64)>) {
    out.clear();
    let t = grad(state);
    if t == 0 {
        return;
    }
    let top = (0..=t).rev().find(|&l| held(state, l) != Held::Absent).unwrap_or(0);
    let base = stored(fig, state);
    if held(state, t) == Held::Saved && held(state, t - 1) != Held::Absent {
        let r = &fig.recordings[t][option(state, t)];
        let mut next = with_option(with_held(state, t, Held::Absent), t, 0);
        if held(state, t - 1) == Held::Plain {
            next = with_held(next, t - 1, Held::Absent);
        }
        let peak = base + fig.gradient[t - 1] + r.backward_overhead - r.backward_frees;
        out.push((Op::B(t), with_grad(next, t - 1), peak, r.backward_time));
    }
    for l in 1..=t {
        let input = held(state, l - 1);
        if input == Held::Absent || held(state, l) != Held::Absent || (nested && l - 1 != top) {
            continue;
        }
        let (uf, of) = (fig.forward_time[l], fig.forward_overhead[l]);
        let saved = with_held(state, l, Held::Saved);
        for (o, r) in fig.recordings[l].iter().enumerate() {
            let peak_all = base + r.saved_size + r.forward_overhead;
            out.push((Op::FAll(l, o), with_option(saved, l, o), peak_all, uf));
        }
        if l < t {
            let peak = base + fig.output[l] + of;
            out.push((Op::FCk(l), with_held(state, l, Held::Plain), peak, uf));
            if input == Held::Plain {
                let next = with_held(with_held(state, l, Held::Plain), l - 1, Held::Absent);
                out.push((Op::FNone(l), next, peak, uf));
            }
        }
    }
}

/// What the search minimises, lexicographically: a peak in exact bytes (0
/// throughout when only time matters), then time. Bytes stay integers: as
/// f64 a peak above 2^53 rounds, and the search then picks a sequence whose
/// exact peak is above the smallest.
#[derive(Clone, Copy, PartialEq)]
struct Label {
    bytes: u64,
    time: f64,
}

impl Label {
    fn cmp(&self, other: &Label) -> Ordering {
        self.bytes.cmp(&other.bytes).then(self.time.total_cmp(&other.time))
    }
}

struct Entry {
    label: Label,
    state: State,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap. Ties broken by state for determinism.
    fn cmp(&self, other: &Self) -> Ordering {
        other.label.cmp(&self.label).then_with(|| other.state.cmp(&self.state))
    }
}

/// Dijkstra from the start state to delta^0 with a monotone label update.
/// Returns the best label and its operation sequence.
fn search(
    chain: &Chain,
    nested: bool,
    step: impl Fn(Label, u64, f64) -> Option<Label>,
    start_label: Label,
) -> Option<(Label, Vec<Op>)> {
    let n = chain.len() + 1;
    let start = with_grad(with_held(0, 0, Held::Plain), n);
    let fig = Figures::new(chain);
    let mut best: StateMap<Label> = StateMap::default();
    let mut prev: StateMap<(State, Op)> = StateMap::default();
    let mut heap = BinaryHeap::new();
    best.insert(start, start_label);
    heap.push(Entry { label: start_label, state: start });
    let mut buf = Vec::new();
    while let Some(Entry { label, state }) = heap.pop() {
        if best.get(&state).is_some_and(|b| b.cmp(&label) == Ordering::Less) {
            continue;
        }
        if grad(state) == 0 {
            let mut ops = Vec::new();
            let mut s = state;
            while let Some(&(p, op)) = prev.get(&s) {
                ops.push(op);
                s = p;
            }
            ops.reverse();
            return Some((label, ops));
        }
        moves(&fig, state, nested, &mut buf);
        for &(op, next, peak, time) in &buf {
            let Some(cand) = step(label, peak, time) else { continue };
            let better = match best.get(&next) {
                None => true,
                Some(b) => cand.cmp(b) == Ordering::Less,
            };
            if better {
                best.insert(next, cand);
                prev.insert(next, (state, op));
                heap.push(Entry { label: cand, state: next });
            }
        }
    }
    None
}

/// The fastest valid sequence whose peak memory is at most `budget` bytes,
/// with its makespan, or `None` when no sequence fits.
///
/// Among equally fast sequences the one found first is returned, which is
/// deterministic. Worst case about 3^(L+2) (L+2) states, (L+2) prod_l
/// (2 + k_l) with options: callers keep [`equivalent_stages`] within
/// [`MAX_STAGES`].
pub fn fastest(chain: &Chain, budget: u64) -> Option<(f64, Vec<Op>)> {
    fastest_in(chain, budget, false)
}

/// Like [`fastest`], over nested sequences only.
pub fn fastest_nested(chain: &Chain, budget: u64) -> Option<(f64, Vec<Op>)> {
    fastest_in(chain, budget, true)
}

fn fastest_in(chain: &Chain, budget: u64, nested: bool) -> Option<(f64, Vec<Op>)> {
    let initial = stored(&Figures::new(chain), with_grad(with_held(0, 0, Held::Plain), chain.len() + 1));
    if initial > budget {
        return None;
    }
    let step = |l: Label, peak: u64, time: f64| (peak <= budget).then_some(Label { bytes: 0, time: l.time + time });
    search(chain, nested, step, Label { bytes: 0, time: 0.0 }).map(|(l, ops)| (l.time, ops))
}

/// The fastest valid sequence for a pipeline rank holding `in_flight`
/// micro-batches at once: its peak plus `in_flight - 1` times its residue
/// (the bytes it stores just before B^{L+1}, see
/// [`crate::solve::in_flight`]) is at most `budget`. `None` when no sequence
/// fits. `in_flight` = 1 is [`fastest`].
///
/// Exact over every schedule, by one bi-criteria search: before B^{L+1} a
/// partial sequence is its time and the peak it reached, after it its time
/// and its residue R (every later move must fit `budget - (in_flight - 1)
/// R`); a label is kept only when no label of its state is both as fast and
/// as small. Labels leave the queue by their time plus a lower bound on the
/// time left (A*), so the first sequence to reach delta^0 is the fastest.
/// Cost: the states times the labels a state keeps (a handful on
/// network-like chains). Issue 36: it searched once per residue a schedule
/// can have, thousands of searches (see docs/hardening.md for the times).
pub fn fastest_in_flight(chain: &Chain, budget: u64, in_flight: usize) -> Option<(f64, Vec<Op>)> {
    fastest_in_flight_in(chain, budget, in_flight, false)
}

/// Like [`fastest_in_flight`], over nested sequences only: the oracle of the
/// floating DP with micro-batches in flight.
pub fn fastest_nested_in_flight(chain: &Chain, budget: u64, in_flight: usize) -> Option<(f64, Vec<Op>)> {
    fastest_in_flight_in(chain, budget, in_flight, true)
}

fn fastest_in_flight_in(chain: &Chain, budget: u64, in_flight: usize, nested: bool) -> Option<(f64, Vec<Op>)> {
    if in_flight <= 1 {
        return fastest_in(chain, budget, nested);
    }
    search_in_flight(chain, nested, in_flight as u64 - 1, Goal::Fastest(budget)).map(|(key, ops)| (key.time, ops))
}

/// The smallest budget of any schedule for a pipeline rank holding
/// `in_flight` micro-batches: the least peak plus `in_flight - 1` residues
/// over every valid sequence, exact in bytes; `None` when every sequence's
/// figure is above `u64::MAX` bytes. `in_flight` = 1 is [`min_peak`]'s.
///
/// One bi-criteria search: before B^{L+1} a partial
/// sequence is the peak it reached, after it the figure so far (peak plus
/// `in_flight - 1` residues) and its residue; the first sequence to reach
/// delta^0 has the least figure. Issue 36: a bisection over the budget with
/// [`fastest_in_flight`], O(log M) searches, each once per residue.
pub fn min_peak_in_flight(chain: &Chain, in_flight: usize) -> Option<u64> {
    if in_flight <= 1 {
        return Some(min_peak(chain).0);
    }
    search_in_flight(chain, false, in_flight as u64 - 1, Goal::LeastMemory).map(|(key, _)| key.bytes)
}

/// What [`search_in_flight`] minimises.
#[derive(Clone, Copy)]
enum Goal {
    /// Time, with every move's memory plus the held residues within the budget.
    Fastest(u64),
    /// The peak plus the held residues, then time.
    LeastMemory,
}

/// A label of [`search_in_flight`]: its key (what it minimises, compared as
/// bytes, then time) and its second criterion, `small`: before B^{L+1} the
/// peak reached (for [`Goal::Fastest`]; 0 for [`Goal::LeastMemory`], whose
/// bytes are that peak), after it the residue.
#[derive(Clone, Copy)]
struct Labelled {
    key: Label,
    /// The time so far plus [`time_left`] of its state: the queue's order
    /// after the key's bytes (A*).
    reach: f64,
    small: u64,
    state: State,
    /// The settled label it extends (`u32::MAX`: the start), and the move.
    parent: u32,
    op: Op,
}

impl PartialEq for Labelled {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Labelled {}
impl PartialOrd for Labelled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Labelled {
    // Reversed for BinaryHeap (a max-heap); every field breaks ties, for
    // determinism.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .key
            .bytes
            .cmp(&self.key.bytes)
            .then(other.reach.total_cmp(&self.reach))
            .then(other.small.cmp(&self.small))
            .then_with(|| other.state.cmp(&self.state))
            .then_with(|| other.parent.cmp(&self.parent))
            .then_with(|| other.op.cmp(&self.op))
    }
}

/// A lower bound on the time from `state` to delta^0: each stage l at or
/// below the gradient's index still runs B^l, and before it F_all^l unless
/// abar^l is held (its fastest option's backward then). Consistent: no move
/// lowers it by more than its own time. O(L).
fn time_left(fig: &Figures, state: State) -> f64 {
    (1..=grad(state))
        .map(|l| match held(state, l) {
            Held::Saved => fig.recordings[l][option(state, l)].backward_time,
            _ => fig.forward_time[l] + fig.recordings[l].iter().map(|r| r.backward_time).fold(f64::INFINITY, f64::min),
        })
        .sum()
}

/// The bi-criteria search behind [`fastest_in_flight`] and
/// [`min_peak_in_flight`], with `others` micro-batches holding their residue.
///
/// A label (key, small) of a state dominates another of the same state that
/// is neither smaller in key nor in `small`: every way on from the second is
/// open to the first (a smaller peak so far, or a smaller residue, leaves
/// more memory to every later move) and ends no worse. Labels leave the
/// queue by the key's bytes, then by their time plus [`time_left`] (A*: a
/// consistent bound, so neither falls along a move, and the labels of one
/// state leave in key order): a label is settled only if its `small` is
/// below that of every label its state settled before, and the first
/// settled at delta^0 is the best (up to float rounding of the sums of
/// times, which can order two labels within a few ulps the other way). B^{L+1} runs only from states
/// holding a^0 (without it B^1 never can), and a residue whose held copies
/// overflow `u64` fits no budget. O(V K log(V K)) for V states and K labels
/// a state settles.
fn search_in_flight(chain: &Chain, nested: bool, others: u64, goal: Goal) -> Option<(Label, Vec<Op>)> {
    let fig = Figures::new(chain);
    let n = fig.n;
    let start = with_grad(with_held(0, 0, Held::Plain), n);
    let initial = stored(&fig, start);
    let key = match goal {
        Goal::Fastest(budget) if initial > budget => return None,
        Goal::Fastest(_) => Label { bytes: 0, time: 0.0 },
        Goal::LeastMemory => Label { bytes: initial, time: 0.0 },
    };
    // The least `small` each state has settled, and the settled labels'
    // parent and move (to rebuild the sequence).
    let mut smallest: StateMap<u64> = StateMap::default();
    let mut settled: Vec<(u32, Op)> = Vec::new();
    let mut heap = BinaryHeap::new();
    heap.push(Labelled { key, reach: time_left(&fig, start), small: 0, state: start, parent: u32::MAX, op: Op::B(0) });
    let mut buf = Vec::new();
    while let Some(label) = heap.pop() {
        if smallest.get(&label.state).is_some_and(|&s| s <= label.small) {
            continue;
        }
        smallest.insert(label.state, label.small);
        let index = u32::try_from(settled.len()).ok()?;
        settled.push((label.parent, label.op));
        let t = grad(label.state);
        if t == 0 {
            let mut ops = Vec::new();
            let mut at = index;
            while settled[at as usize].0 != u32::MAX {
                ops.push(settled[at as usize].1);
                at = settled[at as usize].0;
            }
            ops.reverse();
            return Some((label.key, ops));
        }
        moves(&fig, label.state, nested, &mut buf);
        for &(op, next, peak, time) in &buf {
            let time = label.key.time + time;
            // (key bytes, small) after the move, or None when it does not fit.
            let after = if t == n && op == Op::B(n) {
                // B^{L+1}: the residue is now known.
                if held(label.state, 0) == Held::Absent {
                    continue;
                }
                let residue = stored(&fig, label.state);
                let Some(held) = residue.checked_mul(others) else { continue };
                match goal {
                    Goal::Fastest(budget) => {
                        let before = label.small.max(peak);
                        (before.checked_add(held).is_some_and(|m| m <= budget)).then_some((0, residue))
                    }
                    Goal::LeastMemory => label.key.bytes.max(peak).checked_add(held).map(|m| (m, residue)),
                }
            } else if t == n {
                // Before B^{L+1}: the peak so far.
                match goal {
                    Goal::Fastest(budget) => (peak <= budget).then_some((0, label.small.max(peak))),
                    Goal::LeastMemory => Some((label.key.bytes.max(peak), 0)),
                }
            } else {
                // After it: every move fits beside the held residues.
                let held = label.small * others;
                match goal {
                    Goal::Fastest(budget) => {
                        (peak.checked_add(held).is_some_and(|m| m <= budget)).then_some((0, label.small))
                    }
                    Goal::LeastMemory => peak.checked_add(held).map(|m| (label.key.bytes.max(m), label.small)),
                }
            };
            let Some((bytes, small)) = after else { continue };
            if smallest.get(&next).is_some_and(|&s| s <= small) {
                continue;
            }
            let reach = time + time_left(&fig, next);
            heap.push(Labelled { key: Label { bytes, time }, reach, small, state: next, parent: index, op });
        }
    }
    None
}

/// The smallest peak memory of any valid sequence (the smallest feasible
/// budget), with the fastest sequence reaching it.
pub fn min_peak(chain: &Chain) -> (u64, Vec<Op>) {
    min_peak_in(chain, false)
}

/// Like [`min_peak`], over nested sequences only.
pub fn min_peak_nested(chain: &Chain) -> (u64, Vec<Op>) {
    min_peak_in(chain, true)
}

fn min_peak_in(chain: &Chain, nested: bool) -> (u64, Vec<Op>) {
    let initial = stored(&Figures::new(chain), with_grad(with_held(0, 0, Held::Plain), chain.len() + 1));
    let step = |l: Label, peak: u64, time: f64| Some(Label { bytes: l.bytes.max(peak), time: l.time + time });
    let (label, ops) = search(chain, nested, step, Label { bytes: initial, time: 0.0 })
        .expect("recomputing from a^0 for every backward is always valid");
    debug_assert_eq!(crate::simulate::simulate(chain, &ops).map(|r| r.peak_memory).ok(), Some(label.bytes));
    (label.bytes, ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::simulate::simulate;

    /// An oracle for [`fastest_in_flight`] that shares only the move
    /// generator with it: a label-correcting search keeping, per state, the
    /// Pareto set of (peak so far, residue once B^{L+1} has run, time), and
    /// at the end the fastest label whose peak plus `k - 1` residues fits.
    /// Exact (a dominated label never leads to a better end), and a
    /// different algorithm from the one search per residue under test.
    fn in_flight_oracle(chain: &Chain, budget: u64, k: usize) -> Option<f64> {
        type Label3 = (u64, u64, f64);
        let n = chain.len() + 1;
        let fig = Figures::new(chain);
        let start = with_grad(with_held(0, 0, Held::Plain), n);
        let init: Label3 = (stored(&fig, start), u64::MAX, 0.0);
        let others = k as u64 - 1;
        if init.0 > budget {
            return None;
        }
        let mut labels: HashMap<State, Vec<Label3>> = HashMap::new();
        let mut queue = std::collections::VecDeque::from([(start, init)]);
        labels.insert(start, vec![init]);
        let mut buf = Vec::new();
        let mut best: Option<f64> = None;
        while let Some((state, label)) = queue.pop_front() {
            if !labels[&state].contains(&label) {
                continue;
            }
            let (peak, residue, time) = label;
            if grad(state) == 0 {
                if peak + others * residue <= budget && best.is_none_or(|b| time < b) {
                    best = Some(time);
                }
                continue;
            }
            moves(&fig, state, false, &mut buf);
            for &(op, next, p, t) in &buf {
                let next_label = (peak.max(p), if op == Op::B(n) { stored(&fig, state) } else { residue }, time + t);
                let known = if next_label.1 == u64::MAX { 0 } else { next_label.1 };
                if next_label.0 + others * known > budget {
                    continue;
                }
                let set = labels.entry(next).or_default();
                if set.iter().any(|l| l.0 <= next_label.0 && l.1 <= next_label.1 && l.2 <= next_label.2) {
                    continue;
                }
                set.retain(|l| !(next_label.0 <= l.0 && next_label.1 <= l.1 && next_label.2 <= l.2));
                set.push(next_label);
                queue.push_back((next, next_label));
            }
        }
        best
    }

    /// The search once per residue equals the Pareto-label oracle on 1,200
    /// random chains of 1 to 4 stages (a third with recording options), for
    /// 1 to 4 micro-batches in flight, at budgets from below the smallest
    /// peak to past store-all's rank memory; its schedules replay with their
    /// rank memory within the budget at the makespan claimed, and one
    /// micro-batch is `fastest`.
    #[test]
    fn in_flight_search_equals_the_label_oracle() {
        use crate::synthetic::{Rng, small_chain, with_options};
        let mut rng = Rng::new(28);
        let (mut cases, mut feasible, mut differ) = (0, 0, 0);
        for c in 0..1200 {
            let len = rng.range(1, 4) as usize;
            let plain = small_chain(&mut rng, len, 8, 3);
            let chain = if c % 3 == 0 { with_options(&mut rng, &plain, 3, 3) } else { plain };
            let (lo, _) = min_peak(&chain);
            let opts = crate::solve::SolveOptions::default();
            let store_all = crate::solve::solve(&chain, u64::MAX / 8, crate::solve::Algorithm::StoreAll, &opts);
            let store_all = store_all.unwrap().replay;
            for k in 1..=4usize {
                let hi = store_all.rank_peak(k).unwrap() + 2;
                for i in 0..8u64 {
                    let budget = lo - 1 + (hi - lo + 1) * i / 7;
                    cases += 1;
                    let want = in_flight_oracle(&chain, budget, k);
                    let got = fastest_in_flight(&chain, budget, k);
                    match (&got, want) {
                        (None, None) => {}
                        (Some((time, ops)), Some(w)) => {
                            feasible += 1;
                            assert!(
                                (time - w).abs() <= 1e-9 * w.max(1.0),
                                "{chain:?} at {budget}, k {k}: {time} vs {w}"
                            );
                            let r = simulate(&chain, ops).unwrap();
                            assert!(r.rank_peak(k).unwrap() <= budget, "{chain:?} at {budget}, k {k}: {ops:?}");
                            assert!((r.makespan - time).abs() <= 1e-9 * time.max(1.0));
                            if k == 1 {
                                assert_eq!(fastest(&chain, budget).map(|f| f.0), Some(*time));
                            } else if fastest(&chain, budget).is_some_and(|f| f.0 < *time) {
                                differ += 1;
                            }
                        }
                        _ => panic!("{chain:?} at {budget}, k {k}: search {got:?}, oracle {want:?}"),
                    }
                }
            }
        }
        // The constraint binds: in many feasible cases more micro-batches
        // in flight make the fastest schedule slower.
        assert!(feasible > cases / 3 && differ > feasible / 10, "{cases} cases, {feasible} feasible, {differ} slower");
    }

    #[test]
    fn store_all_when_memory_is_ample() {
        let stages = (1..=3).map(|l| Stage::simple(1.0, 2.0, l, l + 1)).collect();
        let chain = Chain::new("c", 1, stages, Stage::zero_loss()).unwrap();
        let (time, ops) = fastest(&chain, 1 << 20).unwrap();
        assert_eq!(time, chain.store_all_time());
        let r = simulate(&chain, &ops).unwrap();
        assert_eq!(r.makespan, time);
        let (peak, ops) = min_peak(&chain);
        let r = simulate(&chain, &ops).unwrap();
        assert_eq!(r.peak_memory, peak);
        assert!(fastest(&chain, peak - 1).is_none());
        assert!(fastest(&chain, peak).is_some());
    }
}
