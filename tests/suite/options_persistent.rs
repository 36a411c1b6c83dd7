//! The persistent DP with recording options (issue 24): judged by a brute
//! force over its class, by the simulator, by the same chain without options
//! and by the exact fronts.
//!
//! The oracle enumerates every persistent sequence of a chain: for each
//! sub-chain (s, t) either F_all^s[o] (each option o), (s+1, t), B^s, or
//! F_ck^s F_none^{s+1} .. F_none^{s'-1}, (s', t), (s, s'-1) for each split
//! s', and (s, s) as F_all^s[o] B^s; every assignment of options to the
//! recorded stages is a separate sequence. Each is replayed by the simulator
//! (the judge), which gives its peak and makespan, so the fastest persistent
//! schedule at every budget is known without any recurrence.

use crate::reference;

use std::collections::HashMap;

use reference::store_all_peak;
use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::Fronts;
use remat::solve::persistent::Table;
use remat::solve::{Algorithm, SolveError, SolveOptions, dp, solve};
use remat::synthetic::{Rng, network_like, small_chain, stack, with_options};
use remat::{Chain, Op, simulate, simulate_within};

use crate::common;
use common::{exact, persistent_sequences};

/// (peak, makespan) of every persistent sequence of `chain` that the
/// simulator accepts (all of them should be).
fn persistent_class(chain: &Chain) -> Vec<(u64, f64)> {
    let n = chain.len() + 1;
    let all = persistent_sequences(chain, 1, n, &mut HashMap::new());
    all.iter()
        .map(|ops| {
            let r = simulate(chain, ops).unwrap_or_else(|e| panic!("{chain:?}: {ops:?}: {e}"));
            (r.peak_memory, r.makespan)
        })
        .collect()
}

/// The fastest makespan of the class at `budget` (`None`: nothing fits).
fn best_at(class: &[(u64, f64)], budget: u64) -> Option<f64> {
    class.iter().filter(|p| p.0 <= budget).map(|p| p.1).min_by(f64::total_cmp)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// One chain at every budget from below its smallest persistent peak to above
/// its largest: the exact solve (fronts) and the one-byte slot table equal
/// the brute force, their schedules replay within the budget at the makespan
/// claimed, the two agree bit for bit and operation for operation, and the
/// chain without options (`plain`) is never faster. Returns the number of
/// feasible budgets and how many of them used an option other than 0.
fn check_chain(chain: &Chain, plain: &Chain) -> (usize, usize) {
    let class = persistent_class(chain);
    let min = class.iter().map(|p| p.0).min().unwrap();
    let max = class.iter().map(|p| p.0).max().unwrap().max(store_all_peak(chain));
    assert_eq!(dp::min_peak_exact::<dp::Persistent>(chain), min, "smallest persistent peak: {chain:?}");
    let top = max + 1;
    let table = Table::build(SlotChain::new(chain, Slots::new(top, top as usize)), None);
    assert_eq!(table.slots().slot, 1);
    let fronts = Fronts::build(chain, top);
    assert_eq!(fronts.min_budget(), Some(min), "{chain:?}");
    let plain_fronts = Fronts::build(plain, top);
    let (mut feasible, mut optioned) = (0, 0);
    for budget in min.saturating_sub(1)..=top {
        let oracle = best_at(&class, budget);
        // The slot table and the fronts: the same values and schedules.
        let (t, f) = (table.makespan(budget as usize), fronts.makespan(budget));
        assert_eq!(t.to_bits(), f.to_bits(), "{chain:?} at {budget}: slot DP {t}, fronts {f}");
        assert_eq!(table.sequence(budget as usize), fronts.sequence(budget), "{chain:?} at {budget}");
        // Never slower than option 0 alone.
        let p = plain_fronts.makespan(budget);
        assert!(f <= p, "{chain:?} at {budget}: {f} with options, {p} without");
        match solve(chain, budget, Algorithm::Persistent, &exact(budget)) {
            Ok(sol) => {
                let best = oracle.unwrap_or_else(|| panic!("feasible below the class's smallest peak: {chain:?}"));
                let replay = simulate_within(chain, &sol.schedule.operations, budget)
                    .unwrap_or_else(|e| panic!("{chain:?} at {budget}: {e}"));
                assert_eq!(sol.schedule.makespan, replay.makespan);
                assert!(close(sol.solver_makespan, replay.makespan), "{chain:?} at {budget}: claimed");
                assert!(close(sol.solver_makespan, f), "{chain:?} at {budget}: solve and fronts");
                assert!(
                    close(replay.makespan, best),
                    "{chain:?} at {budget}: persistent DP {} but the class has {best}",
                    replay.makespan
                );
                feasible += 1;
                optioned +=
                    usize::from(sol.schedule.operations.iter().any(|op| matches!(op, Op::FAll(_, o) if *o > 0)));
            }
            Err(SolveError::Infeasible { min_budget, .. }) => {
                assert!(oracle.is_none(), "{chain:?} at {budget}: infeasible, the class has {oracle:?}");
                assert_eq!(min_budget, Some(min), "{chain:?}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    (feasible, optioned)
}

/// Thousands of random small chains (sizes 0..=8, zeros, overheads, odd
/// gradients and losses) with one to three options per stage, L = 1..=5, at
/// every budget: the persistent DP equals the brute force over its class.
#[test]
fn equals_brute_force_over_the_persistent_class() {
    let mut rng = Rng::new(24);
    let (mut feasible, mut optioned, mut strictly_faster) = (0, 0, 0);
    const CHAINS: usize = 2000;
    for i in 0..CHAINS {
        let plain = small_chain(&mut rng, 1 + i % 5, 8, 5);
        let chain = with_options(&mut rng, &plain, 3, 4);
        let (f, o) = check_chain(&chain, &plain);
        feasible += f;
        optioned += o;
        let top = store_all_peak(&chain);
        let min = dp::min_peak_exact::<dp::Persistent>(&chain);
        let (a, b) = (Fronts::build(&chain, top), Fronts::build(&plain, top));
        strictly_faster += (min..=top).filter(|&m| a.makespan(m) < b.makespan(m)).count();
    }
    println!(
        "{CHAINS} chains: {feasible} feasible (chain, budget) cases, {optioned} scheduled with an option above 0, \
         {strictly_faster} strictly faster than without options"
    );
    // The options must matter, or the test shows nothing.
    assert!(optioned > feasible / 10, "{optioned} of {feasible}");
    assert!(strictly_faster > CHAINS, "{strictly_faster}");
}

/// Six stages (plus the loss), at most two options each: fewer chains, the
/// class is larger.
#[test]
fn equals_brute_force_on_six_stages() {
    let mut rng = Rng::new(2406);
    for _ in 0..150 {
        let plain = small_chain(&mut rng, 6, 8, 5);
        let chain = with_options(&mut rng, &plain, 2, 4);
        check_chain(&chain, &plain);
    }
}

/// A chain without options solves as before: same makespans and schedules
/// with option 0 everywhere (the option loops add nothing), and an option that
/// is never better (saves as much, recomputes) changes no makespan.
#[test]
fn useless_options_change_nothing() {
    let mut rng = Rng::new(2407);
    for i in 0..300 {
        let plain = small_chain(&mut rng, 1 + i % 7, 8, 5);
        let mut stages = plain.stages().to_vec();
        for s in &mut stages {
            s.options.push(remat::chain::StageOption {
                name: None,
                saved_size: s.saved_size,
                recompute_time: 1.0,
                forward_overhead: s.forward_overhead,
                backward_overhead: s.backward_overhead,
                backward_frees: 0,
            });
        }
        let chain = Chain::new("useless", plain.input_size(), stages, plain.loss().clone()).unwrap();
        let top = store_all_peak(&plain) + 1;
        let (a, b) = (Fronts::build(&chain, top), Fronts::build(&plain, top));
        for m in 0..=top {
            assert_eq!(a.makespan(m).to_bits(), b.makespan(m).to_bits(), "{chain:?} at {m}");
            // Ties go to option 0, the first candidate.
            assert_eq!(a.sequence(m), b.sequence(m), "{chain:?} at {m}");
        }
    }
}

/// Network-like chains with options at 500 slots (rounded): the schedule
/// replays within the budget at the makespan the table claims, never slower
/// than without options, and the exact fronts are at least as fast.
#[test]
fn rounded_slots_replay_within_budget() {
    let mut rng = Rng::new(2408);
    let mut faster = 0;
    for seed in 0..8 {
        let plain = network_like(seed, 12 + 4 * seed as usize);
        let chain = with_options(&mut rng, &plain, 4, 2);
        let top = store_all_peak(&plain);
        for frac in [2, 3, 5] {
            let budget = top / frac;
            let slots = Slots::new(budget, 500);
            let table = Table::build(SlotChain::new(&chain, slots), None);
            let plain_table = Table::build(SlotChain::new(&plain, slots), None);
            let m = slots.capacity;
            assert!(table.makespan(m) <= plain_table.makespan(m));
            faster += usize::from(table.makespan(m) < plain_table.makespan(m));
            let Some(ops) = table.sequence(m) else {
                assert!(!plain_table.makespan(m).is_finite());
                continue;
            };
            let replay = simulate_within(&chain, &ops, budget).unwrap_or_else(|e| panic!("seed {seed} /{frac}: {e}"));
            assert!(close(replay.makespan, table.makespan(m)), "seed {seed} /{frac}");
            let opts = SolveOptions::default();
            let sol = solve(&chain, budget, Algorithm::Persistent, &opts).unwrap();
            assert!(sol.schedule.makespan <= replay.makespan + 1e-9 * replay.makespan);
        }
    }
    // Options with little recomputation help at these budgets.
    assert!(faster >= 12, "options helped at {faster} of 24 budgets only");
}

/// Stacks of repeated blocks whose copies differ only in their options: the
/// content-keyed tables (shared rows and fronts) equal the plain ones bit for
/// bit, so stages with different options are never taken for the same.
#[test]
fn shared_rows_tell_options_apart() {
    let mut rng = Rng::new(2409);
    for i in 0..40 {
        let base = small_chain(&mut rng, 4, 8, 5);
        let stacked = stack(&base, 1, 2, 1, 6 + i % 5);
        // Options on some copies only: equal blocks, unequal options.
        let mut stages = stacked.stages().to_vec();
        for (k, s) in stages.iter_mut().enumerate() {
            if k % 4 == 1 {
                s.options.push(remat::chain::StageOption {
                    name: None,
                    saved_size: s.output_size,
                    recompute_time: 1.0,
                    forward_overhead: 0,
                    backward_overhead: s.backward_overhead,
                    backward_frees: 0,
                });
            }
        }
        let chain = Chain::new("stack-options", stacked.input_size(), stages, stacked.loss().clone()).unwrap();
        let top = store_all_peak(&chain) + 1;
        let shared = Fronts::build(&chain, top);
        let plain = Fronts::build_unshared(&chain, top);
        let slots = Slots::new(top, top as usize);
        let (ts, tp) =
            (Table::build(SlotChain::new(&chain, slots), None), Table::build_plain(SlotChain::new(&chain, slots)));
        assert!(shared.distinct_cells() < plain.distinct_cells());
        for m in 0..=top {
            assert_eq!(shared.makespan(m).to_bits(), plain.makespan(m).to_bits(), "{chain:?} at {m}");
            assert_eq!(shared.sequence(m), plain.sequence(m), "{chain:?} at {m}");
            let k = m as usize;
            assert_eq!(ts.makespan(k).to_bits(), tp.makespan(k).to_bits(), "{chain:?} at {m}");
            assert_eq!(ts.makespan(k).to_bits(), shared.makespan(m).to_bits(), "{chain:?} at {m}");
            assert_eq!(ts.sequence(k), tp.sequence(k), "{chain:?} at {m}");
        }
    }
}
