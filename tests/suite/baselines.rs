//! Every baseline on random small chains at every budget from below the
//! smallest feasible one to store-all's peak: its schedule replays valid and
//! within the budget, an infeasible answer names a budget that works, and the
//! persistent DP (exact slots) is never slower.

use remat::solve::baselines::BASELINES;
use remat::solve::dp;
use remat::solve::{Algorithm, SolveError, SolveOptions, solve};
use remat::synthetic::{Rng, small_chain};
use remat::{Chain, simulate_within};

const CHAINS: usize = 600;

/// Slots of one byte at any budget: the slot-based solvers are exact.
fn exact() -> SolveOptions<'static> {
    SolveOptions { slots: std::num::NonZeroUsize::new(usize::MAX).expect("slots > 0"), ..SolveOptions::default() }
}

fn store_all_peak(chain: &Chain) -> u64 {
    solve(chain, u64::MAX, Algorithm::StoreAll, &exact()).unwrap().schedule.peak_memory
}

#[test]
fn baselines_replay_within_budget_and_persistent_is_never_slower() {
    let mut rng = Rng::new(44);
    let (mut checked, mut persistent_faster) = (0, 0);
    for i in 0..CHAINS {
        let chain = small_chain(&mut rng, 1 + i % 7, 9, 6);
        let top = store_all_peak(&chain);
        let bottom = dp::min_peak_exact::<dp::Persistent>(&chain).saturating_sub(1);
        for budget in bottom..=top {
            let optimal = solve(&chain, budget, Algorithm::Persistent, &exact()).ok().map(|s| s.schedule.makespan);
            for &algorithm in BASELINES {
                match solve(&chain, budget, algorithm, &exact()) {
                    Ok(sol) => {
                        checked += 1;
                        let replay = simulate_within(&chain, &sol.schedule.operations, budget)
                            .unwrap_or_else(|e| panic!("{algorithm} at {budget}: {e}\n{chain:?}"));
                        assert_eq!(sol.schedule.makespan, replay.makespan);
                        assert_eq!(sol.schedule.peak_memory, replay.peak_memory);
                        let best = optimal.unwrap_or_else(|| {
                            panic!("{algorithm} fits {budget} where persistent does not\n{chain:?}")
                        });
                        assert!(best <= replay.makespan + 1e-9, "{algorithm} beats persistent at {budget}\n{chain:?}");
                        if best < replay.makespan - 1e-9 {
                            persistent_faster += 1;
                        }
                    }
                    Err(SolveError::Infeasible { min_budget, .. }) => {
                        let min = min_budget.expect("the baselines always know their smallest budget");
                        assert!(min > budget, "{algorithm}: smallest budget {min} <= {budget}");
                        let sol = solve(&chain, min, algorithm, &exact())
                            .unwrap_or_else(|e| panic!("{algorithm} at its own smallest budget {min}: {e}"));
                        assert!(sol.schedule.peak_memory <= min);
                    }
                    Err(e) => panic!("{algorithm} at {budget}: {e}"),
                }
            }
            // Store-all's peak is the largest budget of the loop: it must fit there.
            if budget == top {
                assert!(solve(&chain, budget, Algorithm::StoreAll, &exact()).is_ok());
            }
        }
    }
    println!("{checked} feasible baseline schedules checked; persistent strictly faster in {persistent_faster}");
    assert!(checked > 10 * CHAINS && persistent_faster > 0);
}

/// The baselines with the default 500 slots (revolve rounds sizes up) on
/// larger network-like chains: valid and within budget wherever they answer.
#[test]
fn baselines_on_network_like_chains() {
    for seed in 0..6 {
        let chain = remat::synthetic::network_like(seed, 10 + 7 * seed as usize);
        let top = store_all_peak(&chain);
        let bottom = dp::min_peak_exact::<dp::Persistent>(&chain);
        for step in 0..=8 {
            let budget = bottom + (top - bottom) * step / 8;
            for &algorithm in BASELINES {
                if let Ok(sol) = solve(&chain, budget, algorithm, &SolveOptions::default()) {
                    simulate_within(&chain, &sol.schedule.operations, budget).unwrap();
                    assert!(sol.schedule.peak_memory <= budget);
                }
            }
        }
    }
}

#[test]
fn revolve_refuses_a_table_larger_than_memory() {
    // 101 x 102 / 2 cells of 10 million slots: about 480 GiB of table.
    let chain = remat::synthetic::network_like(3, 100);
    let opts = remat::solve::SolveOptions {
        slots: std::num::NonZeroUsize::new(10_000_000).expect("slots > 0"),
        ..remat::solve::SolveOptions::default()
    };
    let budget = 1u64 << 40;
    let estimate = remat::solve::memory_estimate(&chain, budget, remat::solve::Algorithm::Revolve, &opts).unwrap();
    assert!(estimate > 1 << 36, "{estimate}");
    match remat::solve::solve(&chain, budget, remat::solve::Algorithm::Revolve, &opts) {
        Err(e @ remat::solve::SolveError::TooLarge { .. }) => {
            // Refused before any table is built, by its memory or (first,
            // O(1)) by its step count (remat::guard).
            let msg = e.to_string();
            let named = msg.contains("the revolve DP's tables would take about")
                || msg.contains("the revolve DP would take about");
            assert!(named && msg.contains("use fewer memory slots"), "{msg}")
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
