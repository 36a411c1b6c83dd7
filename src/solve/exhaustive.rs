//! Exhaustive search: the shortest path over memory states, exact in bytes.
//!
//! This is the oracle every other solver is tested against: it explores every
//! valid sequence of [the model](crate::model)'s operation table (as the simulator accepts
//! them) and so finds the true optimum, feasibility included.
//!
//! A state is how each activation a^0..a^{L+1} is held (absent, plain, saved)
//! plus the index t of the gradient delta^t in memory, at most
//! 3^(L+2) (L+2) states with O(L) moves each; Dijkstra runs in
//! O(V log V + E). Only moves whose output can still be used are generated
//! (exactly those the simulator accepts), so nothing optimal is cut.
//!
//! [`fastest_nested`] and [`min_peak_nested`] search the same graph restricted
//! to *nested* sequences (every forward reads the highest-indexed activation in
//! memory; the paper's weak memory persistence): the exact oracle for the class
//! the floating DP optimises over (see `floating`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::Held;

/// Largest chain (number of stages L, without the loss) the search accepts.
/// Few of the 3^(L+2) states are reachable: L = 14 takes about a second on a
/// network-like chain, and each further stage multiplies that by about 2.3.
pub const MAX_STAGES: usize = 14;

/// Packed state: 2 bits per activation a^0..a^{L+1}, the gradient index above.
type State = u64;

const GRAD_SHIFT: u32 = 48;

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

fn grad(state: State) -> usize {
    (state >> GRAD_SHIFT) as usize
}

fn with_grad(state: State, t: usize) -> State {
    (state & ((1 << GRAD_SHIFT) - 1)) | ((t as u64) << GRAD_SHIFT)
}

/// Bytes stored in `state`.
fn stored(chain: &Chain, state: State) -> u64 {
    let n = chain.len() + 1;
    let mut total = chain.gradient_size(grad(state));
    for l in 0..=n {
        total += match held(state, l) {
            Held::Absent => 0,
            Held::Plain => chain.output_size(l),
            Held::Saved => chain.saved_size(l),
        };
    }
    total
}

/// Every move out of `state`: (operation, next state, memory while it runs, time).
/// With `nested`, only forwards whose input is the highest activation held.
fn moves(chain: &Chain, state: State, nested: bool, out: &mut Vec<(Op, State, u64, f64)>) {
    out.clear();
    let t = grad(state);
    if t == 0 {
        return;
    }
    let top = (0..=t).rev().find(|&l| held(state, l) != Held::Absent).unwrap_or(0);
    let base = stored(chain, state);
    if held(state, t) == Held::Saved && held(state, t - 1) != Held::Absent {
        let mut next = with_held(state, t, Held::Absent);
        if held(state, t - 1) == Held::Plain {
            next = with_held(next, t - 1, Held::Absent);
        }
        let peak = base + chain.gradient_size(t - 1) + chain.backward_overhead(t);
        out.push((Op::B(t), with_grad(next, t - 1), peak, chain.backward_time(t)));
    }
    for l in 1..=t {
        let input = held(state, l - 1);
        if input == Held::Absent || held(state, l) != Held::Absent || (nested && l - 1 != top) {
            continue;
        }
        let (uf, of) = (chain.forward_time(l), chain.forward_overhead(l));
        let peak_all = base + chain.saved_size(l) + of;
        out.push((Op::FAll(l, 0), with_held(state, l, Held::Saved), peak_all, uf));
        if l < t {
            let peak = base + chain.output_size(l) + of;
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
    let mut best: HashMap<State, Label> = HashMap::new();
    let mut prev: HashMap<State, (State, Op)> = HashMap::new();
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
        moves(chain, state, nested, &mut buf);
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
/// deterministic. Worst case about 3^(L+2) (L+2) states: callers enforce
/// [`MAX_STAGES`].
pub fn fastest(chain: &Chain, budget: u64) -> Option<(f64, Vec<Op>)> {
    fastest_in(chain, budget, false)
}

/// Like [`fastest`], over nested sequences only.
pub fn fastest_nested(chain: &Chain, budget: u64) -> Option<(f64, Vec<Op>)> {
    fastest_in(chain, budget, true)
}

fn fastest_in(chain: &Chain, budget: u64, nested: bool) -> Option<(f64, Vec<Op>)> {
    let initial = stored(chain, with_grad(with_held(0, 0, Held::Plain), chain.len() + 1));
    if initial > budget {
        return None;
    }
    let step = |l: Label, peak: u64, time: f64| (peak <= budget).then_some(Label { bytes: 0, time: l.time + time });
    search(chain, nested, step, Label { bytes: 0, time: 0.0 }).map(|(l, ops)| (l.time, ops))
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
    let initial = stored(chain, with_grad(with_held(0, 0, Held::Plain), chain.len() + 1));
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
