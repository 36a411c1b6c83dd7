//! Sub-chains keyed by their content (issue 25): where two sub-chains s..t
//! and s'..t' hold the same stages, the persistent recurrence gives them the
//! same value at every memory, so the DPs solve each distinct sub-chain once.
//!
//! # What a cell depends on
//! The persistent recurrence for cell (s, t) ([`super::persistent`],
//! [`super::fronts`]) reads, besides the cells of shorter sub-chains inside
//! s..t:
//! - the figures of stages s..t (times, output, saved, gradient, both
//!   overheads), through `forward_all_need(s, t)`, `forward_ck_need(s, t)`,
//!   `forward_none_need(j, t)` for s < j <= t (whose w_a^{j-1} lies inside),
//!   the split sizes w_a^j for s <= j < t and the sums of forward times;
//! - one figure outside: w_d^{s-1}, the gradient B^s creates
//!   (`backward_need(s)`);
//! - and, in the exact fronts only, the cell's *cap* (the largest memory it
//!   is asked at, which depends on w_a^{s-1}) and its *limit* (which depends
//!   on the times outside s..t); both only cut the stored function (see
//!   [`super::fronts`]), and a distinct cell takes the largest of its
//!   occurrences'.
//!
//! - the options of stage s (issue 24: the F_all branch and the leaf take
//!   the best of them, through w_abar^s\[o\], o_f^s\[o\], o_b^s\[o\] and
//!   u_b^s + r^s\[o\]), and those of every stage inside, through the shorter
//!   cells.
//!
//! So each position i gets a *class*: the exact figures of stage i (times by
//! their bits, so equal classes mean bit-identical floats), the list of its
//! options' figures (in order, times by their bits; a stage without options
//! has the empty list, so a chain without options is keyed as before)
//! together with w_d^{i-1}. Two stages that differ only in their options
//! are different classes: a cell holding one does not share the other's
//! row. Two cells are the same when their sequences of classes are
//! equal: then every figure the recurrence reads is the same, the float sums
//! are taken over the same values in the same order, and by induction on
//! t - s the two cells hold the same function of memory, bit for bit.
//!
//! # How cells are keyed
//! By length: the key of (s, t) is the pair (key of (s, t - 1), class of t),
//! the key of (s, s) the class of s alone. Keys are interned in a hash map
//! (exact pairs of integers, so there are no collisions to check: two cells
//! get the same id exactly when their class sequences are equal, by induction
//! on the length). Ids are given by increasing length, so the distinct
//! cells of one length form a contiguous range, filled together. O(L^2) time
//! (one hash lookup per cell) and 4 bytes per cell.
//!
//! On a stack of N identical blocks of p stages between a few other stages,
//! about (p + c) L of the L (L + 1) / 2 cells are distinct (c counting the
//! stages around the stack), so the DPs' O(L^3) falls to O(p L^2).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::slots::SlotChain;

/// The estimates and guards that run before any table exists key
/// sub-chains (4 bytes a cell, O(L^2) time) only up to this many stages
/// (34 MB of keys); above it they count every cell, as before sharing.
pub const ESTIMATE_MAX_STAGES: usize = 4096;

/// A fast hasher for private maps of small integer keys that are never
/// iterated (its output changes nothing but speed): a multiply and a rotation
/// per word. The keys interned here, and exhaustive search's packed states.
#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    fn write_u128(&mut self, x: u128) {
        self.write_u64(x as u64);
        self.write_u64((x >> 64) as u64);
    }
}

type KeyMap<K> = HashMap<K, u32, BuildHasherDefault<FastHasher>>;

/// The distinct sub-chains of one chain (in one rounding).
#[derive(Clone, Debug)]
pub(crate) struct Distinct {
    n: usize,
    /// The id of (s, t), s <= t, at `index(s, t)` (by s, then t).
    ids: Vec<u32>,
    /// A representative (s, t) of each id: its first occurrence by s.
    reps: Vec<(usize, usize)>,
    /// `by_len[d]..by_len[d + 1]` are the ids of the cells with t - s = d.
    by_len: Vec<usize>,
}

impl Distinct {
    /// Keys the cells of `sc` by content when `share`, else gives each cell
    /// its own id (the plain DP: the same code, nothing shared). O(L^2).
    pub(crate) fn new(sc: &SlotChain, share: bool) -> Distinct {
        Distinct::build(sc, share, false)
    }

    /// [`Distinct::new`] (shared) with w_a^{i-1} in each class too: the
    /// floating DP's cells starting at s also read w_a^{s-1}, the floating
    /// activation's size.
    pub(crate) fn with_input(sc: &SlotChain) -> Distinct {
        Distinct::build(sc, true, true)
    }

    fn build(sc: &SlotChain, share: bool, input: bool) -> Distinct {
        let n = sc.n;
        let class: Vec<u32> = if share {
            let mut classes: KeyMap<[u64; 12]> = KeyMap::default();
            // The options of a stage (issue 24), interned: 0 for none, so a
            // chain without options keys exactly as before.
            let mut option_lists: HashMap<Vec<[u64; 5]>, u64> = HashMap::new();
            option_lists.insert(Vec::new(), 0);
            (1..=n)
                .map(|i| {
                    let list: Vec<[u64; 5]> = sc.options[i]
                        .iter()
                        .map(|o| {
                            [
                                o.saved as u64,
                                o.forward_overhead as u64,
                                o.backward_overhead as u64,
                                o.backward_frees as u64,
                                o.backward_time.to_bits(),
                            ]
                        })
                        .collect();
                    let next = option_lists.len() as u64;
                    let options = *option_lists.entry(list).or_insert(next);
                    let key = [
                        sc.output[i] as u64,
                        sc.saved[i] as u64,
                        sc.gradient[i] as u64,
                        sc.forward_overhead[i] as u64,
                        sc.recording_overhead[i] as u64,
                        sc.backward_overhead[i] as u64,
                        sc.backward_frees[i] as u64,
                        sc.forward_time[i].to_bits(),
                        sc.backward_time[i].to_bits(),
                        sc.gradient[i - 1] as u64,
                        // Position 1 apart: its input a^0 never floats.
                        if input { (sc.output[i - 1] as u64) << 1 | u64::from(i == 1) } else { 0 },
                        options,
                    ];
                    let next = classes.len() as u32;
                    *classes.entry(key).or_insert(next)
                })
                .collect()
        } else {
            (0..n as u32).collect()
        };
        let cells = n * (n + 1) / 2;
        let mut d = Distinct { n, ids: vec![0; cells], reps: Vec::new(), by_len: vec![0] };
        let mut keys: KeyMap<u64> = KeyMap::default();
        for len in 0..n {
            keys.clear();
            let first = d.reps.len();
            for s in 1..=n - len {
                let t = s + len;
                // The key of (s, t): (id of (s, t - 1), class of t); ids of
                // the previous length are below `first`, classes below n.
                let prefix = if len == 0 { u64::from(u32::MAX) } else { u64::from(d.ids[d.index(s, t - 1)]) };
                let key = (prefix << 32) | u64::from(class[t - 1]);
                let next = d.reps.len() as u32;
                let id = *keys.entry(key).or_insert(next);
                if id == next {
                    d.reps.push((s, t));
                }
                let k = d.index(s, t);
                d.ids[k] = id;
            }
            debug_assert!(d.reps.len() > first);
            d.by_len.push(d.reps.len());
        }
        d
    }

    /// Position of (s, t) in the per-cell arrays.
    pub(crate) fn index(&self, s: usize, t: usize) -> usize {
        (s - 1) * self.n - (s - 1) * s.saturating_sub(2) / 2 + (t - s)
    }

    /// The id of (s, t).
    pub(crate) fn id(&self, s: usize, t: usize) -> usize {
        self.ids[self.index(s, t)] as usize
    }

    /// The number of distinct cells.
    pub(crate) fn len(&self) -> usize {
        self.reps.len()
    }

    /// The ids of length `d + 1` (t - s = d), a contiguous range.
    pub(crate) fn of_length(&self, d: usize) -> std::ops::Range<usize> {
        self.by_len[d]..self.by_len[d + 1]
    }

    /// The representative (s, t) of `id`.
    pub(crate) fn rep(&self, id: usize) -> (usize, usize) {
        self.reps[id]
    }

    /// Every cell (s, t) with its id, by s then t.
    pub(crate) fn cells(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        (1..=self.n).flat_map(move |s| (s..=self.n).map(move |t| (s, t, self.id(s, t))))
    }

    /// The split candidates the persistent recurrence evaluates over the
    /// distinct cells: t - s for each (its work per memory value, besides
    /// F_all), summed.
    pub(crate) fn splits(&self) -> u64 {
        (0..self.n).map(|d| (self.of_length(d).len() * d) as u64).sum()
    }

    /// Bytes the keys take: 4 per cell.
    pub(crate) fn bytes(n: usize) -> u64 {
        (n * (n + 1) / 2 * std::mem::size_of::<u32>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Chain, Stage};
    use crate::slots::Slots;

    #[test]
    fn a_stack_has_few_distinct_cells_and_the_same_content_the_same_id() {
        let block = Stage::simple(2.0, 3.0, 5, 9);
        let mut stages = vec![Stage::simple(1.0, 1.0, 5, 6)];
        stages.extend(std::iter::repeat_n(block, 50));
        stages.push(Stage::simple(1.0, 2.0, 7, 7));
        let chain = Chain::new("stack", 5, stages, Stage::zero_loss()).unwrap();
        let sc = SlotChain::new(&chain, Slots::with_slot(u64::MAX, 1));
        let d = Distinct::new(&sc, true);
        let n = sc.n;
        assert!(d.len() < 5 * n, "{} distinct of {}", d.len(), n * (n + 1) / 2);
        // Brute force: equal ids exactly when the class sequences are equal.
        let key = |s: usize, t: usize| {
            (s..=t)
                .map(|i| {
                    let (a, b, c) = (sc.output[i], sc.saved[i], sc.gradient[i]);
                    let (e, f) = (sc.forward_overhead[i], sc.backward_overhead[i]);
                    let times = (sc.forward_time[i].to_bits(), sc.backward_time[i].to_bits());
                    (a, b, c, e, f, times, sc.gradient[i - 1])
                })
                .collect::<Vec<_>>()
        };
        let mut seen = std::collections::HashMap::new();
        let mut ids = std::collections::HashMap::new();
        for (s, t, id) in d.cells() {
            assert_eq!(*seen.entry(key(s, t)).or_insert(id), id);
            assert_eq!(*ids.entry(id).or_insert(key(s, t)), key(s, t));
            let (rs, rt) = d.rep(id);
            assert_eq!(key(s, t), key(rs, rt));
            assert!(d.of_length(t - s).contains(&id));
        }
        assert_eq!(ids.len(), d.len());
        let plain = Distinct::new(&sc, false);
        assert_eq!(plain.len(), n * (n + 1) / 2);
    }
}
