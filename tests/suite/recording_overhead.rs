//! A recording forward's own transient (`recording_overhead`, o_r): every
//! solver and the simulator charge it to F_all (option 0) and o_f to F_ck and
//! F_none. Judged by the brute force over the persistent class (each sequence
//! replayed by the simulator), by exhaustive search over nested sequences,
//! and by the same chain with o_r = o_f, which must answer as before.

use remat::solve::{Algorithm, SolveOptions, exhaustive, solve};
use remat::synthetic::{Rng, small_chain};
use remat::{Chain, Op, simulate};

use crate::common;

/// `chain` with a random recording overhead on about half of its stages
/// (often below the plain forward's, as measured on real blocks).
fn with_recording(rng: &mut Rng, chain: &Chain) -> Chain {
    let mut stages = chain.stages().to_vec();
    for s in &mut stages {
        if rng.chance(1, 2) {
            s.recording_overhead = Some(rng.range(0, s.forward_overhead + 3));
        }
    }
    Chain::new(chain.name(), chain.input_size(), stages, chain.loss().clone()).unwrap()
}

#[test]
fn solvers_charge_the_recording_transient_to_f_all() {
    let mut rng = Rng::new(31);
    let (mut cases, mut changed) = (0, 0);
    for _ in 0..400 {
        let len = rng.range(1, 4) as usize;
        let plain = small_chain(&mut rng, len, 9, 4);
        let chain = with_recording(&mut rng, &plain);
        // The simulator: F_all^l's transient is o_r, F_ck's o_f.
        let n = chain.len() + 1;
        let store_all: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
        let r = simulate(&chain, &store_all).unwrap();
        for l in 1..=chain.len() {
            let s = chain.stage(l);
            assert_eq!(r.steps[l - 1].during.transient, s.recording_overhead.unwrap_or(s.forward_overhead));
        }
        let mut first_ck = vec![Op::FCk(1)];
        first_ck.extend((2..=n).map(|l| Op::FAll(l, 0)));
        first_ck.extend((2..=n).rev().map(Op::B));
        first_ck.extend([Op::FAll(1, 0), Op::B(1)]);
        let r = simulate(&chain, &first_ck).unwrap();
        assert_eq!(r.steps[0].during.transient, chain.stage(1).forward_overhead);
        let class = common::persistent_class(&chain);
        let lo = class.iter().map(|p| p.0).min().unwrap();
        let hi = class.iter().map(|p| p.0).max().unwrap();
        for budget in [lo, (lo + hi) / 2, hi] {
            cases += 1;
            let best = class.iter().filter(|p| p.0 <= budget).map(|p| p.1).min_by(f64::total_cmp).unwrap();
            let exact = solve(&chain, budget, Algorithm::Persistent, &SolveOptions::default()).unwrap();
            assert_eq!(exact.schedule.makespan, best, "{chain:?} at {budget}");
            let table = SolveOptions { exact_memory: Some(0), ..common::exact(budget) };
            let table = solve(&chain, budget, Algorithm::Persistent, &table).unwrap();
            assert!((table.schedule.makespan - best).abs() <= 1e-9 * best.max(1.0), "{chain:?} at {budget}");
            let floating = solve(&chain, budget, Algorithm::Floating, &common::exact(budget)).unwrap();
            let nested = exhaustive::fastest_nested(&chain, budget).unwrap().0;
            assert!((floating.schedule.makespan - nested).abs() <= 1e-9 * nested.max(1.0), "{chain:?} at {budget}");
            if exhaustive::fastest(&plain, budget).map(|f| f.0) != exhaustive::fastest(&chain, budget).map(|f| f.0) {
                changed += 1;
            }
        }
    }
    eprintln!("{cases} cases, {changed} where the recording transient changed the optimum");
    assert!(changed > 0);
}

/// A chain whose `recording_overhead` equals `forward_overhead` everywhere
/// answers exactly as without it; the JSON field round-trips and enters the
/// chain's id.
#[test]
fn the_same_transient_changes_nothing() {
    let mut rng = Rng::new(5);
    for _ in 0..100 {
        let plain = small_chain(&mut rng, 4, 9, 4);
        let mut stages = plain.stages().to_vec();
        for s in &mut stages {
            s.recording_overhead = Some(s.forward_overhead);
        }
        let same = Chain::new(plain.name(), plain.input_size(), stages, plain.loss().clone()).unwrap();
        let budget = solve(&plain, u64::MAX / 8, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
        let budget = budget.schedule.peak_memory * 2 / 3;
        for algorithm in [Algorithm::Persistent, Algorithm::Floating, Algorithm::Exhaustive] {
            let a = solve(&plain, budget, algorithm, &SolveOptions::default()).map(|s| s.schedule.operations);
            let b = solve(&same, budget, algorithm, &SolveOptions::default()).map(|s| s.schedule.operations);
            assert_eq!(a.ok(), b.ok(), "{algorithm}");
        }
        let json = same.to_json();
        assert!(json.contains("recording_overhead"));
        let back = Chain::from_json(&json).unwrap();
        assert_eq!(back.id(), same.id());
        assert_ne!(same.id(), plain.id());
    }
}
