//! Every command gives the same answer for the same question (issue 12's
//! contradictions, each checked through the binary): `compare`'s best row is
//! `solve`'s answer, a `sweep` point is `solve` at that budget, floating is
//! never above persistent, sizes paste back, inputs come from pipes, graph
//! files get told what to use, and schedules know their chain.

use std::io::Write;
use std::process::Stdio;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

fn solve_json(chain: &str, budget: u64, algorithm: &str) -> serde_json::Value {
    let out =
        remat().args(["solve", chain, "--memory", &budget.to_string(), "-a", algorithm, "--json"]).output().unwrap();
    json(&out.stdout)
}

const RESNET101: &str = "chains/resnet101-224-b32.json";

#[test]
fn compare_includes_auto_and_its_best_row_is_solves_answer() {
    let budget = 12_023_376_896u64 / 4;
    let out = remat().args(["compare", RESNET101, "--memory", &budget.to_string(), "--json"]).assert().success();
    let cmp = json(&out.get_output().stdout);
    let rows = cmp["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["algorithm"] == "auto"), "{cmp}");
    let best = rows.iter().filter_map(|r| r["makespan"].as_f64()).fold(f64::INFINITY, f64::min);
    let solved = solve_json(RESNET101, budget, "auto")["makespan"].as_f64().unwrap();
    assert_eq!(best, solved, "compare's best row vs solve");
}

#[test]
fn sweep_points_are_solves_answers_and_floating_never_above_persistent() {
    let out = remat().args(["sweep", RESNET101, "--steps", "6", "--json"]).assert().success();
    let sweep = json(&out.get_output().stdout);
    let curve = |name: &str| -> Vec<(u64, Option<f64>)> {
        let c = sweep["curves"].as_array().unwrap().iter().find(|c| c["algorithm"] == name).unwrap();
        c["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["budget"].as_u64().unwrap(), p["makespan"].as_f64()))
            .collect()
    };
    let (persistent, floating) = (curve("persistent"), curve("floating"));
    for (&(budget, tp), &(_, tf)) in persistent.iter().zip(&floating) {
        if let (Some(tp), Some(tf)) = (tp, tf) {
            assert!(tf <= tp, "floating {tf} above persistent {tp} at {budget}");
        }
        assert!(tp.is_none() || tf.is_some() || floating.is_empty(), "floating infeasible where persistent is not");
    }
    for (name, points) in [("persistent", &persistent), ("floating", &floating)] {
        for &(budget, makespan) in points.iter().step_by(2) {
            assert_eq!(solve_json(RESNET101, budget, name)["makespan"].as_f64(), makespan, "{name} at {budget}");
        }
    }
}

#[test]
fn fractional_and_exponent_sizes_are_accepted() {
    let c = "chains/rotor-fc6.json";
    remat().args(["solve", c, "--memory", "11.2GiB"]).assert().success().stdout(contains("(12025908428 bytes)"));
    remat().args(["solve", c, "--memory", "1e9"]).assert().success().stdout(contains("(1000000000 bytes)"));
    // What min-memory prints pastes back as a budget.
    let out = remat().args(["min-memory", c]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    let line = text.lines().find(|l| l.starts_with("any schedule:")).unwrap();
    let bytes = line.split('(').nth(1).unwrap().split(' ').next().unwrap();
    remat().args(["solve", c, "--memory", bytes]).assert().success();
}

#[test]
fn inputs_come_from_pipes_and_stdin() {
    let zoo = remat().args(["zoo", "resnet18"]).output().unwrap().stdout;
    remat()
        .args(["solve", "-", "--memory", "20MiB"])
        .write_stdin(zoo.clone())
        .assert()
        .success()
        .stdout(contains("chain:       resnet18-224-b1"));
    // A schedule on stdin, the chain from a file.
    let dir = tempfile::tempdir().unwrap();
    let chain = dir.path().join("r18.json");
    std::fs::write(&chain, &zoo).unwrap();
    let schedule = remat().args(["solve", chain.to_str().unwrap(), "--memory", "20MiB", "--json"]).output().unwrap();
    remat()
        .args(["simulate", chain.to_str().unwrap(), "-"])
        .write_stdin(schedule.stdout)
        .assert()
        .success()
        .stdout(contains("valid schedule"));
    remat().args(["simulate", "-", "-"]).assert().code(2).stderr(contains("only one input can be `-`"));
    // A real pipe between two processes (a file read once, never reopened).
    let bin = assert_cmd::cargo::cargo_bin("remat");
    let mut producer =
        std::process::Command::new(&bin).args(["zoo", "resnet18"]).stdout(Stdio::piped()).spawn().unwrap();
    let consumer = std::process::Command::new(&bin)
        .args(["min-memory", "-"])
        .stdin(producer.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(producer.wait().unwrap().success());
    assert!(consumer.status.success(), "{}", String::from_utf8_lossy(&consumer.stderr));
}

#[test]
fn graph_files_given_to_chain_commands_say_what_to_use() {
    let g = "chains/graphs/unet-tiny.json";
    for args in [
        vec!["compare", g, "--memory", "300MiB"],
        vec!["sweep", g],
        vec!["min-memory", g],
        vec!["show", g, "chains/rotor-fc6.json"],
    ] {
        remat()
            .args(&args)
            .assert()
            .code(2)
            .stderr(
                contains("is a forward graph, not a chain").and(contains("remat solve chains/graphs/unet-tiny.json")),
            )
            .stderr(contains("unknown field").not());
    }
}

#[test]
fn schedules_name_their_chain() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("s.json");
    remat()
        .args(["solve", "chains/resnet18-224-b8.json", "--memory", "150MiB", "-o"])
        .arg(&schedule)
        .assert()
        .success();
    let recorded = json(&std::fs::read(&schedule).unwrap());
    assert_eq!(recorded["chain"]["name"], "resnet18-224-b8");
    assert_eq!(recorded["chain"]["hash"].as_str().unwrap().len(), 16);
    remat()
        .args(["simulate", "chains/resnet18-224-b32.json"])
        .arg(&schedule)
        .assert()
        .code(2)
        .stderr(contains("computed for chain `resnet18-224-b8`").and(contains("not for chain `resnet18-224-b32`")));
    remat()
        .args(["show", "chains/resnet18-224-b32.json"])
        .arg(&schedule)
        .assert()
        .code(2)
        .stderr(contains("computed for chain `resnet18-224-b8`"));
    remat().args(["simulate", "chains/resnet18-224-b8.json"]).arg(&schedule).assert().success();
}

#[test]
fn long_schedules_print_compactly_and_read_back() {
    let c = "chains/resnet1001-224-b8.json";
    let out = remat().args(["solve", c, "--memory", "20GiB", "-a", "persistent"]).assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(text.lines().all(|l| l.len() <= 100 || l.starts_with("algorithm:")), "{text}");
    assert!(text.contains("F_none^2..") && text.contains("first pass:  "), "{text}");
    let notation: String =
        text.lines().skip_while(|l| !l.starts_with("first pass:")).skip(1).collect::<Vec<_>>().join("\n");
    let recorded = solve_json(c, 20 << 30, "persistent");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
        .args(["simulate", c, "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(notation.as_bytes()).unwrap();
    let replay = json(&child.wait_with_output().unwrap().stdout);
    assert_eq!(replay["makespan"], recorded["makespan"]);
    assert_eq!(replay["operations"].as_u64().unwrap() as usize, recorded["operations"].as_array().unwrap().len());
}

#[test]
fn graph_algorithms_are_not_chain_algorithms() {
    // Chain-only commands take chain algorithms; a graph-only name is told
    // apart (not "unknown"), and `solve` still runs it on the chain's graph.
    for args in [
        vec!["min-memory", "chains/rotor-fc6.json", "-a", "checkmate"],
        vec!["compare", "chains/rotor-fc6.json", "--memory", "90MiB", "--slots", "0"],
    ] {
        let out = remat().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    remat()
        .args(["min-memory", "chains/rotor-fc6.json", "-a", "checkmate"])
        .assert()
        .code(2)
        .stderr(contains("checkmate solves graphs, not chains"));
    remat()
        .args(["solve", "chains/rotor-fc6.json", "--memory", "100MiB", "-a", "checkmate", "--json"])
        .assert()
        .success()
        .stdout(contains("\"algorithm\": \"checkmate\""));
    assert!("checkmate".parse::<remat::solve::Algorithm>().is_err());
    assert_eq!(
        "checkmate".parse::<remat::problem::Method>(),
        Ok(remat::problem::Method::Graph(remat::graph::GraphAlgorithm::Checkmate))
    );
    assert_eq!(
        "auto".parse::<remat::problem::Method>(),
        Ok(remat::problem::Method::Chain(remat::solve::Algorithm::Auto))
    );
}
