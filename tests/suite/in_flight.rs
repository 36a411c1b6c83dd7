//! Micro-batches in flight (issue 28): the persistent DP under
//! (n - 1) x residue + peak <= M, judged by a brute force over its class
//! (every persistent sequence replayed by the simulator, which gives its peak
//! and residue), by exhaustive search over every schedule, and through the
//! command line. Exhaustive search itself is checked against an independent
//! oracle in its unit tests (`in_flight_search_equals_the_label_oracle`).

use std::collections::HashMap;
use std::num::NonZeroUsize;

use remat::solve::{AUTO_BASELINES, Algorithm, SolveError, SolveOptions, min_budget, solve};
use remat::synthetic::{Rng, network_like, small_chain, with_options};
use remat::{Chain, simulate};

use crate::common;
use common::persistent_sequences;

fn in_flight(k: usize) -> NonZeroUsize {
    NonZeroUsize::new(k).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// (peak, residue, makespan) of every persistent sequence of `chain`.
fn persistent_class(chain: &Chain) -> Vec<(u64, u64, f64)> {
    let n = chain.len() + 1;
    persistent_sequences(chain, 1, n, &mut HashMap::new())
        .iter()
        .map(|ops| {
            let r = simulate(chain, ops).unwrap_or_else(|e| panic!("{chain:?}: {ops:?}: {e}"));
            (r.peak_memory, r.residue(), r.makespan)
        })
        .collect()
}

/// The rank memory of a class member with `k` micro-batches in flight.
fn rank(p: &(u64, u64, f64), k: usize) -> u64 {
    p.0 + (k as u64 - 1) * p.1
}

/// One chain, k = 1..=4, at budgets from below the class's smallest rank
/// memory to past its largest: the exact persistent solve and the slot table
/// at one-byte slots equal the brute force, replay within the budget with
/// their rank memory, and name the smallest budget when infeasible. Returns
/// (cases, feasible cases, cases slower than with one micro-batch).
pub(crate) fn check_chain(chain: &Chain) -> (usize, usize, usize) {
    let class = persistent_class(chain);
    let (mut cases, mut feasible, mut slower) = (0, 0, 0);
    for k in 1..=4usize {
        let lo = class.iter().map(|p| rank(p, k)).min().unwrap();
        let hi = class.iter().map(|p| rank(p, k)).max().unwrap();
        for i in 0..10u64 {
            // From one byte below the least (none below 0: a chain of empty stages).
            let below = lo.saturating_sub(1);
            let budget = below + (hi + 1 - below) * i / 9;
            cases += 1;
            let best = class.iter().filter(|p| rank(p, k) <= budget).map(|p| p.2).min_by(f64::total_cmp);
            let exact = SolveOptions { in_flight: in_flight(k), ..SolveOptions::default() };
            // exact_memory 0: the slot table, here at one byte a slot (exact too).
            let table = SolveOptions { exact_memory: Some(0), ..common::exact(budget) };
            let table = SolveOptions { in_flight: in_flight(k), ..table };
            for opts in [exact, table] {
                match (solve(chain, budget, Algorithm::Persistent, &opts), best) {
                    (Ok(s), Some(b)) => {
                        assert!(
                            close(s.schedule.makespan, b),
                            "{chain:?} at {budget}, k {k}: {} vs {b}",
                            s.schedule.makespan
                        );
                        assert!(s.replay.rank_peak(k).unwrap() <= budget);
                        assert_eq!(s.schedule.in_flight, k);
                        assert_eq!(s.schedule.residue, (k > 1).then(|| s.replay.residue()));
                    }
                    (Err(SolveError::Infeasible { min_budget: m, .. }), None) => {
                        if k > 1 {
                            assert_eq!(m, Some(lo), "{chain:?} at {budget}, k {k}");
                        }
                    }
                    (other, _) => panic!("{chain:?} at {budget}, k {k}: {:?} vs brute force {best:?}", other.err()),
                }
            }
            if let Some(b) = best {
                feasible += 1;
                let one = class.iter().filter(|p| p.0 <= budget).map(|p| p.2).min_by(f64::total_cmp).unwrap();
                if b > one {
                    slower += 1;
                }
                assert_eq!(min_budget(chain, Algorithm::Persistent, &exact).unwrap(), Some(lo), "{chain:?}, k {k}");
            }
        }
    }
    (cases, feasible, slower)
}

/// The persistent DP with micro-batches in flight equals the brute force over
/// its class on 1,500 random chains of 1 to 5 stages (a third with recording
/// options), 1 to 4 micro-batches, ten budgets each.
fn persistent_equals_brute_force_over_its_class() {
    let mut rng = Rng::new(2028);
    let (mut cases, mut feasible, mut slower) = (0, 0, 0);
    for c in 0..1500 {
        let len = rng.range(1, 5) as usize;
        let plain = small_chain(&mut rng, len, 9, 4);
        let chain = if c % 3 == 0 { with_options(&mut rng, &plain, 3, 3) } else { plain };
        let (a, b, d) = check_chain(&chain);
        cases += a;
        feasible += b;
        slower += d;
    }
    eprintln!("{cases} cases, {feasible} feasible, {slower} slower than with one micro-batch in flight");
    assert!(feasible > cases / 2 && slower > feasible / 5, "{cases} {feasible} {slower}");
}

/// Exhaustive search over every schedule is never slower than the persistent
/// DP with the same micro-batches in flight, and auto (exhaustive search on
/// chains this short) returns exhaustive search's makespan.
#[test]
fn exhaustive_is_never_slower_than_persistent() {
    let mut rng = Rng::new(8);
    let (mut cases, mut faster) = (0, 0);
    for _ in 0..300 {
        let len = rng.range(2, 5) as usize;
        let chain = small_chain(&mut rng, len, 9, 4);
        let class = persistent_class(&chain);
        for k in 2..=4usize {
            let lo = class.iter().map(|p| rank(p, k)).min().unwrap();
            let hi = class.iter().map(|p| rank(p, k)).max().unwrap();
            for budget in [lo, (lo + hi) / 2, hi] {
                let opts = SolveOptions { in_flight: in_flight(k), ..SolveOptions::default() };
                let p = solve(&chain, budget, Algorithm::Persistent, &opts).unwrap();
                let e = solve(&chain, budget, Algorithm::Exhaustive, &opts).unwrap();
                let a = solve(&chain, budget, Algorithm::Auto, &opts).unwrap();
                assert!(e.schedule.makespan <= p.schedule.makespan + 1e-9, "{chain:?} at {budget}, k {k}");
                assert!(e.replay.rank_peak(k).unwrap() <= budget && a.replay.rank_peak(k).unwrap() <= budget);
                assert_eq!(a.schedule.makespan, e.schedule.makespan);
                cases += 1;
                faster += usize::from(e.schedule.makespan < p.schedule.makespan - 1e-9);
            }
        }
    }
    eprintln!("{cases} cases; exhaustive strictly faster than persistent in {faster}");
}

/// On longer chains auto (the persistent DP beside the baselines) is never
/// slower than any baseline with the same micro-batches in flight, and every
/// answer replays with its rank memory within the budget.
#[test]
fn auto_is_never_slower_than_the_baselines() {
    for seed in 0..4 {
        let chain = network_like(seed, 14 + 3 * seed as usize);
        let store_all = solve(&chain, u64::MAX / 8, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
        for k in [2usize, 4] {
            let full = store_all.replay.rank_peak(k).unwrap();
            for frac in [0.3, 0.5, 0.8] {
                let budget = (full as f64 * frac) as u64;
                let opts = SolveOptions { in_flight: in_flight(k), ..SolveOptions::default() };
                let auto = match solve(&chain, budget, Algorithm::Auto, &opts) {
                    Ok(s) => s,
                    Err(SolveError::Infeasible { min_budget, .. }) => {
                        let m = min_budget.expect("auto names a budget");
                        assert!(m > budget);
                        solve(&chain, m, Algorithm::Auto, &opts).expect("the budget it names works");
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                };
                assert!(auto.replay.rank_peak(k).unwrap() <= budget);
                for &b in AUTO_BASELINES {
                    if let Ok(base) = solve(&chain, budget, b, &opts) {
                        assert!(base.replay.rank_peak(k).unwrap() <= budget, "{b}");
                        assert!(auto.schedule.makespan <= base.schedule.makespan + 1e-9, "{b} at {frac}, k {k}");
                    }
                }
            }
        }
    }
}

/// One micro-batch in flight is the plain problem, schedule for schedule.
#[test]
fn one_in_flight_is_the_plain_solve() {
    let chain = network_like(3, 20);
    let store_all = solve(&chain, u64::MAX / 8, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
    let budget = store_all.schedule.peak_memory / 2;
    for algorithm in [Algorithm::Auto, Algorithm::Persistent, Algorithm::Sequential] {
        let plain = solve(&chain, budget, algorithm, &SolveOptions::default()).unwrap();
        let one = SolveOptions { in_flight: in_flight(1), ..SolveOptions::default() };
        let one = solve(&chain, budget, algorithm, &one).unwrap();
        assert_eq!(plain.schedule, one.schedule);
        assert_eq!(plain.schedule.in_flight, 1);
        assert_eq!(plain.schedule.residue, None);
    }
}

/// The floating DP with micro-batches in flight (its spine is checked
/// against nested exhaustive search in its unit tests) replays within the
/// budget, is never slower than the persistent DP, and is what auto runs on
/// chains where auto runs it for one micro-batch.
#[test]
fn floating_in_flight_is_never_slower_than_persistent() {
    let mut strictly = 0;
    for seed in 0..3 {
        let chain = network_like(seed, 16);
        let store_all = solve(&chain, u64::MAX / 8, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
        for k in [2usize, 3] {
            let budget = store_all.replay.rank_peak(k).unwrap() / 3;
            let opts = SolveOptions { in_flight: in_flight(k), ..SolveOptions::default() };
            let p = solve(&chain, budget, Algorithm::Persistent, &opts).unwrap();
            let f = solve(&chain, budget, Algorithm::Floating, &opts).unwrap();
            let a = solve(&chain, budget, Algorithm::Auto, &opts).unwrap();
            assert!(f.replay.rank_peak(k).unwrap() <= budget && a.replay.rank_peak(k).unwrap() <= budget);
            assert!(f.schedule.makespan <= p.schedule.makespan, "seed {seed}, k {k}");
            assert!(a.schedule.makespan <= f.schedule.makespan, "seed {seed}, k {k}");
            assert!(a.reason.as_deref().unwrap().contains("floating DP"), "{:?}", a.reason);
            strictly += usize::from(f.schedule.makespan < p.schedule.makespan);
        }
    }
    eprintln!("floating strictly faster than persistent in {strictly} of 6 cases");
}

fn remat(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_remat"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("remat runs")
}

/// `remat solve --in-flight N`: the rank peak printed and in the JSON fits;
/// 1 prints exactly what no flag prints; bad values and graphs exit 2 naming
/// the flag.
#[test]
fn solve_in_flight_on_the_command_line() {
    let plain = remat(&["solve", "chains/rotor-fc6.json", "--memory", "120MiB"]);
    let one = remat(&["solve", "chains/rotor-fc6.json", "--memory", "120MiB", "--in-flight", "1"]);
    assert!(plain.status.success());
    assert_eq!(plain.stdout, one.stdout);
    let three = remat(&["solve", "chains/rotor-fc6.json", "--memory", "200MiB", "--in-flight", "3", "--json"]);
    assert!(three.status.success(), "{}", String::from_utf8_lossy(&three.stderr));
    let json: serde_json::Value = serde_json::from_slice(&three.stdout).unwrap();
    let (peak, residue) = (json["peak_memory"].as_u64().unwrap(), json["residue"].as_u64().unwrap());
    assert_eq!(json["in_flight"], 3);
    assert!(peak + 2 * residue <= 200 << 20);
    let zero = remat(&["solve", "chains/rotor-fc6.json", "--memory", "200MiB", "--in-flight", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--in-flight"));
    let graphs: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/chains/graphs")).unwrap().collect();
    let graph = graphs[0].as_ref().unwrap().path();
    let g = remat(&["solve", graph.to_str().unwrap(), "--memory", "1GiB", "--in-flight", "2"]);
    assert_eq!(g.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&g.stderr);
    assert!(stderr.contains("in_flight 2 applies to chains only"), "{stderr}");
    assert!(stderr.contains("hint: drop --in-flight"), "{stderr}");
}

/// `remat pipeline`: 1F1B's in-flight counts per rank, every rank's plan
/// within the budget, a step time never above checkpointing every block
/// (remat's split search includes the balanced split, and there the
/// persistent optimum is at least as fast as the every-block schedule, which
/// is persistent) and below it on GPT-2 under GPipe; a bad split exits 2.
#[test]
fn pipeline_planner() {
    for (chain, ranks, schedule) in [
        ("chains/gpt2-small-s1024-b8.json", "4", "1f1b"),
        ("chains/gpt2-small-s1024-b8.json", "4", "gpipe"),
        ("chains/resnet50-224-b8.json", "2", "1f1b"),
    ] {
        let out = remat(&["pipeline", chain, "--ranks", ranks, "--schedule", schedule, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ranks: usize = ranks.parse().unwrap();
        for (k, r) in json["ranks"].as_array().unwrap().iter().enumerate() {
            let budget = json["budgets"][k].as_u64().unwrap();
            assert_eq!(r["budget"].as_u64(), Some(budget));
            let want = if schedule == "gpipe" { 8 } else { ranks - k };
            assert_eq!(r["in_flight"].as_u64(), Some(want as u64));
            assert!(r["plan"]["rank_peak"].as_u64().unwrap() <= budget);
        }
        let (step, every) = (json["step_time"].as_f64().unwrap(), json["every_block_step_time"].as_f64().unwrap());
        assert!(step <= every + 1e-9, "{chain} {schedule}: {step} vs {every}");
        if schedule == "gpipe" {
            assert!(step < every * 0.95, "{chain} {schedule}: {step} vs {every}");
        }
    }
    let bad = remat(&["pipeline", "chains/rotor-fc6.json", "--split", "2,2"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("add up to the chain's 6 stages"));
    let bad = remat(&["pipeline", "chains/rotor-fc6.json", "--ranks", "3", "--memory", "1GiB,1GiB"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("2 sizes for 3 ranks"));
    // Budgets per rank: each rank planned within its own.
    let out = remat(&["pipeline", "chains/rotor-fc6.json", "--split", "3,3", "--memory", "120MiB,90MiB", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (r, budget) in json["ranks"].as_array().unwrap().iter().zip([120u64 << 20, 90 << 20]) {
        assert_eq!(r["budget"].as_u64(), Some(budget));
        assert!(r["plan"]["rank_peak"].as_u64().unwrap() <= budget);
    }
}

/// This file's case of half a minute or more: the README's test command
/// leaves it out (`cargo test -- --skip ::slow::`), CI runs it after
/// (`.ci/run`), as `tools/test-all.sh --slow` does.
mod slow {
    #[test]
    fn persistent_equals_brute_force_over_its_class() {
        super::persistent_equals_brute_force_over_its_class();
    }
}
