//! `remat solve` with auto (the default) and floating, and `remat min-memory`,
//! as a user sees them.

use assert_cmd::Command;
use predicates::prelude::*;
use remat::synthetic::network_like;

/// Writes a network-like chain of `len` stages to a temporary file.
fn chain_file(len: usize) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), network_like(11, len).to_json()).unwrap();
    file
}

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

#[test]
fn auto_is_the_default_and_says_what_ran_and_why() {
    let file = chain_file(30);
    remat()
        .args(["solve", file.path().to_str().unwrap(), "--memory", "400MiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("algorithm:   floating (500 slots of"))
        .stdout(predicate::str::contains("chosen by auto: 30 stages at 500 slots: floating DP tables of at most"));
    let small = chain_file(4);
    remat()
        .args(["solve", small.path().to_str().unwrap(), "--memory", "200MiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("algorithm:   exhaustive (exact bytes); chosen by auto: 4 stages"));
}

#[test]
fn json_names_the_algorithm_that_ran() {
    let file = chain_file(30);
    let out = remat().args(["solve", file.path().to_str().unwrap(), "--memory", "400MiB", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["algorithm"], "floating");
    let forced = remat()
        .args(["solve", file.path().to_str().unwrap(), "--memory", "400MiB", "--json", "-a", "persistent"])
        .output()
        .unwrap();
    let persistent: serde_json::Value = serde_json::from_slice(&forced.stdout).unwrap();
    assert_eq!(persistent["algorithm"], "persistent");
    assert!(json["makespan"].as_f64().unwrap() <= persistent["makespan"].as_f64().unwrap() + 1e-9);
}

#[test]
fn oversized_tables_are_refused_with_the_estimate() {
    let file = chain_file(200);
    remat()
        .args(["solve", file.path().to_str().unwrap(), "--memory", "8GiB", "-a", "floating", "--slots", "10000000"])
        .assert()
        .code(2)
        // Refused before any table, by its step count (remat::guard), with
        // the estimate and the way out.
        .stderr(predicate::str::contains("the floating DP would take about 6.9e14 steps for 200 stages"))
        .stderr(predicate::str::contains("hint: pass --slots N with a smaller N"));
}

#[test]
fn infeasible_budget_names_the_floating_minimum() {
    let file = chain_file(30);
    remat()
        .args(["solve", file.path().to_str().unwrap(), "--memory", "1MiB", "-a", "floating"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no floating schedule fits in 1.00 MiB"))
        .stderr(predicate::str::contains("the smallest budget it can meet is"));
}

#[test]
fn min_memory_reports_the_any_schedule_minimum_of_long_chains() {
    let file = chain_file(40);
    remat()
        .args(["min-memory", file.path().to_str().unwrap(), "-a", "floating"])
        .assert()
        .success()
        .stdout(
            predicate::str::is_match(
                r"any schedule: +[0-9.]+ MiB \([0-9]+ bytes\) \[floating DP, meeting a lower bound\]",
            )
            .unwrap(),
        )
        .stdout(predicate::str::contains("floating, 500 slots:"));
}

#[test]
fn help_teaches_the_algorithms() {
    remat()
        .args(["solve", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("auto (the default)"))
        .stdout(predicate::str::contains("floating: the"))
        .stdout(predicate::str::contains("[default: auto]"));
}
