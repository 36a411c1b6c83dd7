//! `remat compare`, `sweep`, `show` and the baselines of `solve` as a user
//! runs them: output, files written, exit codes and error messages.

use assert_cmd::Command;
use predicates::prelude::*;
use remat::report::reported;

const FC6: &str = "chains/rotor-fc6.json";

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

#[test]
fn compare_lists_every_algorithm() {
    let out = remat().args(["compare", FC6, "--memory", "100MiB"]).assert().success();
    let text = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    for a in reported() {
        assert!(text.lines().any(|l| l.starts_with(a.name())), "no row for {a}:\n{text}");
    }
    assert!(text.contains("store-all makespan (no recomputation): 37.38"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("store-all") && l.contains("infeasible: needs at least 107.00 MiB")),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("sequential") && l.contains("K = 2 segments")), "{text}");
}

/// Issue 26: `compare` states the gain of the fastest schedule over the best
/// checkpoint_sequential within the same budget (rotor-fc6 at 100 MiB:
/// K = 2 at 43.62 against 41.18, 43.62 / 41.18 = +5.9% throughput), and says
/// so when no K of checkpoint_sequential fits (87 MiB: its smallest is
/// 91.66 MiB).
#[test]
fn compare_states_the_gain_over_the_best_checkpoint_sequential() {
    remat().args(["compare", FC6, "--memory", "100MiB"]).assert().success().stdout(predicate::str::contains(
        "gain over the best checkpoint_sequential (K = 2 segments): +5.9% throughput (43.62 -> 41.18, persistent)",
    ));
    let out = remat().args(["compare", FC6, "--memory", "100MiB", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let gain = &v["gain_over_sequential"];
    assert_eq!(gain["status"], "gain", "{v}");
    let percent = gain["throughput_gain_percent"].as_f64().unwrap();
    let ratio = gain["sequential_makespan"].as_f64().unwrap() / gain["best_makespan"].as_f64().unwrap();
    assert!((percent - 100.0 * (ratio - 1.0)).abs() < 1e-9 && (percent - 5.93).abs() < 0.01, "{gain}");
    remat()
        .args(["compare", FC6, "--memory", "87MiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("none of its K fits this budget; persistent does (47.42)"));
}

#[test]
fn compare_json_and_nothing_fits() {
    let out = remat().args(["compare", FC6, "--memory", "100MiB", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), reported().len());
    assert_eq!(v["budget"], 100u64 << 20);
    remat()
        .args(["compare", FC6, "--memory", "50MiB"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no algorithm fits in 50.00 MiB").and(predicate::str::contains("82.12 MiB")));
}

#[test]
fn sweep_writes_csv_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("tradeoff.svg");
    let out = remat().args(["sweep", FC6, "--steps", "6", "--plot", svg.to_str().unwrap()]).assert().success();
    let csv = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let header = "algorithm,budget,segments,status,makespan,peak_memory,overhead_percent,min_budget,detail";
    assert_eq!(csv.lines().next(), Some(header));
    // 6 budgets per algorithm, plus one row per sequential K.
    assert_eq!(csv.lines().count(), 1 + 6 * reported().len() + 6);
    // The last budget is store-all's peak, where store-all fits.
    assert!(csv.lines().any(|l| l.starts_with("store-all,112200863,,solved,37.38")), "{csv}");
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.starts_with("<svg") && doc.contains("peak memory (MiB)") && doc.contains(">persistent<"));
    let out = remat().args(["sweep", FC6, "--steps", "3", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["budgets"].as_array().unwrap().len(), 3);
    assert_eq!(v["sequential_points"].as_array().unwrap().len(), 6);
}

#[test]
fn sweep_bad_range_is_named() {
    remat()
        .args(["sweep", FC6, "--from", "100MiB", "--to", "90MiB"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--from (104857600 bytes) is above --to (94371840 bytes)"));
}

#[test]
fn show_draws_a_solved_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("s.json");
    let svg = dir.path().join("timeline.svg");
    remat()
        .args(["solve", FC6, "--memory", "95MiB", "-a", "sequential", "--json", "-o", schedule.to_str().unwrap()])
        .assert()
        .success();
    remat()
        .args(["show", FC6, schedule.to_str().unwrap(), "--plot", svg.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("F_ck^1").and(predicate::str::contains("<- peak")));
    let doc = std::fs::read_to_string(&svg).unwrap();
    assert!(doc.contains("budget 95.00 MiB") && doc.contains("rotor-fc6 (sequential): memory timeline"));
    // A budget below the schedule's peak: exit 1, saying by how much.
    remat()
        .args(["show", FC6, schedule.to_str().unwrap(), "--memory", "80MiB"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is over the budget of 80.00 MiB"));
}

#[test]
fn solve_segments_errors() {
    remat()
        .args(["solve", FC6, "--memory", "1GiB", "--segments", "2"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--segments applies to --algorithm sequential only"));
    remat()
        .args(["solve", FC6, "--memory", "1GiB", "-a", "sequential", "--segments", "9"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("9 segments asked; checkpoint_sequential needs 1 to 6 segments"));
    remat()
        .args(["solve", FC6, "--memory", "1GiB", "-a", "sequential", "--segments", "3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("K = 3 segments").and(predicate::str::contains("makespan:    46.13")));
}
