//! Memory discretization: a budget of M bytes becomes S slots of
//! `floor(M / S)` bytes (at least 1), and every size is rounded up to whole
//! slots, so a schedule that fits in slots fits in bytes.

/// A budget cut into slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots {
    /// Bytes per slot (at least 1).
    pub slot: u64,
    /// The budget in whole slots, `floor(budget / slot)` (a slot count, never
    /// bytes). Between `slots` and `2 * slots - 1` when the budget is at least
    /// `slots` bytes.
    pub capacity: usize,
}

impl Slots {
    /// Cuts `budget` bytes into `slots` slots (`slots` >= 1).
    ///
    /// With `slots >= budget` the slot is one byte and every figure is exact.
    pub fn new(budget: u64, slots: usize) -> Slots {
        let slot = (budget / slots.max(1) as u64).max(1);
        Slots::with_slot(budget, slot)
    }

    /// A discretization with a given slot size.
    pub fn with_slot(budget: u64, slot: u64) -> Slots {
        let slot = slot.max(1);
        Slots { slot, capacity: usize::try_from(budget / slot).unwrap_or(usize::MAX) }
    }

    /// `bytes` rounded up to whole slots (saturating at `usize::MAX`).
    pub fn of(&self, bytes: u64) -> usize {
        usize::try_from(bytes.div_ceil(self.slot)).unwrap_or(usize::MAX)
    }

    /// `bytes` rounded down to whole slots: for a figure that is taken off
    /// (what a backward frees), so that the rounding still only adds.
    pub fn floor(&self, bytes: u64) -> usize {
        usize::try_from(bytes / self.slot).unwrap_or(usize::MAX)
    }

    /// Slots back to bytes (an upper bound of what they stand for).
    pub fn bytes(&self, slots: usize) -> u64 {
        (slots as u64).saturating_mul(self.slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        let s = Slots::new(1000, 500);
        assert_eq!((s.slot, s.capacity), (2, 500));
        assert_eq!(s.of(3), 2);
        assert_eq!(s.of(4), 2);
        assert_eq!(s.of(0), 0);
        let s = Slots::new(1999, 500);
        assert_eq!((s.slot, s.capacity), (3, 666));
        let exact = Slots::new(90, 500);
        assert_eq!((exact.slot, exact.capacity), (1, 90));
    }
}

/// A chain's figures in slots, indexed like the model: `output[l]` and
/// `gradient[l]` for `l` in `0..=n`, the others for `l` in `1..=n` (index 0
/// unused), where `n = L + 1` is the loss. Shared by the slot-based solvers.
#[derive(Clone, Debug)]
pub struct SlotChain {
    /// n = L + 1, the loss stage.
    pub n: usize,
    /// The discretization in use.
    pub slots: Slots,
    /// w_a in slots.
    pub output: Vec<usize>,
    /// w_abar in slots.
    pub saved: Vec<usize>,
    /// w_d in slots.
    pub gradient: Vec<usize>,
    /// o_f in slots.
    pub forward_overhead: Vec<usize>,
    /// o_r in slots: the transient of a recording forward, option 0
    /// ([`crate::chain::Stage::recording_overhead`], o_f when unset).
    pub recording_overhead: Vec<usize>,
    /// o_b in slots.
    pub backward_overhead: Vec<usize>,
    /// f_b in slots, rounded down ([`crate::chain::Stage::backward_frees`]).
    pub backward_frees: Vec<usize>,
    /// u_f.
    pub forward_time: Vec<f64>,
    /// u_b.
    pub backward_time: Vec<f64>,
    /// The options 1, 2, ... of each stage (index 0 unused; option 0 is the
    /// vectors above); empty for a stage without options.
    pub options: Vec<Vec<SlotRecording>>,
}

/// What recording a stage with one option costs, its sizes in slots (see
/// [`crate::chain::Recording`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotRecording {
    /// w_abar^s\[o\] in slots.
    pub saved: usize,
    /// o_f^s\[o\] in slots (the recording forward's transient).
    pub forward_overhead: usize,
    /// o_b^s\[o\] in slots.
    pub backward_overhead: usize,
    /// f_b^s\[o\] in slots, rounded down.
    pub backward_frees: usize,
    /// u_b^s + r^s\[o\].
    pub backward_time: f64,
}

impl SlotChain {
    /// Rounds every size of `chain` up to whole slots of `slots`.
    pub fn new(chain: &crate::Chain, slots: Slots) -> SlotChain {
        let n = chain.len() + 1;
        let per_stage = |f: &dyn Fn(usize) -> u64| -> Vec<usize> {
            std::iter::once(0).chain((1..=n).map(|l| slots.of(f(l)))).collect()
        };
        let times = |f: &dyn Fn(usize) -> f64| -> Vec<f64> { std::iter::once(0.0).chain((1..=n).map(f)).collect() };
        SlotChain {
            n,
            slots,
            output: (0..=n).map(|l| slots.of(chain.output_size(l))).collect(),
            saved: per_stage(&|l| chain.saved_size(l)),
            gradient: (0..=n).map(|l| slots.of(chain.gradient_size(l))).collect(),
            forward_overhead: per_stage(&|l| chain.forward_overhead(l)),
            recording_overhead: per_stage(&|l| chain.recording(l, 0).forward_overhead),
            backward_overhead: per_stage(&|l| chain.backward_overhead(l)),
            backward_frees: std::iter::once(0).chain((1..=n).map(|l| slots.floor(chain.backward_frees(l)))).collect(),
            forward_time: times(&|l| chain.forward_time(l)),
            backward_time: times(&|l| chain.backward_time(l)),
            options: std::iter::once(Vec::new())
                .chain((1..=n).map(|l| {
                    (1..chain.option_count(l))
                        .map(|o| {
                            let r = chain.recording(l, o);
                            SlotRecording {
                                saved: slots.of(r.saved_size),
                                forward_overhead: slots.of(r.forward_overhead),
                                backward_overhead: slots.of(r.backward_overhead),
                                backward_frees: slots.floor(r.backward_frees),
                                backward_time: r.backward_time,
                            }
                        })
                        .collect()
                }))
                .collect(),
        }
    }

    /// The ways to record stage `s`, option 0 included (at least 1).
    pub fn option_count(&self, s: usize) -> usize {
        1 + self.options[s].len()
    }

    /// Recording stage `s` with option `o` (0: the stage's own figures). O(1).
    pub fn recording(&self, s: usize, o: usize) -> SlotRecording {
        if o == 0 {
            SlotRecording {
                saved: self.saved[s],
                forward_overhead: self.recording_overhead[s],
                backward_overhead: self.backward_overhead[s],
                backward_frees: self.backward_frees[s],
                backward_time: self.backward_time[s],
            }
        } else {
            self.options[s][o - 1]
        }
    }

    /// [`SlotChain::forward_all_need`] for `F_all^s[o]`: w_d^t + w_abar^s\[o\] + o_f^s\[o\].
    pub fn forward_all_need_with(&self, s: usize, t: usize, o: usize) -> usize {
        let r = self.recording(s, o);
        self.gradient[t].saturating_add(r.saved).saturating_add(r.forward_overhead)
    }

    /// [`SlotChain::backward_need`] after `F_all^s[o]`: w_d^s + w_abar^s\[o\] + w_d^{s-1} + o_b^s\[o\] - f_b^s\[o\].
    pub fn backward_need_with(&self, s: usize, o: usize) -> usize {
        let r = self.recording(s, o);
        self.gradient[s]
            .saturating_add(r.saved)
            .saturating_add(self.gradient[s - 1])
            .saturating_add(r.backward_overhead)
            .saturating_sub(r.backward_frees)
    }

    /// Memory (without a^{s-1}) while F_all^s runs with delta^t held:
    /// w_d^t + w_abar^s + o_f^s ([the model](crate::model): the gradient is delta^t, not delta^s).
    pub fn forward_all_need(&self, s: usize, t: usize) -> usize {
        self.forward_all_need_with(s, t, 0)
    }

    /// Memory (without a^{s-1}) while B^s runs: w_d^s + w_abar^s + w_d^{s-1}
    /// + o_b^s - f_b^s (the frees rounded down, so never below the bytes').
    pub fn backward_need(&self, s: usize) -> usize {
        self.backward_need_with(s, 0)
    }

    /// Memory (without a^{s-1}) while F_ck^s runs with delta^t held: w_d^t + w_a^s + o_f^s.
    pub fn forward_ck_need(&self, s: usize, t: usize) -> usize {
        self.gradient[t].saturating_add(self.output[s]).saturating_add(self.forward_overhead[s])
    }

    /// Memory while F_none^j runs with delta^t held and only a^{j-1} (plus
    /// whatever the caller excludes) stored: w_d^t + w_a^{j-1} + w_a^j + o_f^j.
    pub fn forward_none_need(&self, j: usize, t: usize) -> usize {
        self.gradient[t]
            .saturating_add(self.output[j - 1])
            .saturating_add(self.output[j])
            .saturating_add(self.forward_overhead[j])
    }

    /// The ways to begin sub-chain (s, t) with `F_ck^s F_none^{s+1..j}`, for
    /// j = s..t-1 in order: each one's `split` = j + 1 (the rest, (j + 1, t),
    /// then runs beside a^j), the most those forwards need (without a^{s-1},
    /// delta^t held) and their time, summed in stage order. Every solver that
    /// splits a sub-chain this way (persistent, its exact fronts, in flight)
    /// reads them here. O(1) a step, O(t - s) in all.
    pub fn forward_splits(&self, s: usize, t: usize) -> impl Iterator<Item = ForwardSplit> + '_ {
        let mut need = self.forward_ck_need(s, t);
        let mut time = self.forward_time[s];
        (s + 1..=t).map(move |split| {
            let j = split - 1;
            if j > s {
                need = need.max(self.forward_none_need(j, t));
                time += self.forward_time[j];
            }
            ForwardSplit { split, need, time }
        })
    }
}

/// One way to begin a sub-chain (s, t) ([`SlotChain::forward_splits`]):
/// `F_ck^s F_none^{s+1..split-1}`, keeping a^{split-1}.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForwardSplit {
    /// The first stage of the rest, (split, t); a^{split-1} is kept for it.
    pub split: usize,
    /// The most the forwards need, in slots (or bytes), a^{s-1} excluded.
    pub need: usize,
    /// The forwards' time.
    pub time: f64,
}

/// The smallest budget in bytes at which a slot-based solver with `slots`
/// slots is feasible, given `exact`, its smallest budget without rounding (a
/// lower bound, since rounding only adds), and `feasible(budget)`. Rounding
/// makes feasibility nearly but not exactly monotone in the budget, so this is
/// the smallest found by doubling steps from `exact` and bisecting the last
/// step. `None` if no budget works (fewer slots than values a schedule must
/// hold). O(log M) calls of `feasible`.
pub fn smallest_feasible_budget(exact: u64, slots: usize, feasible: impl Fn(u64) -> bool) -> Option<u64> {
    if feasible(exact) {
        return Some(exact);
    }
    let (mut lo, mut step) = (exact, (exact / slots.max(1) as u64).max(1));
    let mut hi = loop {
        let cand = lo.checked_add(step)?;
        if feasible(cand) {
            break cand;
        }
        lo = cand;
        step = step.checked_mul(2)?;
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if feasible(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}
