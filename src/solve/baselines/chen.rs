//! `chen-sqrt` and `chen-greedy`: Chen et al. (2016, "Training deep nets with
//! sublinear memory cost") as Checkmate's chain baselines run them
//! (`solve_chen_sqrtn`, `solve_chen_greedy`).
//!
//! Both choose a set of checkpointed activations and run the segmented
//! schedule of [`super::segmented`]: every segment but the last forward without
//! recording (`F_ck` on its first stage, `F_none` after), the last segment
//! recording (`F_all`), then each earlier segment recomputed once with `F_all`
//! from its checkpoint just before its backwards. This is Checkmate's schedule
//! for fixed checkpoints on a chain (its S matrix keeps the checkpoints, each
//! segment's values while its forward and its backward run, and the last
//! segment's values from its forward to its backward), minus Checkmate's
//! keeping of a segment's values during its *first* forward, which the chain
//! model does not need.
//!
//! The candidates are the stage outputs a^1..a^{L-1}. a^0 is always kept, and a
//! checkpoint at a^L would only make stage L's segment run twice to feed the
//! loss, which Checkmate's graphs (where the loss is a node like any other) do
//! not do either.

use super::Candidate;
use crate::chain::Chain;
use crate::size::format_size;

/// Largest number of segment bounds `b` chen-greedy tries; above it (chains
/// of more than about 90 stages) it tries this many, evenly spaced in rank
/// among the distinct bounds that matter.
pub const MAX_GREEDY_BOUNDS: usize = 4096;

/// `chen-sqrt`: with k = floor(sqrt(L)), the checkpoints a^k, a^{2k}, .. below
/// a^L, i.e. segments of k stages (the last one holds the rest and the loss),
/// as Checkmate keeps every k-th node. O(L).
pub fn sqrt_candidate(chain: &Chain) -> Candidate {
    let len = chain.len();
    let k = len.isqrt().max(1);
    let checkpoints: Vec<usize> = (k..len).step_by(k).collect();
    let detail = format!("{} segments of {k} stages", checkpoints.len() + 1);
    Candidate { checkpoints, detail: Some(detail) }
}

/// Chen et al.'s greedy pass with segment bound `bound` bytes: walking
/// a^1..a^{L-1}, add each stage's `saved_size` (what its segment holds once
/// recomputed with `F_all`) to a running total, and checkpoint the stage at
/// which the total exceeds `bound`, resetting it. O(L).
pub fn greedy_checkpoints(chain: &Chain, bound: u64) -> Vec<usize> {
    let mut total = 0u64;
    let mut checkpoints = Vec::new();
    for l in 1..chain.len() {
        total += chain.saved_size(l);
        if total > bound {
            checkpoints.push(l);
            total = 0;
        }
    }
    checkpoints
}

/// The bounds worth trying: the greedy pass compares running totals, which
/// are sums of consecutive `saved_size`s, with the bound, so its outcome only
/// changes when the bound crosses one of those sums. Returns 0 and every
/// distinct such sum (store-all's bound, the whole sum, included), increasing,
/// thinned to [`MAX_GREEDY_BOUNDS`] evenly spaced in rank (first and last
/// kept). O(L^2 log L).
pub fn greedy_bounds(chain: &Chain) -> Vec<u64> {
    let len = chain.len();
    let mut sums = vec![0u64];
    for i in 1..len {
        let mut total = 0;
        for j in i..len {
            total += chain.saved_size(j);
            sums.push(total);
        }
    }
    sums.sort_unstable();
    sums.dedup();
    if sums.len() <= MAX_GREEDY_BOUNDS {
        return sums;
    }
    let last = sums.len() - 1;
    (0..MAX_GREEDY_BOUNDS).map(|i| sums[i * last / (MAX_GREEDY_BOUNDS - 1)]).collect()
}

/// `chen-greedy`'s candidates: the greedy checkpoints at every bound of
/// [`greedy_bounds`] (distinct sets only); the caller keeps the fastest that
/// fits, as Checkmate searches over b. O(L^3) at most.
pub fn greedy_candidates(chain: &Chain) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for bound in greedy_bounds(chain) {
        let checkpoints = greedy_checkpoints(chain, bound);
        if out.last().is_some_and(|c| c.checkpoints == checkpoints) {
            continue;
        }
        let detail = format!("b = {}, {} segments", format_size(bound), checkpoints.len() + 1);
        out.push(Candidate { checkpoints, detail: Some(detail) });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::simulate::simulate;
    use crate::solve::baselines::segmented;
    use crate::solve::{Algorithm, SolveError, SolveOptions, solve};
    use crate::synthetic::{Rng, small_chain};

    fn chain(saved: &[u64]) -> Chain {
        let stages = saved.iter().map(|&s| Stage::simple(1.0, 2.0, 1, s)).collect();
        Chain::new("c", 1, stages, Stage::zero_loss()).unwrap()
    }

    #[test]
    fn sqrt_segments() {
        assert_eq!(sqrt_candidate(&chain(&[1; 16])).checkpoints, vec![4, 8, 12]);
        assert_eq!(sqrt_candidate(&chain(&[1; 10])).checkpoints, vec![3, 6, 9]);
        assert_eq!(sqrt_candidate(&chain(&[1; 3])).checkpoints, vec![1, 2]);
        assert_eq!(sqrt_candidate(&chain(&[1; 1])).checkpoints, Vec::<usize>::new());
    }

    #[test]
    fn greedy_by_hand() {
        let c = chain(&[3, 1, 4, 1, 5, 9]);
        // Running totals 3, 4 (> 3: cut at 2), 4 (> 3: cut at 3), 1, 6 (cut at 5).
        assert_eq!(greedy_checkpoints(&c, 3), vec![2, 3, 5]);
        assert_eq!(greedy_checkpoints(&c, 0), vec![1, 2, 3, 4, 5]);
        assert_eq!(greedy_checkpoints(&c, 13), vec![5]);
        assert_eq!(greedy_checkpoints(&c, 14), Vec::<usize>::new());
        assert_eq!(greedy_checkpoints(&c, 7), vec![3]);
    }

    /// The bounds of `greedy_bounds` reach every checkpoint set any bound
    /// gives, so the search is the best over all b.
    #[test]
    fn greedy_is_best_over_every_bound() {
        let mut rng = Rng::new(11);
        for i in 0..300 {
            let c = small_chain(&mut rng, 1 + i % 8, 9, 6);
            let total: u64 = (1..c.len()).map(|l| c.saved_size(l)).sum();
            let sets: Vec<Vec<usize>> = greedy_candidates(&c).into_iter().map(|k| k.checkpoints).collect();
            for b in 0..=total + 1 {
                assert!(sets.contains(&greedy_checkpoints(&c, b)), "{c:?} at b = {b}");
            }
            let store_all = simulate(&c, &segmented(&c, &[])).unwrap().peak_memory;
            for budget in 0..=store_all {
                let brute = (0..=total + 1)
                    .map(|b| simulate(&c, &segmented(&c, &greedy_checkpoints(&c, b))).unwrap())
                    .filter(|r| r.peak_memory <= budget)
                    .map(|r| r.makespan)
                    .min_by(f64::total_cmp);
                match solve(&c, budget, Algorithm::ChenGreedy, &SolveOptions::default()) {
                    Ok(sol) => assert_eq!(Some(sol.schedule.makespan), brute),
                    Err(SolveError::Infeasible { .. }) => assert_eq!(brute, None),
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
}
