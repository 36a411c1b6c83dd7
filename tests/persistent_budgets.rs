//! One persistent table serving many budgets: `solve_many` and
//! `min_budget_for_makespan` against separate solves and exhaustive search,
//! and what the CLI says about table sizes.

mod reference;

use assert_cmd::Command;
use predicates::str::contains;
use reference::store_all_peak;
use remat::slots::{SlotChain, Slots};
use remat::solve::persistent::{self, Table};
use remat::solve::{Algorithm, SolveError, SolveOptions, exhaustive, min_budget_for_makespan, solve, solve_many};
use remat::synthetic::{Rng, network_like, small_chain};
use remat::{Chain, simulate_within};

fn opts(slots: usize) -> SolveOptions<'static> {
    SolveOptions { slots, ..SolveOptions::default() }
}

/// With exact slots (one byte), one table answers every budget exactly as a
/// separate solve does: same schedule, same infeasibility and smallest budget.
#[test]
fn one_table_equals_separate_exact_solves() {
    let mut rng = Rng::new(4);
    for i in 0..300 {
        let chain = small_chain(&mut rng, 1 + i % 7, 8, 5);
        let top = store_all_peak(&chain) + 3;
        let budgets: Vec<u64> = (0..=top).rev().collect();
        let many = solve_many(&chain, &budgets, Algorithm::Persistent, &opts(top as usize)).unwrap();
        assert_eq!(many.len(), budgets.len());
        for (&budget, got) in budgets.iter().zip(many) {
            let want = solve(&chain, budget, Algorithm::Persistent, &opts(budget.max(1) as usize));
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    assert_eq!(got.schedule.operations, want.schedule.operations, "{chain:?} at {budget}");
                    assert_eq!(got.schedule.makespan, want.schedule.makespan);
                    assert_eq!(got.schedule.budget, budget);
                }
                // One-byte slots: the smallest budget is the exact one.
                (Err(SolveError::Infeasible { min_budget, .. }), Err(SolveError::Infeasible { .. })) => {
                    assert_eq!(min_budget, Some(persistent::min_peak_exact(&chain)), "{chain:?} at {budget}")
                }
                (got, want) => panic!("{chain:?} at {budget}: {:?} vs {:?}", got.err(), want.err()),
            }
        }
    }
}

/// With coarse slots, budgets are answered in bands: the table of the band's
/// largest budget B answers every budget down to B / 2, at B's slot size.
#[test]
fn coarse_budgets_are_answered_by_the_table_of_their_band() {
    let chain = network_like(7, 60);
    let top = store_all_peak(&chain);
    let budgets: Vec<u64> = (1..=20).map(|k| top / 20 * k).collect();
    let many = solve_many(&chain, &budgets, Algorithm::Persistent, &opts(300)).unwrap();
    let mut tables = std::collections::BTreeMap::new();
    let mut seen_infeasible = false;
    for (&budget, got) in budgets.iter().zip(&many) {
        let slot = match got {
            Ok(sol) => sol.slot_size,
            Err(SolveError::Infeasible { .. }) => {
                seen_infeasible = true;
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        // The band's largest budget: the one with this slot size, within 2x.
        let head = *budgets.iter().rev().find(|&&b| Slots::new(b, 300).slot == slot).unwrap();
        assert!(budget <= head && budget >= head.div_ceil(2), "{budget} answered with the table of {head}");
        let table =
            tables.entry(head).or_insert_with(|| Table::build(SlotChain::new(&chain, Slots::new(head, 300)), None));
        let sol = got.as_ref().unwrap();
        let m = (budget / slot) as usize;
        assert_eq!(sol.solver_makespan, table.makespan(m));
        assert_eq!(Some(&sol.schedule.operations), table.sequence(m).as_ref());
        simulate_within(&chain, &sol.schedule.operations, budget).unwrap();
    }
    assert!(seen_infeasible && many.last().unwrap().is_ok());
    assert!(tables.len() >= 2 && tables.len() <= 5, "20 budgets over a ratio of 20: {} tables", tables.len());
    // Infeasible budgets name a larger budget that their band's table meets.
    for (&budget, got) in budgets.iter().zip(&many) {
        if let Err(SolveError::Infeasible { min_budget, .. }) = got {
            assert!(min_budget.unwrap() > budget);
        }
    }
}

#[test]
fn solve_many_checks_options_and_other_algorithms() {
    let chain = network_like(1, 5);
    assert!(matches!(solve_many(&chain, &[1 << 30], Algorithm::Persistent, &opts(0)), Err(SolveError::Options(_))));
    assert!(solve_many(&chain, &[], Algorithm::Persistent, &opts(500)).unwrap().is_empty());
    let budgets = [store_all_peak(&chain), 1];
    let many = solve_many(&chain, &budgets, Algorithm::Exhaustive, &opts(500)).unwrap();
    assert_eq!(many[0].as_ref().unwrap().schedule.makespan, chain.store_all_time());
    assert!(matches!(many[1], Err(SolveError::Infeasible { .. })));
}

/// With exact slots, the budget found for a makespan limit is the smallest:
/// it meets the limit and one byte less does not (checked by separate solves).
#[test]
fn min_budget_for_makespan_is_the_smallest() {
    let mut rng = Rng::new(12);
    for i in 0..300 {
        let chain = small_chain(&mut rng, 1 + i % 6, 8, 5);
        let peak = store_all_peak(&chain);
        let base = chain.store_all_time();
        let limit = base * (1.0 + rng.range(0, 60) as f64 / 100.0);
        let found = min_budget_for_makespan(&chain, limit, Algorithm::Persistent, &opts(peak as usize)).unwrap();
        let sol = found.unwrap_or_else(|| panic!("store-all always meets {limit} >= {base}"));
        let budget = sol.schedule.budget;
        assert!(sol.schedule.makespan <= limit && sol.schedule.peak_memory <= budget);
        if budget > 0 {
            let below = solve(&chain, budget - 1, Algorithm::Persistent, &opts((budget - 1).max(1) as usize));
            match below {
                Err(SolveError::Infeasible { .. }) => {}
                Ok(s) => assert!(s.schedule.makespan > limit, "{chain:?}: {} also meets {limit}", budget - 1),
                Err(e) => panic!("{e}"),
            }
        }
    }
    let chain = network_like(3, 8);
    let none = min_budget_for_makespan(&chain, chain.store_all_time() * 0.99, Algorithm::Persistent, &opts(500));
    assert!(none.unwrap().is_none(), "nothing beats store-all");
    let err = min_budget_for_makespan(&chain, 1e9, Algorithm::Exhaustive, &opts(500)).err().unwrap();
    assert!(err.to_string().contains("persistent only"));
    // The exhaustive optimum never needs more memory for the same limit.
    let small = small_chain(&mut Rng::new(5), 4, 8, 5);
    let limit = small.store_all_time() * 1.2;
    let found = min_budget_for_makespan(&small, limit, Algorithm::Persistent, &opts(1000)).unwrap().unwrap();
    let at = exhaustive::fastest(&small, found.schedule.budget).unwrap();
    assert!(at.0 <= limit);
}

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

fn fc6() -> String {
    format!("{}/chains/rotor-fc6.json", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn min_memory_reports_the_budget_for_an_overhead() {
    let out = remat().args(["min-memory", &fc6(), "--max-overhead", "11%", "--json"]).assert().success();
    let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let within = &json["max_overhead"];
    assert_eq!(within["percent"], 11.0);
    let budget = within["budget"].as_u64().unwrap();
    let chain = Chain::from_json(&std::fs::read_to_string(fc6()).unwrap()).unwrap();
    let at = solve(&chain, budget, Algorithm::Persistent, &opts(500)).unwrap();
    assert!(at.schedule.makespan <= chain.store_all_time() * 1.11);
    assert!(budget < store_all_peak(&chain));
    remat()
        .args(["min-memory", &fc6(), "--max-overhead", "11"])
        .assert()
        .success()
        .stdout(contains("persistent, within +11%:"));
    remat()
        .args(["min-memory", &fc6(), "--max-overhead=-1"])
        .assert()
        .code(2)
        .stderr(contains("`-1` is not a percentage of at least 0"));
}

/// A table that cannot fit is announced, then refused with a way out, not
/// allocated (a billion slots of 8 bytes for each of a tile's cells).
#[test]
fn solve_refuses_a_table_larger_than_memory() {
    remat()
        .args(["solve", &fc6(), "--memory", "1GiB", "--algorithm", "persistent", "--slots", "1000000000000"])
        .assert()
        .code(2)
        .stderr(contains("note: the persistent solver's table will take about"))
        .stderr(contains("(half of this machine's memory); use fewer --slots"));
}
