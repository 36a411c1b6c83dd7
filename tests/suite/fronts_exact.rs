//! The exact persistent DP (`solve::fronts`) judged by the slot DP at one
//! byte per slot (its definition of exact), by exhaustive search, by the
//! simulator and by every baseline.

use crate::reference;

use reference::store_all_peak;
use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::{Fronts, FrontsTooLarge, fastest};
use remat::solve::persistent::Table;
use remat::solve::{Algorithm, SolveOptions, exhaustive, solve};
use remat::synthetic::{Rng, network_like, small_chain};
use remat::{Chain, simulate_within};

/// Checks the fronts built for `budget` against `table`, the slot DP whose
/// slots are exact for this chain (one byte, or a common divisor of every
/// size), built for a budget of at least `budget`: the same makespan bit for
/// bit, the same operations, a replay at that makespan within the budget.
fn agrees_with_slot_table(chain: &Chain, budget: u64, table: &Table) {
    let fronts = Fronts::build(chain, budget);
    let slot = table.slots().slot;
    let m = (budget / slot) as usize;
    let want = table.makespan(m);
    let got = fronts.makespan(budget);
    assert_eq!(got.to_bits(), want.to_bits(), "{chain:?} at {budget}: fronts {got}, slot DP {want}");
    let ops = fronts.sequence(budget);
    assert_eq!(ops, table.sequence(m), "{chain:?} at {budget}: another schedule than the slot DP's");
    if let Some(ops) = ops {
        let replay = simulate_within(chain, &ops, budget).unwrap_or_else(|e| panic!("{chain:?} at {budget}: {e}"));
        // The simulator sums the same times in another order.
        assert!((replay.makespan - got).abs() <= 1e-9 * got.max(1.0), "{chain:?} at {budget}");
    }
}

/// Thousands of random small chains (sizes 0..=8, zeros, overheads, odd
/// gradients and losses), every budget from below the smallest feasible one
/// to above store-all's peak: equal to the slot DP with one-byte slots.
#[test]
fn equals_one_byte_slot_dp_on_small_chains() {
    let mut rng = Rng::new(18);
    let mut feasible = 0;
    for i in 0..3000 {
        let chain = small_chain(&mut rng, 1 + i % 8, 8, 5);
        let top = store_all_peak(&chain) + 2;
        let table = Table::build(SlotChain::new(&chain, Slots::new(top, top as usize)), None);
        assert_eq!(table.slots().slot, 1);
        let fronts = Fronts::build(&chain, top);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        assert_eq!(fronts.min_budget(), Some(min), "{chain:?}");
        for budget in 0..=top {
            agrees_with_slot_table(&chain, budget, &table);
            // One build answers every smaller budget too.
            assert_eq!(fronts.makespan(budget).to_bits(), table.makespan(budget as usize).to_bits());
            feasible += usize::from(budget >= min);
        }
    }
    assert!(feasible > 3000 * 4, "too few feasible cases: {feasible}");
}

/// Longer chains with sizes up to a thousand bytes at random budgets, where
/// fronts have many points: still the one-byte slot DP's answer.
#[test]
fn equals_one_byte_slot_dp_on_larger_sizes() {
    let mut rng = Rng::new(1018);
    for i in 0..60 {
        let chain = small_chain(&mut rng, 8 + i % 17, 1000, 50);
        let top = store_all_peak(&chain);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        let table = Table::build(SlotChain::new(&chain, Slots::new(top, top as usize)), None);
        for _ in 0..4 {
            let budget = rng.range(min.saturating_sub(10), top + 10);
            agrees_with_slot_table(&chain, budget, &table);
        }
    }
}

/// Network-like chains (sizes in whole MiB, budgets of hundreds of MiB): the
/// slot DP with MiB slots is exact there, and the fronts agree with it at
/// budgets that are not whole MiB.
#[test]
fn equals_exact_slot_dp_on_network_like_chains() {
    let mib = 1u64 << 20;
    for (seed, len) in [(1, 20), (2, 45), (3, 80)] {
        let chain = network_like(seed, len);
        let top = store_all_peak(&chain);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        let table = Table::build(SlotChain::new(&chain, Slots::with_slot(top + mib, mib)), None);
        for k in 0..=8u64 {
            let budget = min + (top - min) * k / 8 + k * 12345;
            agrees_with_slot_table(&chain, budget, &table);
        }
        assert_eq!(Fronts::build(&chain, top).min_budget(), Some(min));
    }
}

/// Never faster than exhaustive search over every schedule (persistent or
/// not), and never slower than the slot DP at any slot count or any
/// baseline, whose schedules are all persistent.
#[test]
fn bounded_by_exhaustive_and_no_worse_than_any_baseline() {
    let mut rng = Rng::new(2018);
    let opts =
        |slots: usize| SolveOptions { slots: std::num::NonZeroUsize::new(slots).unwrap(), ..SolveOptions::default() };
    let baselines = [
        Algorithm::StoreAll,
        Algorithm::Sequential,
        Algorithm::Revolve,
        Algorithm::ChenSqrt,
        Algorithm::ChenGreedy,
        Algorithm::Persistent,
    ];
    for i in 0..400 {
        let chain = small_chain(&mut rng, 1 + i % 7, 20, 9);
        let top = store_all_peak(&chain);
        for budget in [top, top * 3 / 4, top / 2, top / 3] {
            let exact = fastest(&chain, budget);
            if let Some((time, ops)) = &exact {
                let (best, _) = exhaustive::fastest(&chain, budget).expect("a persistent schedule is a schedule");
                assert!(*time >= best - 1e-9, "{chain:?} at {budget}: {time} beats exhaustive {best}");
                let replay = simulate_within(&chain, ops, budget).unwrap();
                assert!((replay.makespan - time).abs() <= 1e-9 * time.max(1.0));
            }
            for algorithm in baselines {
                for slots in [3, 40] {
                    if let Ok(sol) = solve(&chain, budget, algorithm, &opts(slots)) {
                        let (time, _) = exact.as_ref().unwrap_or_else(|| {
                            panic!("{chain:?} at {budget}: {algorithm} fits, the exact DP does not")
                        });
                        let other = sol.schedule.makespan;
                        assert!(*time <= other + 1e-9, "{chain:?} at {budget}: {algorithm} {other} beats {time}");
                    }
                }
            }
        }
    }
}

/// A limit on the fronts' memory is kept, and the error says by how much.
/// The projection that gives up early may overestimate (it assumes fronts
/// keep growing with length), but not tenfold on a network-like chain.
#[test]
fn gives_up_over_its_memory_limit() {
    let chain = network_like(5, 60);
    let budget = store_all_peak(&chain) / 2;
    let full = Fronts::build(&chain, budget);
    let within = Fronts::build_within(&chain, budget, 10 * full.bytes()).expect("ten times its own size fits");
    assert_eq!(within.makespan(budget).to_bits(), full.makespan(budget).to_bits());
    assert_eq!(within.sequence(budget), full.sequence(budget));
    let err: FrontsTooLarge = match Fronts::build_within(&chain, budget, full.bytes() / 4) {
        Err(e) => e,
        Ok(_) => panic!("a quarter of the memory it needs was enough"),
    };
    assert_eq!(err.limit, full.bytes() / 4);
    assert!(err.bytes <= full.bytes());
    assert!(err.projected || err.bytes > err.limit);
    assert!(err.to_string().contains("60-stage"), "{err}");
    assert!(err.to_string().contains(&format!("the {} bytes allowed", full.bytes() / 4)), "{err}");
}

/// Fronts cut by a ceiling (the makespan of a schedule known to fit) answer
/// the budget they were built for as the uncut ones do, schedule included,
/// when the optimum is at most the ceiling, and find nothing when it is
/// clearly above: what `auto` relies on when it passes a baseline's makespan.
#[test]
fn a_ceiling_keeps_the_answer_at_the_budget() {
    let mut rng = Rng::new(2218);
    let mut cut = 0;
    for i in 0..600 {
        let chain = small_chain(&mut rng, 2 + i % 12, 40, 9);
        let top = store_all_peak(&chain);
        let min = remat::solve::dp::min_peak_exact::<remat::solve::dp::Persistent>(&chain);
        for budget in [min, (min + top) / 2, min + (top - min) / 5, top] {
            let full = Fronts::build(&chain, budget);
            let best = full.makespan(budget);
            let chen = solve(&chain, budget, Algorithm::ChenGreedy, &SolveOptions::default()).ok();
            let ceilings = [Some(best), chen.map(|s| s.schedule.makespan), Some(best * 1.01)];
            for ceiling in ceilings.into_iter().flatten() {
                let bounded = Fronts::build_bounded(&chain, budget, u64::MAX, ceiling).unwrap();
                assert_eq!(bounded.makespan(budget).to_bits(), best.to_bits(), "{chain:?} at {budget}");
                assert_eq!(bounded.sequence(budget), full.sequence(budget), "{chain:?} at {budget}");
                assert!(bounded.points() <= full.points());
                cut += full.points() - bounded.points();
            }
            if best > chain.store_all_time() * 1.001 {
                let below = Fronts::build_bounded(&chain, budget, u64::MAX, best * 0.999).unwrap();
                assert!(below.makespan(budget).is_infinite(), "{chain:?} at {budget}: nothing beats the optimum");
            }
        }
    }
    assert!(cut > 0, "the ceilings never dropped a point");
}
