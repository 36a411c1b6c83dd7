//! The floating DP through `solve`: refusal of tables that would not fit,
//! `auto`'s choice, determinism, and schedules replayed on network-like chains.

use remat::Op;
use remat::solve::dp;
use remat::solve::{
    AUTO_EXHAUSTIVE_STAGES, Algorithm, SolveError, SolveOptions, auto_choice, floating, min_budget, solve,
};
use remat::synthetic::network_like;

fn opts(slots: usize) -> SolveOptions<'static> {
    SolveOptions { slots: std::num::NonZeroUsize::new(slots).expect("slots > 0"), ..SolveOptions::default() }
}

/// The peak of the schedule that records everything once.
fn store_all_peak(chain: &remat::Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
    remat::simulate(chain, &ops).unwrap().peak_memory
}

#[test]
fn refuses_tables_that_would_not_fit_and_says_what_to_do() {
    let chain = network_like(1, 200);
    let budget = store_all_peak(&chain);
    // Ten million slots: about 1.35 million cells of ten million costs each.
    let err = solve(&chain, budget, Algorithm::Floating, &opts(10_000_000)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, SolveError::TooLarge { .. }), "{msg}");
    // Refused before the plan is built, by its step count (remat::guard).
    for needle in ["floating DP would take about 6.9e14 steps", "200 stages at 10000000 slots", "fewer memory slots"] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
}

#[test]
fn refuses_chains_over_its_stage_limit() {
    let chain = network_like(1, floating::MAX_STAGES + 1);
    let err = solve(&chain, u64::MAX / 4, Algorithm::Floating, &opts(10)).unwrap_err();
    assert!(err.to_string().contains("at most 500 stages"), "{err}");
    assert_eq!(auto_choice(&chain, u64::MAX / 4, &opts(10)).algorithm, Algorithm::Persistent);
}

#[test]
fn auto_prefers_exact_then_floating_then_persistent() {
    let small = network_like(2, AUTO_EXHAUSTIVE_STAGES);
    let budget = store_all_peak(&small) * 2 / 3;
    let choice = auto_choice(&small, budget, &opts(500));
    assert_eq!(choice.algorithm, Algorithm::Exhaustive, "{}", choice.reason);
    let sol = solve(&small, budget, Algorithm::Auto, &opts(500)).unwrap();
    assert_eq!(sol.schedule.algorithm, "exhaustive");
    assert_eq!(sol.slot_size, 1);

    let mid = network_like(2, 40);
    let budget = store_all_peak(&mid) * 2 / 3;
    let choice = auto_choice(&mid, budget, &opts(500));
    assert_eq!(choice.algorithm, Algorithm::Floating, "{}", choice.reason);
    assert!(choice.reason.contains("40 stages at 500 slots"), "{}", choice.reason);
    let sol = solve(&mid, budget, Algorithm::Auto, &opts(500)).unwrap();
    assert_eq!(sol.schedule.algorithm, "floating", "the schedule names the algorithm that ran");

    let choice = auto_choice(&mid, budget, &opts(200_000));
    assert_eq!(choice.algorithm, Algorithm::Persistent, "{}", choice.reason);
    assert!(choice.reason.contains("--algorithm floating"), "{}", choice.reason);
}

#[test]
fn never_slower_than_persistent_on_network_like_chains() {
    for (seed, len) in [(3, 20), (4, 35), (5, 50)] {
        let chain = network_like(seed, len);
        let (min, all) = (dp::min_peak_exact::<dp::Persistent>(&chain), store_all_peak(&chain));
        assert!(dp::min_peak_exact::<dp::Floating>(&chain) <= min);
        for budget in [min, min + (all - min) / 10, min + (all - min) / 2, all] {
            let f = solve(&chain, budget, Algorithm::Floating, &opts(500));
            let p = solve(&chain, budget, Algorithm::Persistent, &opts(500));
            match (f, p) {
                (Ok(f), Ok(p)) => assert!(f.schedule.makespan <= p.schedule.makespan + 1e-9, "{len} at {budget}"),
                // Slot rounding can rule out the exact minimum for both.
                (Ok(_) | Err(SolveError::Infeasible { .. }), Err(SolveError::Infeasible { .. })) => {}
                (f, p) => panic!("{len} at {budget}: floating {:?}, persistent {:?}", f.err(), p.err()),
            }
        }
        // Its own smallest budget with 500 slots is feasible, and slot rounding
        // only costs memory.
        let m = min_budget(&chain, Algorithm::Floating, &opts(500)).unwrap().unwrap();
        assert!(m >= dp::min_peak_exact::<dp::Floating>(&chain));
        assert!(solve(&chain, m, Algorithm::Floating, &opts(500)).is_ok());
    }
}

#[test]
fn same_schedule_whatever_the_thread_count() {
    let chain = network_like(7, 45);
    let budget = dp::min_peak_exact::<dp::Persistent>(&chain) * 5 / 4;
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| solve(&chain, budget, Algorithm::Floating, &opts(400)).unwrap().schedule)
    };
    let one = run(1);
    assert_eq!(one.operations, run(3).operations);
    assert_eq!(one.makespan, run(2).makespan);
}
