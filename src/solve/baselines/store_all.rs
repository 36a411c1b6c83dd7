//! `store-all`: no rematerialization, PyTorch's default.
//!
//! Operations: `F_all^1 .. F_all^{L+1}` then `B^{L+1} .. B^1` (the segmented
//! schedule with no checkpoint). Makespan: [`Chain::store_all_time`]; its peak
//! is the largest memory any schedule without recomputation needs. O(L).

use super::Candidate;
use crate::chain::Chain;

/// The only schedule store-all has.
pub fn candidate(_chain: &Chain) -> Candidate {
    Candidate { checkpoints: Vec::new(), detail: None }
}

#[cfg(test)]
mod tests {
    use crate::chain::{Chain, Stage};
    use crate::solve::{Algorithm, SolveError, SolveOptions, solve};

    #[test]
    fn store_all_by_hand() {
        // input 1; stage l: output 10*l, saved 10*l+1; backward overhead 1000.
        let stages = (1..=3)
            .map(|l| {
                let mut s = Stage::simple(l as f64, 2.0 * l as f64, 10 * l as u64, 10 * l as u64 + 1);
                s.backward_overhead = 1000;
                s
            })
            .collect();
        let c = Chain::new("c", 1, stages, Stage::zero_loss()).unwrap();
        // Peak during B^3: a0 + abar1 + abar2 + abar3 + delta3 + delta2 + o_b.
        let peak = 1 + 11 + 21 + 31 + 30 + 20 + 1000;
        let sol = solve(&c, peak, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
        assert_eq!(sol.schedule.makespan, 18.0);
        assert_eq!(sol.schedule.peak_memory, peak);
        let e = solve(&c, peak - 1, Algorithm::StoreAll, &SolveOptions::default()).unwrap_err();
        assert!(matches!(e, SolveError::Infeasible { min_budget: Some(p), .. } if p == peak), "{e}");
    }
}
