//! The baselines: the schedules other tools would run, written as ordinary
//! operation sequences of [the model](crate::model) so that [`crate::solve::solve`] replays them
//! with the exact simulator like any other schedule. No figure of a baseline
//! is ever taken from anywhere but that replay.
//!
//! Three of them (store-all, sequential, chen-*) are *segmented* schedules
//! ([`segmented`]): a set of checkpointed activations cuts the chain into
//! segments; every segment but the last runs forward without recording and is
//! recomputed once, recording, during the backward. They differ only in where
//! the cuts go. `revolve` is a dynamic program of its own ([`revolve`]).

pub mod chen;
pub mod revolve;
pub mod sequential;
pub mod store_all;
pub mod uniform;

use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::simulate;
use crate::solve::{Algorithm, SolveError, SolveOptions};

/// The algorithms this module implements, in [`Algorithm::ALL`]'s order.
pub const BASELINES: &[Algorithm] = &[
    Algorithm::StoreAll,
    Algorithm::Sequential,
    Algorithm::Revolve,
    Algorithm::ChenSqrt,
    Algorithm::ChenGreedy,
    Algorithm::Uniform,
];

/// A baseline's schedule before [`crate::solve::solve`] replays it.
#[derive(Clone, Debug)]
pub struct BaselineSchedule {
    /// The operation sequence.
    pub ops: Vec<Op>,
    /// The makespan the generator expects (a formula or its DP's value), which
    /// `solve` checks against the replay.
    pub makespan: f64,
    /// Bytes per memory slot the generator used (1 when it works in bytes).
    pub slot_size: u64,
    /// The parameter it settled on, for people (`K = 3 segments`).
    pub detail: Option<String>,
}

/// The schedule of `algorithm` (one of [`BASELINES`]) for `chain` under
/// `budget` bytes, or [`SolveError::Infeasible`] with the smallest budget the
/// baseline can meet. Complexity: see each module.
///
/// # Panics
/// If `algorithm` is not a baseline.
pub fn schedule(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<BaselineSchedule, SolveError> {
    let candidates = match algorithm {
        Algorithm::Revolve => return revolve::schedule(chain, budget, opts),
        Algorithm::StoreAll => vec![store_all::candidate(chain)],
        Algorithm::Sequential => sequential::candidates(chain, opts.segments)?,
        Algorithm::ChenSqrt => vec![chen::sqrt_candidate(chain)],
        Algorithm::ChenGreedy => chen::greedy_candidates(chain),
        Algorithm::Uniform => return uniform_schedule(chain, budget),
        other => panic!("{other} is not a baseline"),
    };
    fastest_fitting(chain, candidates, budget, algorithm)
}

/// The smallest budget in bytes at which `algorithm` (a baseline) finds a
/// schedule with these options; `None` if no budget works.
pub fn min_budget(chain: &Chain, algorithm: Algorithm, opts: &SolveOptions) -> Result<Option<u64>, SolveError> {
    match schedule(chain, 0, algorithm, opts) {
        Ok(_) => Ok(Some(0)),
        Err(SolveError::Infeasible { min_budget, .. }) => Ok(min_budget),
        Err(e) => Err(e),
    }
}

/// One schedule a baseline may pick, described by the activations it
/// checkpoints (see [`segmented`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The checkpointed activations a^c, increasing, each in `1..=L`.
    pub checkpoints: Vec<usize>,
    /// What to tell people about the choice (`K = 3 segments`).
    pub detail: Option<String>,
}

/// The segmented schedule cutting `chain` after each activation in
/// `checkpoints` (increasing, in `1..=L`): with c_0 = 0 and c_1 < ... < c_k,
/// segment i holds stages c_{i-1}+1..=c_i and the last one c_k+1..=L+1 (the
/// loss included).
///
/// Operations, in order:
/// - forward of each checkpointed segment s..=e: `F_ck^s` (keeps its input
///   a^{s-1}, the checkpoint) then `F_none^{s+1} .. F_none^e`;
/// - forward of the last segment: `F_all` on each of its stages;
/// - backward of the last segment: `B^{L+1} .. B^{c_k+1}`;
/// - then for each checkpointed segment, last first: `F_all^s .. F_all^e`
///   from its kept input, then `B^e .. B^s`.
///
/// Every stage of a checkpointed segment runs forward twice, so the makespan
/// is [`Chain::store_all_time`] + sum of u_f^l for l in 1..=c_k (see
/// [`segmented_makespan`]). O(L).
pub fn segmented(chain: &Chain, checkpoints: &[usize]) -> Vec<Op> {
    let n = chain.len() + 1;
    debug_assert!(checkpoints.windows(2).all(|w| w[0] < w[1]) && checkpoints.iter().all(|&c| c >= 1 && c < n));
    let mut bounds = vec![0];
    bounds.extend_from_slice(checkpoints);
    let last = *bounds.last().expect("starts with 0") + 1;
    let mut ops = Vec::with_capacity(2 * n + 2 * (last - 1));
    for w in bounds.windows(2) {
        let (s, e) = (w[0] + 1, w[1]);
        ops.push(Op::FCk(s));
        ops.extend((s + 1..=e).map(Op::FNone));
    }
    ops.extend((last..=n).map(|l| Op::FAll(l, 0)));
    ops.extend((last..=n).rev().map(Op::B));
    for w in bounds.windows(2).rev() {
        let (s, e) = (w[0] + 1, w[1]);
        ops.extend((s..=e).map(|l| Op::FAll(l, 0)));
        ops.extend((s..=e).rev().map(Op::B));
    }
    ops
}

/// The makespan of [`segmented`]`(chain, checkpoints)`: every forward and
/// backward once, plus a second forward of each stage up to the last
/// checkpoint. O(L).
pub fn segmented_makespan(chain: &Chain, checkpoints: &[usize]) -> f64 {
    let recomputed = checkpoints.last().copied().unwrap_or(0);
    chain.store_all_time() + (1..=recomputed).map(|l| chain.forward_time(l)).sum::<f64>()
}

/// True when schedule `a` = (makespan, peak) is better than `b`: faster, or
/// as fast with a smaller peak. Makespans within 1e-9 (relative) are equal:
/// the same forwards summed in another order differ in the last bits.
pub fn faster(a: (f64, u64), b: (f64, u64)) -> bool {
    let tolerance = 1e-9 * a.0.abs().max(b.0.abs()).max(1.0);
    if (a.0 - b.0).abs() <= tolerance { a.1 < b.1 } else { a.0 < b.0 }
}

/// The fastest uniform policy ([`uniform`]) that fits `budget`: every policy
/// replayed, ties to the smaller peak, then the first. O(policies x L).
fn uniform_schedule(chain: &Chain, budget: u64) -> Result<BaselineSchedule, SolveError> {
    let algorithm = Algorithm::Uniform;
    let mut best: Option<(f64, u64, Vec<Op>, String, f64)> = None;
    let mut min_peak: Option<u64> = None;
    for (name, options) in uniform::policies(chain) {
        let ops = uniform::ops(&options);
        let replay = simulate(chain, &ops).map_err(|source| SolveError::Rejected { algorithm, source })?;
        min_peak = Some(min_peak.map_or(replay.peak_memory, |p| p.min(replay.peak_memory)));
        if replay.peak_memory > budget {
            continue;
        }
        if best.as_ref().is_none_or(|(t, p, ..)| faster((replay.makespan, replay.peak_memory), (*t, *p))) {
            let expected = (1..=options.len())
                .map(|l| chain.forward_time(l) + chain.recording(l, options[l - 1]).backward_time)
                .sum();
            best = Some((replay.makespan, replay.peak_memory, ops, name, expected));
        }
    }
    match best {
        Some((_, _, ops, name, makespan)) => Ok(BaselineSchedule {
            ops,
            makespan,
            slot_size: 1,
            detail: Some(format!("policy `{name}` on every stage")),
        }),
        None => Err(SolveError::Infeasible { algorithm, budget, min_budget: min_peak }),
    }
}

/// Replays every candidate and returns the fastest whose peak fits `budget`
/// (ties: the smaller peak, then the first), or `Infeasible` with the smallest
/// peak of any candidate. O(number of candidates * L).
fn fastest_fitting(
    chain: &Chain,
    candidates: Vec<Candidate>,
    budget: u64,
    algorithm: Algorithm,
) -> Result<BaselineSchedule, SolveError> {
    let mut best: Option<(f64, u64, Vec<Op>, Candidate)> = None;
    let mut min_peak: Option<u64> = None;
    for cand in candidates {
        let ops = segmented(chain, &cand.checkpoints);
        let replay = simulate(chain, &ops).map_err(|source| SolveError::Rejected { algorithm, source })?;
        min_peak = Some(min_peak.map_or(replay.peak_memory, |p| p.min(replay.peak_memory)));
        if replay.peak_memory > budget {
            continue;
        }
        let better = match &best {
            None => true,
            Some((time, peak, ..)) => faster((replay.makespan, replay.peak_memory), (*time, *peak)),
        };
        if better {
            best = Some((replay.makespan, replay.peak_memory, ops, cand));
        }
    }
    match best {
        Some((_, _, ops, cand)) => Ok(BaselineSchedule {
            ops,
            makespan: segmented_makespan(chain, &cand.checkpoints),
            slot_size: 1,
            detail: cand.detail,
        }),
        None => Err(SolveError::Infeasible { algorithm, budget, min_budget: min_peak }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;
    use crate::schedule::notation;

    fn chain(len: usize) -> Chain {
        let stages = (1..=len).map(|l| Stage::simple(l as f64, 10.0 * l as f64, 1, 2)).collect();
        Chain::new("c", 1, stages, Stage::zero_loss()).unwrap()
    }

    #[test]
    fn segmented_operations_by_hand() {
        let c = chain(4);
        assert_eq!(notation(&segmented(&c, &[])), "F_all^1 F_all^2 F_all^3 F_all^4 F_all^5 B^5 B^4 B^3 B^2 B^1");
        assert_eq!(
            notation(&segmented(&c, &[1, 3])),
            "F_ck^1 F_ck^2 F_none^3 F_all^4 F_all^5 B^5 B^4 F_all^2 F_all^3 B^3 B^2 F_all^1 B^1"
        );
        // A checkpoint at a^L leaves the loss alone in the last segment.
        assert_eq!(
            notation(&segmented(&c, &[4])),
            "F_ck^1 F_none^2 F_none^3 F_none^4 F_all^5 B^5 F_all^1 F_all^2 F_all^3 F_all^4 B^4 B^3 B^2 B^1"
        );
    }

    #[test]
    fn segmented_makespan_matches_replay() {
        let c = chain(4);
        for cks in [vec![], vec![1], vec![2], vec![1, 3], vec![1, 2, 3], vec![4], vec![2, 4]] {
            let r = simulate(&c, &segmented(&c, &cks)).unwrap();
            assert_eq!(r.makespan, segmented_makespan(&c, &cks), "{cks:?}");
        }
        // Forwards 1+2 recomputed on top of store-all's 1+2+3+4 + 10*(1+2+3+4).
        assert_eq!(segmented_makespan(&c, &[1, 2]), 110.0 + 3.0);
    }
}
