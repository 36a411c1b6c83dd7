//! What `solve` answers for `persistent`, `floating` and `auto` now that the
//! persistent optimum is exact in bytes (`solve::exact`): judged by the slot
//! DP at one byte per slot (S = budget, its definition of exact), by
//! exhaustive search, by the simulator and by every baseline.

use crate::reference;

use reference::store_all_peak;
use remat::Chain;
use remat::slots::{SlotChain, Slots};
use remat::solve::dp::{self, min_peak_exact};
use remat::solve::persistent::Table;
use remat::solve::{Algorithm, SolveError, SolveOptions, exhaustive, min_budget, solve};
use remat::synthetic::{Rng, network_like, small_chain};

fn opts(slots: usize) -> SolveOptions<'static> {
    SolveOptions { slots: std::num::NonZeroUsize::new(slots).expect("slots > 0"), ..SolveOptions::default() }
}

/// The one-byte slot table for budgets up to `top`.
fn one_byte_table(chain: &Chain, top: u64) -> Table {
    let table = Table::build(SlotChain::new(chain, Slots::new(top, top as usize)), None);
    assert_eq!(table.slots().slot, 1);
    table
}

/// `solve(.., persistent)` at the default 500 slots against the slot DP at
/// S = budget on thousands of random chains at every budget from below the
/// smallest feasible one to above store-all's peak: the same makespan bit for
/// bit (the solver's prediction; the replay sums the same times in another
/// order), exact bytes, and "infeasible" exactly where the slot DP is, naming
/// the exact smallest budget.
fn persistent_solve_equals_the_one_byte_slot_dp() {
    let mut rng = Rng::new(1801);
    let mut solved = 0;
    for i in 0..2000 {
        let chain = small_chain(&mut rng, 1 + i % 9, 8, 5);
        let top = store_all_peak(&chain) + 2;
        let table = one_byte_table(&chain, top);
        let min = min_peak_exact::<dp::Persistent>(&chain);
        for budget in 0..=top {
            let want = table.makespan(budget as usize);
            match solve(&chain, budget, Algorithm::Persistent, &SolveOptions::default()) {
                Ok(sol) => {
                    assert_eq!(sol.solver_makespan.to_bits(), want.to_bits(), "{chain:?} at {budget}");
                    assert_eq!(sol.slot_size, 1, "{chain:?} at {budget}");
                    assert!(sol.schedule.peak_memory <= budget);
                    assert!(sol.detail.as_deref().is_some_and(|d| d.contains("not rounded")), "{:?}", sol.detail);
                    solved += 1;
                }
                Err(SolveError::Infeasible { min_budget, .. }) => {
                    assert!(want.is_infinite(), "{chain:?} at {budget}: the slot DP finds {want}");
                    assert!(budget < min);
                    assert_eq!(min_budget, Some(min), "{chain:?}");
                }
                Err(e) => panic!("{chain:?} at {budget}: {e}"),
            }
        }
        let smallest = min_budget(&chain, Algorithm::Persistent, &SolveOptions::default()).unwrap();
        assert_eq!(smallest, Some(min), "{chain:?}");
    }
    assert!(solved > 2000 * 5, "too few feasible cases: {solved}");
}

/// Larger sizes and longer chains at random budgets, including budgets that
/// are not a multiple of the 500-slot slot: still the one-byte slot DP.
#[test]
fn persistent_solve_equals_the_one_byte_slot_dp_on_larger_sizes() {
    let mut rng = Rng::new(1802);
    for i in 0..40 {
        let chain = small_chain(&mut rng, 10 + i % 15, 1000, 50);
        let top = store_all_peak(&chain);
        let min = min_peak_exact::<dp::Persistent>(&chain);
        let table = one_byte_table(&chain, top);
        for _ in 0..5 {
            let budget = rng.range(min, top);
            let sol = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
            assert_eq!(sol.solver_makespan.to_bits(), table.makespan(budget as usize).to_bits(), "{chain:?}");
            assert_eq!(sol.slot_size, 1);
        }
    }
}

/// Never faster than exhaustive search (persistent schedules are schedules),
/// and auto, floating and persistent never slower than any baseline nor than
/// the persistent slot DP at 500 or 8,000 slots; floating never slower than
/// persistent, auto never slower than either.
#[test]
fn no_answer_is_worse_than_a_baseline_or_the_slot_dp() {
    let mut rng = Rng::new(1803);
    let baselines =
        [Algorithm::StoreAll, Algorithm::Sequential, Algorithm::Revolve, Algorithm::ChenSqrt, Algorithm::ChenGreedy];
    let tol = |t: f64| 1e-9 * t.abs().max(1.0);
    for i in 0..40 {
        // Longer than auto's exhaustive limit, so that auto runs the DPs.
        let len = 11 + i % 6;
        let chain = small_chain(&mut rng, len, 50, 9);
        let top = store_all_peak(&chain);
        let min = min_peak_exact::<dp::Persistent>(&chain);
        for budget in [top, (min + top) / 2, min + (top - min) / 5, min] {
            let answer = |a: Algorithm| solve(&chain, budget, a, &opts(500)).ok().map(|s| s.schedule.makespan);
            let persistent = answer(Algorithm::Persistent).expect("at least the smallest persistent budget");
            let floating = answer(Algorithm::Floating).expect("floating takes persistent's answer");
            let auto = answer(Algorithm::Auto).expect("auto takes persistent's answer");
            assert!(floating <= persistent + tol(persistent), "{chain:?} at {budget}");
            assert!(auto <= floating + tol(floating), "{chain:?} at {budget}");
            if len <= 12 {
                let (best, _) = exhaustive::fastest(&chain, budget).expect("a persistent schedule fits");
                assert!(auto >= best - tol(best), "{chain:?} at {budget}: {auto} beats exhaustive {best}");
            }
            let others = baselines.iter().filter_map(|&b| answer(b));
            // The slot DP itself (`solve` no longer rounds where the fronts fit).
            let slot_dps = [500, 8000].into_iter().map(|s| {
                let sc = SlotChain::new(&chain, Slots::new(budget, s));
                Table::build(sc.clone(), None).makespan(sc.slots.capacity)
            });
            for other in others.chain(slot_dps) {
                assert!(persistent <= other + tol(other), "{chain:?} at {budget}: {other} beats {persistent}");
            }
        }
    }
}

/// Network-like chains with sizes in whole MiB: the slot DP with MiB slots
/// is exact there, and `auto` (which runs the floating DP beside the exact
/// persistent optimum at these lengths) is never slower than it, nor than
/// the 500-slot DP; `persistent` equals it.
#[test]
fn auto_and_persistent_on_network_like_chains() {
    let mib = 1u64 << 20;
    for (seed, len) in [(1, 20), (2, 40)] {
        let chain = network_like(seed, len);
        let top = store_all_peak(&chain);
        let min = min_peak_exact::<dp::Persistent>(&chain);
        let table = Table::build(SlotChain::new(&chain, Slots::with_slot(top + mib, mib)), None);
        for k in 0..=4u64 {
            let budget = min + (top - min) * k / 4 + k * 4321;
            let exact = table.makespan((budget / mib) as usize);
            let persistent = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
            assert_eq!(persistent.solver_makespan.to_bits(), exact.to_bits(), "L={len} at {budget}");
            let auto = solve(&chain, budget, Algorithm::Auto, &opts(500)).unwrap();
            assert!(auto.schedule.makespan <= exact + 1e-9 * exact, "L={len} at {budget}");
            assert!(auto.reason.is_some());
        }
    }
}

/// Where the fronts would outgrow the slot table's memory or the work allowed
/// by default (ResNet-1001, 339 stages), `persistent` answers with the 500-slot DP and says so.
#[test]
fn too_large_for_the_fronts_falls_back_to_the_slot_dp_and_says_so() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/chains/resnet1001-224-b8.json");
    let chain = Chain::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let budget = store_all_peak(&chain) / 3;
    let sol = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
    assert!(sol.slot_size > 1);
    let note = sol.detail.as_deref().unwrap_or_default();
    // Since issue 25 the fronts may also give up on their projected work
    // (point-steps) before their memory: either way the note says so.
    assert!(note.contains("not exact: the fronts of this 339-stage chain would take"), "{note}");
    assert!(note.contains("`--exact-memory SIZE`"), "{note}");
    let sc = SlotChain::new(&chain, Slots::new(budget, 500));
    let table = Table::build(sc.clone(), None);
    assert_eq!(sol.solver_makespan.to_bits(), table.makespan(sc.slots.capacity).to_bits());
    assert_eq!(sol.schedule.operations, table.sequence(sc.slots.capacity).unwrap());
}

/// `exact_memory` decides: 0 turns the fronts off (the 500-slot DP's answer,
/// bit for bit, saying so), a limit below what the fronts take rounds and
/// says how to get the exact answer, and a limit above them answers as the
/// default does (exact) on a chain where that is cheap.
#[test]
fn exact_memory_turns_the_fronts_off_down_or_up() {
    let chain = network_like(5, 30);
    let top = store_all_peak(&chain);
    let budget = min_peak_exact::<dp::Persistent>(&chain) + top / 10;
    let with = |exact_memory| SolveOptions { exact_memory, ..opts(500) };
    let sc = SlotChain::new(&chain, Slots::new(budget, 500));
    let rounded = Table::build(sc.clone(), None).makespan(sc.slots.capacity);

    let off = solve(&chain, budget, Algorithm::Persistent, &with(Some(0))).unwrap();
    assert!(off.slot_size > 1);
    assert_eq!(off.solver_makespan.to_bits(), rounded.to_bits());
    let note = off.detail.unwrap_or_default();
    assert!(note.contains("exact answers are turned off (exact memory 0)"), "{note}");

    let small = solve(&chain, budget, Algorithm::Persistent, &with(Some(4096))).unwrap();
    assert!(small.slot_size > 1);
    let note = small.detail.unwrap_or_default();
    assert!(note.contains("more than 4.00 KiB (the exact memory allowed)"), "{note}");
    assert!(note.contains("`--exact-memory SIZE`, `exact_memory=`"), "{note}");

    let default = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
    assert_eq!(default.slot_size, 1, "the default limit lets these fronts through");
    let ample = solve(&chain, budget, Algorithm::Persistent, &with(Some(1 << 30))).unwrap();
    assert_eq!(ample.slot_size, 1);
    assert_eq!(ample.solver_makespan.to_bits(), default.solver_makespan.to_bits());
    assert!(ample.solver_makespan < rounded, "rounding costs something here");

    // Turned off in auto too: no exact answer among its candidates.
    let auto = solve(&chain, budget, Algorithm::Auto, &with(Some(0))).unwrap();
    assert!(auto.slot_size > 1 || auto.schedule.algorithm != "persistent");
    // The smallest budget follows the same limit: exact, or the slot DP's.
    let exact_min = min_budget(&chain, Algorithm::Persistent, &with(None)).unwrap().unwrap();
    let rounded_min = min_budget(&chain, Algorithm::Persistent, &with(Some(0))).unwrap().unwrap();
    assert_eq!(exact_min, min_peak_exact::<dp::Persistent>(&chain));
    assert!(rounded_min >= exact_min);
}

/// The default limit, raised: ResNet-1001's fronts do not fit the slot
/// table's memory, so by default the answer is rounded; with 1 GiB for them
/// it is exact in bytes, hence no slower than the rounded one (about 10 s).
#[test]
fn resnet1001_is_exact_with_room() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/chains/resnet1001-224-b8.json");
    let chain = Chain::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let budget = 20 << 30;
    let rounded = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
    assert!(rounded.slot_size > 1);
    let room = SolveOptions { exact_memory: Some(1 << 30), ..opts(500) };
    let exact = solve(&chain, budget, Algorithm::Persistent, &room).unwrap();
    assert_eq!(exact.slot_size, 1);
    assert!(exact.detail.unwrap_or_default().starts_with("not rounded to slots"));
    assert!(exact.schedule.makespan < rounded.schedule.makespan);
    assert!(exact.schedule.peak_memory <= budget);
}

/// This file's case of half a minute or more: the README's test command
/// leaves it out (`cargo test -- --skip ::slow::`), CI runs it after
/// (`.ci/run`), as `tools/test-all.sh --slow` does.
mod slow {
    #[test]
    fn persistent_solve_equals_the_one_byte_slot_dp() {
        super::persistent_solve_equals_the_one_byte_slot_dp();
    }
}
