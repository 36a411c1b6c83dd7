//! `min_budget_for_makespan` against separate solves and exhaustive search,
//! and what the CLI says about table sizes.

use crate::reference;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;
use reference::store_all_peak;
use remat::Chain;
use remat::solve::{Algorithm, SolveError, SolveOptions, exhaustive, min_budget_for_makespan, solve};
use remat::synthetic::{Rng, network_like, small_chain};

fn opts(slots: usize) -> SolveOptions<'static> {
    SolveOptions { slots: std::num::NonZeroUsize::new(slots).expect("slots > 0"), ..SolveOptions::default() }
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
    // Any algorithm: the search runs `solve` itself. Exhaustive is exact.
    let small = small_chain(&mut Rng::new(9), 5, 8, 5);
    let limit = small.store_all_time() * 1.15;
    let found = min_budget_for_makespan(&small, limit, Algorithm::Exhaustive, &opts(500)).unwrap().unwrap();
    let b = found.schedule.budget;
    assert!(found.schedule.makespan <= limit);
    assert!(exhaustive::fastest(&small, b - 1).is_none_or(|(t, _)| t > limit), "{} bytes also meet it", b - 1);
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

/// `min-memory --max-overhead` answers with what `remat solve` runs: at the
/// printed budget `solve` meets the overhead, one byte below it does not.
#[test]
fn min_memory_reports_the_budget_at_which_solve_meets_an_overhead() {
    let makespan_at = |chain: &str, budget: u64| -> Option<f64> {
        let out = remat().args(["solve", chain, "--memory", &budget.to_string(), "--json"]).output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["makespan"].as_f64()
    };
    let network = format!("{}/chains/resnet18-224-b8.json", env!("CARGO_MANIFEST_DIR"));
    for (chain, pct) in [(fc6(), 11.0), (network, 5.0)] {
        let out =
            remat().args(["min-memory", &chain, "--max-overhead", &format!("{pct}%"), "--json"]).assert().success();
        let json: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        let within = &json["max_overhead"];
        assert_eq!(within["percent"], pct);
        let budget = within["budget"].as_u64().unwrap();
        let parsed = Chain::from_json(&std::fs::read_to_string(&chain).unwrap()).unwrap();
        let limit = parsed.store_all_time() * (1.0 + pct / 100.0);
        let at = makespan_at(&chain, budget).expect("solve meets it at the printed budget");
        assert!(at <= limit, "{chain}: {at} > {limit}");
        assert_eq!(Some(at), within["makespan"].as_f64());
        assert!(
            makespan_at(&chain, budget - 1).is_none_or(|t| t > limit),
            "{chain}: {} bytes also meet it",
            budget - 1
        );
        assert!(budget < store_all_peak(&parsed));
    }
    remat()
        .args(["min-memory", &fc6(), "--max-overhead", "11"])
        .assert()
        .success()
        .stdout(contains("auto, within +11%:").and(contains("the schedule's peak:")));
    remat()
        .args(["min-memory", &fc6(), "--max-overhead=-1"])
        .assert()
        .code(2)
        .stderr(contains("`-1` is not a percentage of at least 0"));
}

/// A table that cannot fit is announced, then refused with a way out, not
/// allocated (a billion slots, the most --slots takes, of 8 bytes for each of a tile's cells).
#[test]
fn solve_refuses_a_table_larger_than_memory() {
    remat()
        .args(["solve", &fc6(), "--memory", "1GiB", "--algorithm", "persistent", "--slots", "1000000000"])
        .assert()
        .code(2)
        .stderr(contains("note: the persistent solver's table will take about"))
        .stderr(contains("(half of this machine's memory); use fewer memory slots"));
}
