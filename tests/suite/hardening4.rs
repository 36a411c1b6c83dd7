//! Issue 36 through the binary and the library, the fourth round of hostile
//! inputs (its Rust, command-line and Python-binding findings; the Python
//! ones are in python/tests/test_hardening.py): pipelines and micro-batches
//! in flight. Each reproducer ends with a correct answer, a clear error
//! (exit 2 naming the flag and the value) or an infeasible verdict, never a
//! panic, a saturated figure presented as a fit, or a figure the schedule's
//! operations do not have.

use std::time::Duration;

use assert_cmd::Command;

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

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
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
