//! A backward that frees part of what it saved before its peak
//! (`backward_frees`, f_b): `B^l` holds w_d^{l-1} + o_b - f_b beyond what was
//! stored before it. Judged by the simulator (the figure itself), by the brute
//! force over the persistent class (each sequence replayed), by exhaustive
//! search over every and over nested sequences, and by the same chain without
//! frees, which must answer as before.

use remat::solve::fronts::Fronts;
use remat::solve::{Algorithm, SolveError, SolveOptions, exhaustive, min_budget, solve};
use remat::synthetic::{Rng, small_chain, with_frees, with_options};
use remat::{Chain, ChainError, Op, simulate, simulate_within};

use crate::common;

/// A random chain of 1 to 4 stages, with recording options (recompute times
/// up to `max_time`) on every third (`c`), and frees on about half of its
/// stages and options: the instances of this file, with the same chain
/// without frees.
fn chain_with_frees(rng: &mut Rng, c: usize, max_time: u64) -> (Chain, Chain) {
    let len = rng.range(1, 4) as usize;
    let plain = small_chain(rng, len, 9, 4);
    let plain = if c.is_multiple_of(3) { with_options(rng, &plain, 3, max_time) } else { plain };
    let chain = with_frees(rng, &plain);
    (plain, chain)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The simulator charges B^l what was stored before it, plus delta^{l-1} and
/// o_b, less f_b of the recording that made abar^l; after it, abar^l is gone
/// whole.
#[test]
fn the_simulator_takes_the_frees_off_the_backward_only() {
    let mut rng = Rng::new(77);
    for _ in 0..300 {
        let len = rng.range(1, 4) as usize;
        let plain = small_chain(&mut rng, len, 9, 4);
        let options = with_options(&mut rng, &plain, 3, 4);
        let chain = with_frees(&mut rng, &options);
        let n = chain.len() + 1;
        let pick: Vec<usize> = (0..=n).map(|l| if l == 0 { 0 } else { l % chain.option_count(l) }).collect();
        let ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, pick[l])).chain((1..=n).rev().map(Op::B)).collect();
        let r = simulate(&chain, &ops).unwrap();
        for (i, step) in r.steps.iter().enumerate().skip(n) {
            let l = n - (i - n);
            let rec = chain.recording(l, pick[l]);
            let before = r.steps[i - 1].after.total();
            let want = before + chain.gradient_size(l - 1) + rec.backward_overhead - rec.backward_frees;
            assert_eq!(step.during.total(), want, "{chain:?}: B^{l}");
            // B^1 also deletes the plain input a^0.
            let input = if l == 1 { chain.output_size(0) } else { 0 };
            let after = before + chain.gradient_size(l - 1) - chain.gradient_size(l) - rec.saved_size - input;
            assert_eq!(step.after.total(), after, "{chain:?}: after B^{l}");
        }
    }
}

/// On random chains of 1 to 4 stages, with options a third of the time and
/// frees on about half the stages and options: the persistent DP (exact and
/// one-byte slot table) and the exact fronts equal the brute force over the
/// persistent class, the floating DP equals exhaustive search over nested
/// sequences, exhaustive search's smallest budget replays at its figure, and
/// every answer replays within its budget. The frees change the optimum on
/// some chains (checked), so the agreement is not that of the chain without.
#[test]
fn every_solver_takes_the_frees_off_the_backward() {
    let mut rng = Rng::new(2029);
    let (mut cases, mut changed) = (0, 0);
    for c in 0..500 {
        let (plain, chain) = chain_with_frees(&mut rng, c, 4);
        let class = common::persistent_class(&chain);
        let lo = class.iter().map(|p| p.0).min().unwrap();
        let hi = class.iter().map(|p| p.0).max().unwrap();
        assert_eq!(min_budget(&chain, Algorithm::Persistent, &SolveOptions::default()).unwrap(), Some(lo), "{chain:?}");
        let (least, ops) = exhaustive::min_peak(&chain);
        assert_eq!(simulate(&chain, &ops).unwrap().peak_memory, least, "{chain:?}");
        assert!(least <= lo, "{chain:?}");
        let fronts = Fronts::build(&chain, hi);
        for budget in [lo.saturating_sub(1), lo, (lo + hi) / 2, hi] {
            cases += 1;
            let best = class.iter().filter(|p| p.0 <= budget).map(|p| p.1).min_by(f64::total_cmp);
            let table = SolveOptions { exact_memory: Some(0), ..common::exact(budget) };
            for opts in [SolveOptions::default(), table] {
                match (solve(&chain, budget, Algorithm::Persistent, &opts), best) {
                    (Ok(s), Some(b)) => {
                        assert!(close(s.schedule.makespan, b), "{chain:?} at {budget}: {} vs {b}", s.schedule.makespan);
                        simulate_within(&chain, &s.schedule.operations, budget).unwrap();
                    }
                    (Err(SolveError::Infeasible { .. }), None) => {}
                    (other, _) => panic!("{chain:?} at {budget}: {:?} vs brute force {best:?}", other.err()),
                }
            }
            match best {
                Some(b) => assert!(close(fronts.makespan(budget), b), "{chain:?} at {budget}: fronts"),
                None => assert!(fronts.makespan(budget).is_infinite(), "{chain:?} at {budget}: fronts"),
            }
            let nested = exhaustive::fastest_nested(&chain, budget);
            match (solve(&chain, budget, Algorithm::Floating, &common::exact(budget)), &nested) {
                (Ok(s), Some((t, _))) => {
                    assert!(close(s.schedule.makespan, *t), "{chain:?} at {budget}: floating");
                    simulate_within(&chain, &s.schedule.operations, budget).unwrap();
                }
                (Err(SolveError::Infeasible { .. }), None) => {}
                (other, _) => panic!("{chain:?} at {budget}: floating {:?} vs nested {nested:?}", other.err()),
            }
            if let Some((t, ops)) = exhaustive::fastest(&chain, budget) {
                assert!(close(simulate_within(&chain, &ops, budget).unwrap().makespan, t));
            }
            if exhaustive::fastest(&plain, budget).map(|f| f.0) != exhaustive::fastest(&chain, budget).map(|f| f.0) {
                changed += 1;
            }
        }
    }
    eprintln!("{cases} cases, {changed} where the frees changed the optimum");
    assert!(changed > cases / 20, "{changed} of {cases}");
}

/// With micro-batches in flight the persistent DP still equals the brute
/// force over its class on chains with frees.
#[test]
fn in_flight_takes_the_frees_off_the_backward() {
    let mut rng = Rng::new(2030);
    let (mut cases, mut feasible) = (0, 0);
    for c in 0..300 {
        let (a, b, _) = crate::in_flight::check_chain(&chain_with_frees(&mut rng, c, 3).1);
        cases += a;
        feasible += b;
    }
    assert!(feasible > cases / 2, "{cases} {feasible}");
}

/// The field round-trips through JSON (stage, option and loss), enters the
/// chain's id only when set, and a figure above its recording's saved size
/// is refused with the stage, field and value named.
#[test]
fn the_field_reads_writes_and_is_checked() {
    let text = r#"{"input_size": 4, "stages": [
        {"forward_time": 1, "backward_time": 2, "output_size": 4, "saved_size": 10, "backward_frees": 6,
         "options": [{"saved_size": 5, "backward_frees": 1}]}],
        "loss": {"saved_size": 3, "backward_frees": 2}}"#;
    let chain = Chain::from_json(text).unwrap();
    assert_eq!(chain.backward_frees(1), 6);
    assert_eq!(chain.recording(1, 1).backward_frees, 1);
    assert_eq!(chain.backward_frees(2), 2);
    let back = Chain::from_json(&chain.to_json()).unwrap();
    assert_eq!(back.id(), chain.id());
    assert_eq!(back.recording(1, 1).backward_frees, 1);
    let none = Chain::from_json(&text.replace("\"backward_frees\": 6", "\"backward_frees\": 0")).unwrap();
    assert_ne!(none.id(), chain.id());
    assert!(
        !Chain::from_json(
            r#"{"input_size": 1, "stages": [{"forward_time": 1, "backward_time": 1,
        "output_size": 1, "saved_size": 1}]}"#
        )
        .unwrap()
        .to_json()
        .contains("backward_frees")
    );
    let err = Chain::from_json(&text.replace("\"backward_frees\": 1", "\"backward_frees\": 9")).unwrap_err();
    assert!(
        matches!(&err, ChainError::FreesAboveSaved { field, value: 9, saved: 5, .. } if field == "options[0].backward_frees")
    );
    let message = err.to_string();
    assert!(message.contains("stage 1") && message.contains("options[0].backward_frees is 9 bytes"), "{message}");
    let err = Chain::from_json(&text.replace("\"backward_frees\": 2", "\"backward_frees\": 4")).unwrap_err();
    assert!(err.to_string().starts_with("loss: backward_frees is 4 bytes"), "{err}");
}
