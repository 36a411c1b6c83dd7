//! `sequential`: PyTorch's `torch.utils.checkpoint.checkpoint_sequential`.
//!
//! With K segments on L stages, PyTorch sets `segment_size = L // K`, runs
//! the first K-1 segments (stages 1..=segment_size, then the next
//! segment_size, ...) under `checkpoint` and the last segment (every remaining
//! stage, here with the loss) normally. Under `checkpoint` a segment runs
//! without recording and keeps only its input; during the backward it is
//! recomputed from that input with recording, then back-propagated. In
//! [the model](crate::model)'s operations this is the segmented schedule of
//! [`super::segmented`] with checkpoints a^g, a^{2g}, .., a^{(K-1)g}, g = L // K:
//!
//! `F_ck^1 F_none^2 .. F_none^g  F_ck^{g+1} .. F_none^{2g} ..  F_all^{(K-1)g+1} .. F_all^{L+1}
//!  B^{L+1} .. B^{(K-1)g+1}  F_all^{(K-2)g+1} .. F_all^{(K-1)g} B^{(K-1)g} .. B^{(K-2)g+1}  ..
//!  F_all^1 .. F_all^g B^g .. B^1`
//!
//! Makespan (every stage of the K-1 checkpointed segments runs forward twice):
//!
//! `T(K) = sum_{l=1}^{L+1} (u_f^l + u_b^l) + sum_{l=1}^{(K-1) floor(L/K)} u_f^l`
//!
//! K = 1 is store-all. PyTorch rejects K > L (a zero segment size), and so
//! does remat. Without `--segments`, the fastest K in 1..=L whose replayed peak
//! fits the budget is taken (ties: the smaller peak, then the smaller K).
//! O(L) for a given K, O(L^2) for the search.

use super::Candidate;
use crate::chain::Chain;
use crate::solve::SolveError;

/// The checkpointed activations of `checkpoint_sequential` with `segments`
/// segments (1..=L): a^g, a^{2g}, .., a^{(K-1)g} with g = L // K.
pub fn checkpoints(len: usize, segments: usize) -> Vec<usize> {
    let g = len / segments;
    (1..segments).map(|i| i * g).collect()
}

/// The candidates: K = `segments` alone, or every K in 1..=L.
pub fn candidates(chain: &Chain, segments: Option<usize>) -> Result<Vec<Candidate>, SolveError> {
    let len = chain.len();
    let ks = match segments {
        Some(k) if k == 0 || k > len => {
            return Err(SolveError::Options(format!(
                "{k} segments asked; checkpoint_sequential needs 1 to {len} segments on this chain of {len} stages"
            )));
        }
        Some(k) => k..=k,
        None => 1..=len,
    };
    Ok(ks
        .map(|k| Candidate {
            checkpoints: checkpoints(len, k),
            detail: Some(format!("K = {k} segment{}", if k == 1 { "" } else { "s" })),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::schedule::notation;
    use crate::solve::{Algorithm, SolveOptions, solve};
    use crate::synthetic::{Rng, small_chain};

    /// input 3; (u_f, u_b, w_a, w_abar) per stage; gradients = outputs; zero loss.
    fn hand_chain() -> Chain {
        let s = [(1.0, 2.0, 4, 6), (2.0, 3.0, 5, 9), (3.0, 4.0, 2, 3), (4.0, 5.0, 7, 8), (5.0, 6.0, 1, 5)];
        let stages = s.iter().map(|&(f, b, a, abar)| Stage::simple(f, b, a, abar)).collect();
        Chain::new("hand", 3, stages, Stage::zero_loss()).unwrap()
    }

    fn with_k(k: usize) -> SolveOptions<'static> {
        SolveOptions { segments: Some(k), ..SolveOptions::default() }
    }

    #[test]
    fn pytorch_segment_boundaries() {
        // L = 10, K = 3: segment_size 3, checkpointed 1..=3 and 4..=6, last 7..=10.
        assert_eq!(checkpoints(10, 3), vec![3, 6]);
        assert_eq!(checkpoints(10, 4), vec![2, 4, 6]);
        assert_eq!(checkpoints(10, 1), Vec::<usize>::new());
        assert_eq!(checkpoints(5, 5), vec![1, 2, 3, 4]);
    }

    #[test]
    fn makespan_and_peak_by_hand() {
        let c = hand_chain();
        let sol = solve(&c, 1000, Algorithm::Sequential, &with_k(2)).unwrap();
        assert_eq!(
            notation(&sol.schedule.operations),
            "F_ck^1 F_none^2 F_all^3 F_all^4 F_all^5 F_all^6 B^6 B^5 B^4 B^3 F_all^1 F_all^2 B^2 B^1"
        );
        // Store-all time 15 + 20, plus u_f^1 + u_f^2 (floor(5/2) = 2 stages recomputed).
        // Peak during B^5: a0 3 + a2 5 + abar3 3 + abar4 8 + abar5 5 + delta5 1 + delta4 7 = 32.
        // (K, makespan, peak), each peak traced by hand operation by operation.
        let expected = [(1, 35.0, 42), (2, 38.0, 32), (3, 38.0, 36), (4, 41.0, 35), (5, 45.0, 34)];
        for (k, makespan, peak) in expected {
            let sol = solve(&c, 1000, Algorithm::Sequential, &with_k(k)).unwrap();
            assert_eq!((sol.schedule.makespan, sol.schedule.peak_memory), (makespan, peak), "K = {k}");
            let g = 5 / k;
            let formula = c.store_all_time() + (1..=(k - 1) * g).map(|l| c.forward_time(l)).sum::<f64>();
            assert_eq!(sol.schedule.makespan, formula, "K = {k}");
        }
    }

    #[test]
    fn default_is_fastest_fitting_k() {
        let c = hand_chain();
        let k_at = |budget| {
            let sol = solve(&c, budget, Algorithm::Sequential, &SolveOptions::default()).unwrap();
            (sol.detail.unwrap(), sol.schedule.makespan)
        };
        assert_eq!(k_at(1000), ("K = 1 segment".to_string(), 35.0));
        // K = 1 needs 42; K = 2 and 3 tie at 38, K = 2 has the smaller peak.
        assert_eq!(k_at(41), ("K = 2 segments".to_string(), 38.0));
        assert_eq!(k_at(32), ("K = 2 segments".to_string(), 38.0));
        let e = solve(&c, 31, Algorithm::Sequential, &SolveOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no sequential schedule fits in 31 B (31 bytes); the smallest budget it can meet is 32 B (32 bytes)"
        );
        let e = solve(&c, 33, Algorithm::Sequential, &with_k(5)).unwrap_err();
        assert!(e.to_string().contains("smallest budget it can meet is 34 B"), "{e}");
    }

    #[test]
    fn bad_segments_are_named() {
        let c = hand_chain();
        for k in [0, 6] {
            let e = solve(&c, 1000, Algorithm::Sequential, &with_k(k)).unwrap_err();
            assert!(matches!(e, SolveError::Options(_)), "{e}");
            assert!(e.to_string().contains(&format!("{k} segments asked")) && e.to_string().contains("1 to 5"), "{e}");
        }
    }

    #[test]
    fn formula_on_random_chains() {
        let mut rng = Rng::new(4);
        for i in 0..300 {
            let c = small_chain(&mut rng, 1 + i % 9, 20, 9);
            for k in 1..=c.len() {
                let sol = solve(&c, u64::MAX, Algorithm::Sequential, &with_k(k)).unwrap();
                let g = c.len() / k;
                let formula = c.store_all_time() + (1..=(k - 1) * g).map(|l| c.forward_time(l)).sum::<f64>();
                assert!((sol.schedule.makespan - formula).abs() < 1e-9);
                let forwards = sol.schedule.operations.iter().filter(|op| op.is_forward()).count();
                assert_eq!(forwards, c.len() + 1 + (k - 1) * g);
            }
        }
    }
}
