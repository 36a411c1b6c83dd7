//! Issue 15 through the binary: every hostile input it lists ends with exit 0,
//! 1 or 2 and a message naming what is wrong (never a panic, a hang or a wrong
//! answer), and output never destroys data.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn remat() -> Command {
    let mut cmd = Command::cargo_bin("remat").unwrap();
    // A hang fails the test instead of stalling the suite.
    cmd.timeout(Duration::from_secs(60));
    cmd
}

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

const STAGE: &str = r#"{"forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100}"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn chain_text(stages: &[String]) -> String {
    format!(r#"{{"name": "t", "input_size": 1000, "stages": [{}]}}"#, stages.join(", "))
}

fn stage(forward: &str, backward: &str) -> String {
    format!(r#"{{"forward_time": {forward}, "backward_time": {backward}, "output_size": 100, "saved_size": 100}}"#)
}

/// A chain of `len` identical stages.
fn long_chain(dir: &Path, len: usize) -> PathBuf {
    write(dir, &format!("chain{len}.json"), &chain_text(&vec![STAGE.to_string(); len]))
}

#[test]
fn huge_time_limits_are_refused_while_parsing() {
    for limit in ["1e20", "1e19", "inf", "nan", "0", "-1"] {
        remat()
            .args(["solve", &repo("chains/graphs/resnet-blocks.json"), "-m", "90MiB", &format!("--time-limit={limit}")])
            .assert()
            .code(2)
            .stderr(contains(format!("`{limit}` is not a time limit")).and(contains("at most 1e9")));
    }
}

#[test]
fn times_whose_sum_overflows_are_rejected_with_the_field_named() {
    let dir = tempfile::tempdir().unwrap();
    let two_huge = write(dir.path(), "b.json", &chain_text(&[stage("1", "1e308"), stage("1", "1e308")]));
    for args in [
        vec!["solve", "-a", "persistent", "-m", "1MiB"],
        vec!["solve", "-a", "floating", "-m", "1MiB"],
        vec!["solve", "-a", "revolve", "-m", "1MiB"],
        vec!["compare", "-m", "1MiB"],
        vec!["sweep"],
    ] {
        let (cmd, rest) = args.split_first().unwrap();
        remat()
            .arg(cmd)
            .arg(&two_huge)
            .args(rest)
            .assert()
            .code(2)
            .stderr(contains("stage 1: backward_time 1e308").and(contains("express the times in a larger unit")));
    }
    // One forward_time of 1e308 is finite, but a recomputation of it is not.
    let one_huge = write(dir.path(), "f.json", &chain_text(&[stage("1e308", "1"), stage("1", "1")]));
    remat()
        .args(["solve", one_huge.to_str().unwrap(), "-m", "500MiB"])
        .assert()
        .code(2)
        .stderr(contains("stage 1: forward_time 1e308 brings the sum"))
        .stdout(predicate::str::is_empty());
}

#[test]
fn a_stage_named_loss_solves_under_checkmate_and_its_schedule_replays() {
    let dir = tempfile::tempdir().unwrap();
    let chain = write(
        dir.path(),
        "loss.json",
        r#"{"name": "t", "input_size": 1000, "stages": [
            {"name": "loss", "forward_time": 1, "backward_time": 1, "output_size": 100, "saved_size": 100},
            {"forward_time": 1, "backward_time": 1, "output_size": 100, "saved_size": 100}],
           "loss": {"forward_time": 1, "backward_time": 1, "output_size": 10, "saved_size": 10}}"#,
    );
    let schedule = dir.path().join("s.json");
    remat()
        .args(["solve", chain.to_str().unwrap(), "-m", "1MiB", "-a", "checkmate", "-o", schedule.to_str().unwrap()])
        .assert()
        .success()
        .stdout(contains("loss (2)"));
    remat()
        .args(["simulate", chain.to_str().unwrap(), schedule.to_str().unwrap(), "-m", "1MiB"])
        .assert()
        .success()
        .stdout(contains("valid schedule").and(contains("fits the budget")));
}

#[test]
fn checkmate_schedules_of_chain_files_replay_in_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("ck.json");
    let chain = repo("chains/rotor-fc6.json");
    remat()
        .args(["solve", &chain, "-m", "90MiB", "-a", "checkmate", "-o", schedule.to_str().unwrap()])
        .assert()
        .success();
    remat()
        .args(["simulate", &chain, schedule.to_str().unwrap(), "-m", "90MiB"])
        .assert()
        .success()
        .stdout(contains("valid schedule of").and(contains("on graph rotor-fc6")).and(contains("fits the budget")));
}

#[test]
fn huge_slot_and_step_counts_are_refused_while_parsing() {
    let chain = repo("chains/resnet18-224-b8.json");
    for cmd in [&["solve", "-m", "1GiB"][..], &["min-memory"], &["compare", "-m", "1GiB"], &["sweep"]] {
        remat()
            .arg(cmd[0])
            .arg(&chain)
            .args(&cmd[1..])
            .args(["--slots", "18446744073709551615"])
            .assert()
            .code(2)
            .stderr(contains("is not a slot count: give a whole number from 1 to 1000000000"));
    }
    for steps in ["18446744073709551615", "10000000", "0"] {
        remat()
            .args(["sweep", &repo("chains/rotor-fc6.json"), "--steps", steps])
            .assert()
            .code(2)
            .stderr(contains(format!("`{steps}` is not a number of steps")));
    }
}

/// With more slots than bytes the slot size is one byte and a DP's table
/// grows with the budget: the smallest budget of three 1 GB stages would need
/// a table of hundreds of GiB at 10^9 slots. An infeasible verdict must name a
/// budget that then works, so remat refuses with that budget and what to
/// change instead; with a sane slot count the budget it names then solves.
#[test]
fn an_infeasible_verdict_names_a_budget_its_options_can_solve() {
    let dir = tempfile::tempdir().unwrap();
    let big = r#"{"forward_time": 1, "backward_time": 2, "output_size": 1000000000, "saved_size": 2000000000}"#;
    let chain = write(
        dir.path(),
        "big.json",
        &format!(r#"{{"name": "big", "input_size": 1000000000, "stages": [{big}, {big}, {big}]}}"#),
    );
    for algorithm in ["persistent", "floating", "revolve"] {
        remat()
            .args(["solve", chain.to_str().unwrap(), "-m", "100", "--slots", "1000000000", "-a", algorithm])
            .assert()
            .code(2)
            .stderr(
                contains(format!("no {algorithm} schedule fits in 100 B"))
                    .and(contains("the smallest budget it can meet with 1000000000 slots"))
                    .and(contains("is too large to solve with them"))
                    .and(contains("hint: pass --slots N with a smaller N")),
            );
        let out = remat()
            .args(["solve", chain.to_str().unwrap(), "-m", "100", "--json", "-a", algorithm])
            .assert()
            .code(1)
            .get_output()
            .stdout
            .clone();
        let verdict: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let min = verdict["min_budget"].as_u64().unwrap();
        remat().args(["solve", chain.to_str().unwrap(), "-m", &min.to_string(), "-a", algorithm]).assert().success();
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_a_clear_error_and_a_closed_one_a_quiet_exit() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    for args in [
        vec!["solve", "chains/rotor-fc6.json", "-m", "90MiB"],
        vec!["min-memory", "chains/rotor-fc6.json"],
        vec!["zoo", "resnet18"],
    ] {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(&args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("error: cannot write to standard output: No space left on device"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A reader that has gone: exit 0, nothing on stderr but warnings.
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
        .args(["zoo", "resnet152", "--graph", "layers"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("error"));
}

/// The 100,000-stage chain of the issue: every command answers or refuses at
/// once instead of allocating 80 GB. (Time and memory are measured outside the
/// tests, with /usr/bin/time; the bound here is only generous enough that a
/// regression to minutes fails.)
#[test]
fn a_100000_stage_chain_gets_an_answer_or_a_refusal_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let chain = long_chain(dir.path(), 100_000);
    let chain = chain.to_str().unwrap();
    let start = Instant::now();
    remat()
        .args(["solve", chain, "-m", "10MiB"])
        .assert()
        .code(2)
        .stderr(contains("handles at most 65533 stages; this chain has 100000"));
    remat()
        .args(["min-memory", chain])
        .assert()
        .code(2)
        .stderr(contains("100000-stage chain takes about 6.7e14 steps"));
    remat()
        .args(["compare", chain, "-m", "10MiB"])
        .assert()
        .success()
        .stdout(contains("chen-sqrt").and(contains("skipped: the persistent DP handles at most 65533 stages")));
    remat().args(["sweep", chain, "--steps", "3"]).assert().success().stdout(contains("chen-sqrt,"));
    remat()
        .args(["solve", chain, "-m", "10MiB", "-a", "sequential"])
        .assert()
        .code(2)
        .stderr(contains("remat does this for at most 10000 stages (with a given number of segments it is O(L))"))
        .stderr(contains("hint: pass --algorithm chen-sqrt"));
    assert!(start.elapsed() < Duration::from_secs(120), "{:?}", start.elapsed());
}

#[test]
fn a_1000_node_graph_is_answered_by_auto_and_refused_by_checkmate_before_its_milp_is_built() {
    let dir = tempfile::tempdir().unwrap();
    // A ladder: node i reads i-1 and i-2, so it is no path (no chain solver).
    let nodes: Vec<String> = (0..1000)
        .map(|i| {
            let inputs = match i {
                0 => String::new(),
                1 => "\"n0\"".to_string(),
                _ => format!("\"n{}\", \"n{}\"", i - 1, i - 2),
            };
            format!(
                r#"{{"name": "n{i}", "inputs": [{inputs}], "forward_time": 1, "backward_time": 2, "output_size": 10, "saved_size": 10}}"#
            )
        })
        .collect();
    let graph =
        write(dir.path(), "g.json", &format!(r#"{{"name": "g", "input_size": 10, "nodes": [{}]}}"#, nodes.join(",")));
    // `auto` answers with the schedule lifted from the chain DP (the MILP,
    // about 15 GiB, is skipped with a note), in 1 GB of address space.
    let script =
        format!("ulimit -v 1000000 && exec {} solve {} -m 300 --json", env!("CARGO_BIN_EXE_remat"), graph.display());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the MILP was skipped: the Checkmate MILP of this graph (2001 joint nodes)"), "{stderr}");
    let schedule: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schedule["algorithm"], "chain-lift");
    assert!(schedule["peak_memory"].as_u64().unwrap() <= 300);
    let saved = dir.path().join("s.json");
    std::fs::write(&saved, &out.stdout).unwrap();
    remat()
        .args(["simulate", graph.to_str().unwrap(), saved.to_str().unwrap(), "--memory", "300"])
        .assert()
        .success()
        .stdout(contains("fits the budget of 300 B"));
    // `-a checkmate` asks for the MILP itself: refused before it is built.
    remat()
        .args(["solve", graph.to_str().unwrap(), "-m", "300", "-a", "checkmate"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(2)
        .stderr(contains("the Checkmate MILP of this graph").and(contains("coarsen the graph")));
}

#[test]
fn zoo_sizes_that_would_wrap_are_refused() {
    remat()
        .args(["zoo", "resnet18", "--image", "4294967296"])
        .assert()
        .code(2)
        .stderr(contains("--image: batch 1 with image 4294967296: batch x image^2 must be at most 4294967296"));
    remat()
        .args(["zoo", "resnet18", "--batch", "18014398509481984"])
        .assert()
        .code(2)
        .stderr(contains("--batch: batch 18014398509481984 with image 224"));
    // The bound itself is fine: sizes are real, not wrapped.
    remat().args(["zoo", "resnet18", "--image", "65536"]).assert().success();
}

#[test]
fn trailing_data_and_positional_arrays_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let one = format!(r#"{{"name": "t", "input_size": 1, "stages": [{STAGE}]}}"#);
    for (name, text, expected) in [
        ("trail.json", format!("{one} xx"), "chain: trailing characters at line 1"),
        ("two.json", format!("{one}{one}"), "chain: trailing characters"),
        (
            "pos.json",
            r#"{"name": "t", "input_size": 1, "stages": [[null, 1, 1, 1, 1]]}"#.to_string(),
            "stages[0] (stage 1): invalid type: sequence, expected an object with named fields",
        ),
        (
            "loss.json",
            format!(r#"{{"name": "t", "input_size": 1, "stages": [{STAGE}], "loss": [0, 0]}}"#),
            "loss: invalid type: sequence, expected an object",
        ),
        (
            "graph.json",
            r#"{"name": "g", "input_size": 1, "nodes": [["a", [], 1, 1, 10, 10]]}"#.to_string(),
            "nodes[0] (node 1): expected an object with named fields",
        ),
    ] {
        let path = write(dir.path(), name, &text);
        remat()
            .args(["solve", path.to_str().unwrap(), "-m", "1MiB"])
            .assert()
            .code(2)
            .stderr(contains(expected))
            .stdout(predicate::str::is_empty());
    }
    // A schedule with data after it.
    let chain = repo("chains/rotor-fc6.json");
    let schedule = dir.path().join("s.json");
    remat().args(["solve", &chain, "-m", "90MiB", "-o", schedule.to_str().unwrap()]).assert().success();
    let mut text = std::fs::read_to_string(&schedule).unwrap();
    text.push_str("junk\n");
    std::fs::write(&schedule, text).unwrap();
    remat()
        .args(["simulate", &chain, schedule.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(contains("schedule: trailing characters"));
}

#[test]
fn errors_are_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "t.json", "{} xx");
    let out = remat().args(["solve", path.to_str().unwrap(), "-m", "1MiB"]).assert().code(2).get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.matches("line 1 column").count(), 1, "{stderr}");
}

#[test]
fn outputs_that_are_inputs_are_refused_and_the_input_survives() {
    let dir = tempfile::tempdir().unwrap();
    let chain = dir.path().join("c.json");
    std::fs::copy(repo("chains/rotor-fc6.json"), &chain).unwrap();
    let before = std::fs::read(&chain).unwrap();
    let c = chain.to_str().unwrap();
    // The same file under another spelling.
    let other = format!("{}/./c.json", dir.path().display());
    remat()
        .args(["solve", c, "-m", "90MiB", "-o", &other])
        .assert()
        .code(2)
        .stderr(contains("--output").and(contains("is the input file")));
    remat().args(["sweep", c, "--plot", c]).assert().code(2).stderr(contains("--plot"));
    remat().args(["sweep", c, "-o", c]).assert().code(2).stderr(contains("--output"));
    let schedule = dir.path().join("s.json");
    remat().args(["solve", c, "-m", "90MiB", "-o", schedule.to_str().unwrap()]).assert().success();
    remat()
        .args(["show", c, schedule.to_str().unwrap(), "--plot", schedule.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(contains("--plot"));
    assert_eq!(std::fs::read(&chain).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn a_failed_write_leaves_the_old_file_whole() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    std::fs::write(&out, "old content\n").unwrap();
    // A read-only folder: no temporary file can be created next to the
    // target, so the write fails before the target is touched.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let writable = std::fs::File::create(dir.path().join("probe")).is_ok(); // root ignores modes
    if !writable {
        remat()
            .args(["solve", &repo("chains/rotor-fc6.json"), "-m", "90MiB", "-o", out.to_str().unwrap()])
            .assert()
            .code(2)
            .stderr(contains(format!("cannot write `{}`", out.display())));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old content\n");
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A successful write replaces the file whole and leaves no temporary behind.
    remat()
        .args(["solve", &repo("chains/rotor-fc6.json"), "-m", "90MiB", "-o", out.to_str().unwrap()])
        .assert()
        .success();
    assert!(std::fs::read_to_string(&out).unwrap().contains("\"operations\""));
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().all(|n| !n.to_string_lossy().starts_with(".remat-")), "{names:?}");
}

#[test]
fn persistent_on_3000_stages_is_refused_before_its_cubic_pass() {
    let dir = tempfile::tempdir().unwrap();
    // Every stage different (its forward time): no sub-chain is shared.
    let stages: Vec<String> = (0..3000)
        .map(|l| format!(r#"{{"forward_time": {}, "backward_time": 2, "output_size": 100, "saved_size": 100}}"#, l + 1))
        .collect();
    let chain = write(dir.path(), "distinct3000.json", &chain_text(&stages));
    remat()
        .args(["solve", chain.to_str().unwrap(), "-m", "1MiB", "-a", "persistent"])
        .timeout(Duration::from_secs(20))
        .assert()
        .code(2)
        .stderr(contains("the persistent DP would take about 2.3e12 steps for 3000 stages at 500 slots"))
        .stderr(contains("hint: pass --slots N with a smaller N"));
    // 3,000 identical stages: the DP fills each distinct sub-chain once
    // (issue 25), about 3 L of them, so it is not refused and answers.
    let same = long_chain(dir.path(), 3000);
    remat()
        .args(["solve", same.to_str().unwrap(), "-m", "1MiB", "-a", "persistent"])
        .timeout(Duration::from_secs(20))
        .assert()
        .success();
}

#[test]
fn exhaustive_min_memory_on_resnet18_is_refused_with_what_to_use() {
    remat()
        .args(["min-memory", &repo("chains/resnet18-224-b8.json"), "-a", "exhaustive"])
        .timeout(Duration::from_secs(20))
        .assert()
        .code(2)
        .stderr(contains("at most 12 stages").and(contains("this chain has 14")).and(contains("--algorithm floating")));
    // The default min-memory on the same chain still answers, exactly.
    remat()
        .args(["min-memory", &repo("chains/resnet18-224-b8.json")])
        .timeout(Duration::from_secs(20))
        .assert()
        .success()
        .stdout(contains("any schedule:"));
}
