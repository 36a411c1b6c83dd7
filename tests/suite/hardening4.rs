//! Issue 36 through the binary and the library, the fourth round of hostile
//! inputs (its Rust, command-line and Python-binding findings; the Python
//! ones are in python/tests/test_hardening.py): pipelines and micro-batches
//! in flight. Each reproducer ends with a correct answer, a clear error
//! (exit 2 naming the flag and the value) or an infeasible verdict, never a
//! panic, a saturated figure presented as a fit, or a figure the schedule's
//! operations do not have.

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

use remat::{Algorithm, Chain, SolveOptions};

fn remat() -> Command {
    let mut cmd = Command::cargo_bin("remat").unwrap();
    // A hang fails the test instead of stalling the suite.
    cmd.timeout(Duration::from_secs(120));
    cmd
}

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}

#[test]
fn micro_batch_counts_past_the_limit_are_refused_naming_the_flag_and_the_most() {
    // Issue 36: --micro-batches 2^64 - 1 printed step times of 0.00
    // "(NaN%)" with exit 0; --in-flight 2^64 - 1 was infeasible with a
    // "proven" smallest budget equal to the budget asked.
    let chain = repo("chains/rotor-fc6.json");
    let most = remat::solve::MAX_IN_FLIGHT;
    assert_eq!(most, 1 << 20);
    for count in ["18446744073709551615".to_string(), (most + 1).to_string(), "0".to_string()] {
        remat()
            .args(["pipeline", &chain, "--ranks", "2", "--micro-batches", &count])
            .assert()
            .code(2)
            .stderr(contains("--micro-batches").and(contains(if count == "0" { "at least 1" } else { "1048576" })));
        remat()
            .args(["solve", &chain, "--memory", "1GiB", "--in-flight", &count])
            .assert()
            .code(2)
            .stderr(contains("--in-flight").and(contains(if count == "0" { "at least 1" } else { "1048576" })));
    }
    // The most allowed is planned for; a rank peak past u64::MAX bytes fits
    // no budget (it "fitted" u64::MAX, saturated) and names no budget.
    let dir = tempfile::tempdir().unwrap();
    let huge = write(
        dir.path(),
        "huge.json",
        r#"{"name": "huge", "input_size": 1125899906842624, "stages": [
            {"forward_time": 1, "backward_time": 2, "output_size": 1000, "saved_size": 1000}]}"#,
    );
    for algorithm in ["persistent", "exhaustive", "store-all", "auto"] {
        let out = remat()
            .args(["solve", huge.to_str().unwrap(), "-a", algorithm, "--memory", "18446744073709551615", "--json"])
            .args(["--in-flight", &most.to_string()])
            .assert()
            .code(1)
            .get_output()
            .stdout
            .clone();
        let v = json(&out);
        assert_eq!(v["min_budget"], serde_json::Value::Null, "{algorithm}: {v}");
    }
    let step = remat()
        .args(["pipeline", &chain, "--ranks", "2", "--micro-batches", &most.to_string()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(!String::from_utf8_lossy(&step).contains("NaN"), "{}", String::from_utf8_lossy(&step));
}

#[test]
fn exhaustive_search_with_micro_batches_in_flight_answers_in_one_search() {
    // Issue 36: `-a exhaustive --in-flight 2` searched once per residue a
    // schedule can have (thousands): minutes on a 10-stage chain (the
    // command's 120 s limit fails the test), where auto answered at once.
    let chain = repo("tests/data/ten-stages.json");
    let parsed = Chain::from_json(&std::fs::read_to_string(&chain).unwrap()).unwrap();
    for budget in [20737u64, 15552] {
        let out = remat()
            .args(["solve", &chain, "-a", "exhaustive", "--in-flight", "2", "--json", "--memory", &budget.to_string()])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v = json(&out);
        let (peak, residue) = (v["peak_memory"].as_u64().unwrap(), v["residue"].as_u64().unwrap());
        assert!(peak + residue <= budget, "{v}");
        // The optimum over every schedule: never slower than the persistent DP's.
        let opts = SolveOptions { in_flight: std::num::NonZeroUsize::new(2).unwrap(), ..SolveOptions::default() };
        let persistent = remat::solve(&parsed, budget, Algorithm::Persistent, &opts).unwrap();
        assert!(v["makespan"].as_f64().unwrap() <= persistent.schedule.makespan + 1e-9, "{v}");
    }
    // An infeasible budget names the smallest that works, exactly.
    let out = remat()
        .args(["solve", &chain, "-a", "exhaustive", "--in-flight", "2", "--json", "--memory", "1KiB"])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let least = json(&out)["min_budget"].as_u64().unwrap();
    remat()
        .args(["solve", &chain, "-a", "exhaustive", "--in-flight", "2", "--memory", &least.to_string()])
        .assert()
        .success();
    remat()
        .args(["solve", &chain, "-a", "exhaustive", "--in-flight", "2", "--memory", &(least - 1).to_string()])
        .assert()
        .code(1);
}
