//! The optimised persistent DP against the straightforward triple loop it
//! replaced (`tests/suite/reference/mod.rs`): the same makespan, bit for bit, and
//! the same operation sequence at every budget, on random chains.

use crate::reference;

use reference::{Reference, store_all_peak};
use remat::slots::{SlotChain, Slots};
use remat::solve::persistent::{Table, min_peak_slots};
use remat::synthetic::{Rng, network_like, small_chain};
use remat::{Chain, simulate_within};

/// Builds both tables for `chain` at `budget` bytes and `slots` slots and
/// compares them at every budget the table answers. Returns the number of
/// feasible budgets.
fn compare(chain: &Chain, budget: u64, slots: usize) -> usize {
    let sc = SlotChain::new(chain, Slots::new(budget, slots));
    let reference = Reference::<f64>::build(sc.clone());
    let table = Table::build(sc.clone(), None);
    let mut feasible = 0;
    for m in 0..=sc.slots.capacity + 1 {
        let (want, got) = (reference.makespan(m), table.makespan(m));
        assert_eq!(got.to_bits(), want.to_bits(), "{chain:?} at {m} of {} slots: {got} != {want}", sc.slots.capacity);
        let ops = table.sequence(m);
        assert_eq!(ops, reference.sequence(m), "{chain:?} at {m} of {} slots", sc.slots.capacity);
        if let Some(ops) = ops {
            feasible += 1;
            let replay = simulate_within(chain, &ops, sc.slots.bytes(m)).unwrap();
            assert!((replay.makespan - got).abs() <= 1e-9 * got.max(1.0));
        }
    }
    assert_eq!(feasible > 0, min_peak_slots(&sc) <= sc.slots.capacity);
    feasible
}

#[test]
fn equals_reference_on_small_integer_chains_with_exact_slots() {
    let mut rng = Rng::new(8);
    let mut feasible = 0;
    for i in 0..1500 {
        let chain = small_chain(&mut rng, 1 + i % 20, 8, 5);
        let budget = rng.range(0, store_all_peak(&chain) + 2);
        feasible += compare(&chain, budget, budget.max(1) as usize);
    }
    println!("{feasible} feasible budgets compared");
    assert!(feasible > 10_000, "too few feasible cases to mean anything: {feasible}");
}

#[test]
fn equals_reference_on_random_chains_with_coarse_slots() {
    let mut rng = Rng::new(88);
    for i in 0..300 {
        // Real-valued times (near-ties between splits), sizes up to 1000.
        let mut chain = small_chain(&mut rng, 2 + i % 30, 1000, 1000);
        let stages = chain
            .stages()
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.forward_time /= 7.0;
                s.backward_time /= 3.0;
                s
            })
            .collect();
        chain = Chain::new("scaled", chain.input_size(), stages, chain.loss().clone()).unwrap();
        let budget = rng.range(store_all_peak(&chain) / 4, store_all_peak(&chain) + 10);
        compare(&chain, budget, rng.range(5, 120) as usize);
    }
}

#[test]
fn equals_reference_on_network_like_chains() {
    for (len, slots) in [(20, 500), (40, 200), (64, 100), (90, 60)] {
        let chain = network_like(len as u64, len);
        let peak = store_all_peak(&chain);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        for budget in [min, (min + peak) / 2, peak] {
            compare(&chain, budget, slots);
        }
    }
}

/// Why the table keeps `f64` costs: with `f32` (half the memory traffic) the
/// sums of real-valued times round differently, so on near-ties another split
/// wins and the sequence changes, and the makespan no longer equals the
/// simulator's. This finds such cases, so that the choice stays justified.
#[test]
fn f32_costs_would_change_results() {
    let (mut sequences, mut makespans, mut cases) = (0, 0, 0);
    for seed in 0..40 {
        let chain = network_like(seed, 12 + seed as usize % 20);
        let peak = store_all_peak(&chain);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        let sc = SlotChain::new(&chain, Slots::new(min + (peak - min) / 3, 100));
        let wide = Reference::<f64>::build(sc.clone());
        let narrow = Reference::<f32>::build(sc.clone());
        for m in 0..=sc.slots.capacity {
            if let Some(ops) = wide.sequence(m) {
                cases += 1;
                makespans += usize::from(f64::from(narrow.makespan(m)) != wide.makespan(m));
                sequences += usize::from(narrow.sequence(m).as_ref() != Some(&ops));
            }
        }
    }
    println!("f32 vs f64 over {cases} budgets: {makespans} makespans and {sequences} sequences differ");
    assert!(makespans > 0 && sequences > 0);
}
