//! The `remat` binary as a user sees it: outputs, exit codes, error messages.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

const STAGE: &str = r#"{"forward_time": 1, "backward_time": 2, "output_size": 8, "saved_size": 10}"#;

/// Writes a chain whose second stage is `stage2` into `dir`.
fn chain_with(dir: &Path, stage2: &str) -> PathBuf {
    let path = dir.join("chain.json");
    std::fs::write(&path, format!(r#"{{"name": "t", "input_size": 4, "stages": [{STAGE}, {stage2}]}}"#)).unwrap();
    path
}

/// Runs `remat solve` on a chain with a bad second stage: exit 2 and `expected` in stderr.
fn rejects(stage2: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let path = chain_with(dir.path(), stage2);
    let mut assert = remat().args(["solve", path.to_str().unwrap(), "--memory", "1GiB"]).assert().code(2);
    for e in expected {
        assert = assert.stderr(contains(*e));
    }
    assert.stdout(predicate::str::is_empty());
}

#[test]
fn unknown_field() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": 8, "saved_size": 10, "foo": 1}"#,
        &["stages[1].foo (stage 2)", "unknown field `foo`"],
    );
}

#[test]
fn missing_field() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": 8}"#,
        &["stages[1] (stage 2)", "missing field `saved_size`"],
    );
}

#[test]
fn negative_size() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": -8, "saved_size": 10}"#,
        &["stages[1].output_size (stage 2)", "-8", "whole bytes"],
    );
}

#[test]
fn negative_time() {
    rejects(
        r#"{"forward_time": 1, "backward_time": -2.5, "output_size": 8, "saved_size": 10}"#,
        &["stage 2: backward_time is -2.5", "finite and non-negative"],
    );
}

#[test]
fn nan_time() {
    rejects(
        r#"{"forward_time": NaN, "backward_time": 2, "output_size": 8, "saved_size": 10}"#,
        &["stages[1].forward_time (stage 2)", "no NaN or Infinity"],
    );
}

#[test]
fn infinite_time() {
    rejects(
        r#"{"forward_time": 1e999, "backward_time": 2, "output_size": 8, "saved_size": 10}"#,
        &["stages[1].forward_time (stage 2)", "out of range"],
    );
}

#[test]
fn size_overflowing_u64() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": 18446744073709551616, "saved_size": 10}"#,
        &["stages[1].output_size (stage 2)", "18446744073709551615"],
    );
}

#[test]
fn sizes_adding_up_past_u64() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": 10000000000000000000, "saved_size": 10000000000000000000}"#,
        &["add up to more than", "stage 2"],
    );
}

#[test]
fn fractional_size() {
    rejects(
        r#"{"forward_time": 1, "backward_time": 2, "output_size": 1.5, "saved_size": 10}"#,
        &["stages[1].output_size (stage 2)", "1.5"],
    );
}

#[test]
fn empty_chain_and_bad_loss() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"{"name": "e", "input_size": 1, "stages": []}"#).unwrap();
    remat()
        .args(["solve", empty.to_str().unwrap(), "--memory", "1GiB"])
        .assert()
        .code(2)
        .stderr(contains("`stages` is empty"));
    let loss = dir.path().join("loss.json");
    std::fs::write(
        &loss,
        format!(r#"{{"name": "l", "input_size": 1, "stages": [{STAGE}], "loss": {{"forward_time": -3}}}}"#),
    )
    .unwrap();
    remat()
        .args(["solve", loss.to_str().unwrap(), "--memory", "1GiB"])
        .assert()
        .code(2)
        .stderr(contains("loss: forward_time is -3"));
}

#[test]
fn not_json_and_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("chain.txt");
    std::fs::write(&text, "layers: 3").unwrap();
    remat().args(["solve", text.to_str().unwrap(), "--memory", "1GiB"]).assert().code(2).stderr(contains("chain.txt"));
    remat()
        .args(["solve", "no/such/chain.json", "--memory", "1GiB"])
        .assert()
        .code(2)
        .stderr(contains("cannot read chain or graph file `no/such/chain.json`"));
}

#[test]
fn saved_below_output_warns_and_solves() {
    let dir = tempfile::tempdir().unwrap();
    let path = chain_with(dir.path(), r#"{"forward_time": 1, "backward_time": 2, "output_size": 8, "saved_size": 6}"#);
    remat()
        .args(["solve", path.to_str().unwrap(), "--memory", "1KiB"])
        .assert()
        .success()
        .stderr(contains("warning").and(contains("stage 2: saved_size 6 is below output_size 8")));
}

#[test]
fn bad_sizes_algorithms_and_slots() {
    let c = "chains/rotor-fc6.json";
    remat().args(["solve", c, "--memory", "90M"]).assert().code(2).stderr(contains("unknown unit `M`"));
    remat().args(["solve", c, "--memory", "lots"]).assert().code(2).stderr(contains("`lots` is not a size"));
    // Fractions of a byte round down: 0.3 KiB is 307.2 bytes.
    remat().args(["solve", c, "--memory", "0.3KiB"]).assert().code(1).stderr(contains("(307 bytes)"));
    remat()
        .args(["solve", c, "--memory", "90MiB", "--algorithm", "magic"])
        .assert()
        .code(2)
        .stderr(contains("unknown algorithm `magic`").and(contains("persistent")));
    remat()
        .args(["solve", c, "--memory", "90MiB", "--slots", "0"])
        .assert()
        .code(2)
        .stderr(contains("give a whole number from 1 to"));
    remat().args(["solve", c]).assert().code(2).stderr(contains("--memory"));
    remat()
        .args(["solve", c, "--memory", "90MiB", "--exact-memory", "much"])
        .assert()
        .code(2)
        .stderr(contains("--exact-memory").and(contains("`much` is not a size")));
}

/// `--exact-memory` on solve, compare and sweep: 0 turns the exact answer
/// off (rounded, saying so), a limit too small for the fronts says how to
/// get the exact answer.
#[test]
fn exact_memory_flag() {
    let c = "chains/resnet50-224-b8.json";
    let solve = |limit: &str| {
        remat().args(["solve", c, "--memory", "700MiB", "-a", "persistent", "--exact-memory", limit]).assert().success()
    };
    solve("0").stdout(contains("slots of").and(contains("not exact: exact answers are turned off")));
    solve("1KiB").stdout(contains("allow them more (`--exact-memory SIZE`"));
    solve("1GiB").stdout(contains("exact bytes, not rounded to slots"));
    remat()
        .args(["compare", c, "--memory", "700MiB", "--exact-memory", "0"])
        .assert()
        .success()
        .stdout(contains("exact answers are turned off"));
    remat().args(["sweep", c, "--steps", "2", "--exact-memory", "0"]).assert().success();
}

#[test]
fn solves_the_rotor_example() {
    remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", "90MiB"])
        .assert()
        .success()
        .stdout(contains("makespan:    47.42").and(contains("86.77 MiB")).and(contains("F_ck^1 F_none^2")));
}

#[test]
fn infeasible_budget_gives_the_smallest_that_works() {
    remat().args(["solve", "chains/rotor-fc6.json", "--memory", "50MiB"]).assert().code(1).stderr(
        contains("no exhaustive schedule fits in 50.00 MiB").and(contains("the smallest budget it can meet is")),
    );
    let out = remat().args(["solve", "chains/rotor-fc6.json", "--memory", "50MiB", "--json"]).assert().code(1);
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["status"], "infeasible");
    let min = v["min_budget"].as_u64().unwrap();
    remat().args(["solve", "chains/rotor-fc6.json", "--memory", &min.to_string()]).assert().success();
    remat().args(["solve", "chains/rotor-fc6.json", "--memory", &(min - 1).to_string()]).assert().code(1);
}

#[test]
fn exhaustive_refuses_long_chains() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.json");
    let stages = vec![STAGE; 15].join(", ");
    std::fs::write(&path, format!(r#"{{"name": "long", "input_size": 4, "stages": [{stages}]}}"#)).unwrap();
    remat()
        .args(["solve", path.to_str().unwrap(), "--memory", "1GiB", "--algorithm", "exhaustive"])
        .assert()
        .code(2)
        .stderr(contains("at most 14 stages").and(contains("this chain has 15")));
}

#[test]
fn json_output_round_trips_through_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let json = remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", "90MiB", "--json", "-o", out.to_str().unwrap()])
        .assert()
        .success();
    let printed: serde_json::Value = serde_json::from_slice(&json.get_output().stdout).unwrap();
    // auto, the default, runs exhaustive search on a chain this short.
    assert_eq!(printed["algorithm"], "exhaustive");
    assert_eq!(printed["budget"], 90 << 20);
    assert_eq!(printed["operations"][0], serde_json::json!({"op": "F_ck", "stage": 1}));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(printed, written);
    remat()
        .args(["simulate", "chains/rotor-fc6.json", out.to_str().unwrap(), "--memory", "90MiB"])
        .assert()
        .success()
        .stdout(contains("makespan:    47.42").and(contains("fits the budget")));
    remat()
        .args(["simulate", "chains/rotor-fc6.json", out.to_str().unwrap(), "--memory", "80MiB"])
        .assert()
        .code(1)
        .stderr(contains("operation 9 (B^6) needs 86806830 bytes, over the budget of 83886080 bytes (80.00 MiB)"));
}

#[test]
fn simulate_names_the_first_invalid_operation() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "F_ck^1 F_all^3 B^7").unwrap();
    remat()
        .args(["simulate", "chains/rotor-fc6.json", bad.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(contains("operation 2 (F_all^3) is invalid: its input a^2 is not in memory"));
    std::fs::write(&bad, "F_ck^1 F_all^3x").unwrap();
    remat()
        .args(["simulate", "chains/rotor-fc6.json", bad.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(contains("token 2").and(contains("`F_all^3x` is not an operation")));
}

#[test]
fn min_memory_reports_any_and_algorithm() {
    remat()
        .args(["min-memory", "chains/rotor-fc6.json"])
        .assert()
        .success()
        .stdout(contains("any schedule:            82.12 MiB (86113592 bytes)").and(contains("auto, 500 slots:")));
    let out = remat().args(["min-memory", "chains/rotor-fc6.json", "--json"]).assert().success();
    let v: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let any = v["any_schedule"].as_u64().unwrap();
    // The smallest budget works and one byte less does not, for exhaustive search.
    remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", &any.to_string(), "-a", "exhaustive"])
        .assert()
        .success();
    remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", &(any - 1).to_string(), "-a", "exhaustive"])
        .assert()
        .code(1);
    assert!(v["algorithm_min"].as_u64().unwrap() >= any);
}

#[test]
fn help_teaches() {
    remat().arg("--help").assert().success().stdout(contains("Examples:").and(contains("Exit codes")));
    remat().args(["solve", "--help"]).assert().success().stdout(contains("--slots").and(contains("90MiB")));
}

#[test]
fn a_closed_stdout_is_not_a_crash() {
    // `remat solve ... | head -1`: the reader is gone before remat writes.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
        .args(["solve", "chains/cheap-recompute.json", "--memory", "1200MiB", "-a", "persistent"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// `remat ... | head -1`: a reader that stops after one line must not make
/// remat panic on the broken pipe (Rust's `println!` does). Every command
/// that prints to standard output is run with its output closed at once
/// (the write fails with EPIPE for certain) and under a real `| head -1`:
/// exit 0, no panic, and the line `head` read is the command's first.
#[cfg(unix)]
#[test]
fn every_command_exits_0_into_a_closed_pipe() {
    use std::process::Stdio;
    let bin = assert_cmd::cargo::cargo_bin("remat");
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("s.txt");
    remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", "90MiB", "--json", "-o", schedule.to_str().unwrap()])
        .assert()
        .success();
    let s = schedule.to_str().unwrap();
    let joint = "tests/data/joint/attention_block.json";
    let commands: Vec<Vec<&str>> = vec![
        vec!["mincut", joint, "--pareto"],
        vec!["mincut", joint],
        vec!["solve", "chains/rotor-fc6.json", "--memory", "90MiB"],
        vec!["solve", "chains/graphs/unet-tiny.json", "--memory", "300MiB"],
        vec!["simulate", "chains/rotor-fc6.json", s],
        vec!["min-memory", "chains/rotor-fc6.json"],
        vec!["compare", "chains/rotor-fc6.json", "--memory", "100MiB"],
        vec!["sweep", "chains/rotor-fc6.json", "--steps", "4"],
        vec!["show", "chains/rotor-fc6.json", s],
        vec!["zoo", "--list"],
        vec!["zoo", "resnet18", "--batch", "2"],
        vec!["--help"],
    ];
    for args in &commands {
        let mut child =
            std::process::Command::new(&bin).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?} into a closed pipe: {stderr}");

        // The shell pipeline a user types; pipefail makes remat's status the pipeline's.
        let full = std::process::Command::new(&bin).args(args).output().unwrap();
        assert!(full.status.success(), "{args:?}: {}", String::from_utf8_lossy(&full.stderr));
        let first = String::from_utf8_lossy(&full.stdout).lines().next().unwrap_or_default().to_string();
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -o pipefail; '{}' {} | head -1", bin.display(), quoted.join(" ")))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?} | head -1: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?} | head -1: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), first.trim_end(), "{args:?} | head -1");
    }
}

/// The exit codes `remat --help` lists (defined once, in the CLI's `Exit`)
/// are the ones the documentation's table lists, 70 (internal error)
/// included; a failure that is a bug in remat exits 70 (tested on the
/// mapping itself in src/cli/mod.rs: no input triggers one).
#[test]
fn help_and_docs_list_the_same_exit_codes() {
    let out = remat().arg("--help").assert().success().get_output().stdout.clone();
    let help = String::from_utf8(out).unwrap();
    let section = help.split("Exit codes:").nth(1).expect("--help has an `Exit codes:` section");
    let codes: Vec<u8> =
        section.lines().skip(1).map_while(|l| l.split_whitespace().next().and_then(|c| c.parse().ok())).collect();
    assert_eq!(codes, [0, 1, 2, 3, 70], "{help}");
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(EXIT_CODES_DOC)).unwrap();
    let table: Vec<u8> = docs.lines().filter_map(|l| l.strip_prefix("| ")?.split(" |").next()?.parse().ok()).collect();
    assert_eq!(table, codes, "{EXIT_CODES_DOC}'s exit-code table and `remat --help` differ");
}

/// Each kind of library error exits with its documented code: the CLI maps
/// an error's kind (`ErrorKind`), never its variants, to the exit code, so
/// this table is the whole mapping; the codes are the ones docs/guide.md
/// lists (`help_and_docs_list_the_same_exit_codes`).
#[test]
fn each_error_kind_exits_with_its_documented_code() {
    use remat::ErrorKind;
    use remat::cli::Exit;
    let documented =
        [(ErrorKind::Infeasible, 1), (ErrorKind::Input, 2), (ErrorKind::TimeLimit, 3), (ErrorKind::Internal, 70)];
    assert_eq!(documented.map(|(k, _)| k), ErrorKind::ALL, "every kind has a documented code");
    for (kind, code) in documented {
        assert_eq!(Exit::from(kind).code(), code, "{kind}");
        assert_eq!(kind.name().parse::<ErrorKind>(), Ok(kind));
    }
    assert_eq!(Exit::from(ErrorKind::Internal), Exit::Internal, "EX_SOFTWARE, 'please report it'");
    // And through the binary: a verdict exits 1, bad input 2.
    let dir = tempfile::tempdir().unwrap();
    let path = chain_with(dir.path(), STAGE);
    remat().args(["solve", path.to_str().unwrap(), "--memory", "1"]).assert().code(1);
    remat().args(["solve", path.to_str().unwrap(), "--memory", "1GiB", "--slots", "0"]).assert().code(2);
}

/// The page whose table lists the exit codes.
const EXIT_CODES_DOC: &str = "docs/guide.md";
