//! `remat mincut` as a user runs it: answers, JSON, budgets, and the error a
//! user sees for each kind of bad input.

use assert_cmd::Command;
use predicates::prelude::*;

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

fn fixture(name: &str) -> String {
    format!("{}/tests/data/joint/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("joint.json");
    std::fs::write(&path, text).unwrap();
    path
}

/// x -> t = tanh(x) -> output; tangent g; dx = g * (1 - t^2).
fn graph(nodes: &str) -> String {
    format!(r#"{{"name": "bad", "nodes": [{nodes}], "outputs": ["t"], "gradients": ["dx"]}}"#)
}

const X: &str = r#"{"name": "x", "role": "primal", "shape": [4], "dtype": "float32"}"#;
const T: &str =
    r#"{"name": "t", "role": "forward", "op": "pointwise", "inputs": ["x"], "shape": [4], "dtype": "float32"}"#;
const G: &str = r#"{"name": "g", "role": "tangent", "shape": [4], "dtype": "float32"}"#;
const DX: &str =
    r#"{"name": "dx", "role": "backward", "op": "pointwise", "inputs": ["g", "t"], "shape": [4], "dtype": "float32"}"#;

#[test]
fn a_valid_small_graph_saves_the_tanh_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &graph(&[X, T, G, DX].join(",")));
    remat()
        .args(["mincut", path.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("saved (16 B, of which activations 16 B): t"));
}

#[test]
fn json_output_names_the_saved_set_and_the_baselines() {
    let out =
        remat().args(["mincut", &fixture("sum_cos_cos"), "--json"]).assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["method"], "min_cut");
    assert_eq!(v["chosen"]["saved"], serde_json::json!(["add_2"]));
    assert_eq!(v["save_all"]["saved"].as_array().unwrap().len(), 2);
    assert_eq!(v["recompute_all"]["saved"].as_array().unwrap().len(), 4);
    assert!(v["min_cut"]["traffic_bytes"].as_u64() < v["save_all"]["traffic_bytes"].as_u64());
}

#[test]
fn a_budget_below_the_smallest_exits_1_with_the_smallest() {
    remat()
        .args(["mincut", &fixture("dropout_like"), "--memory", "1000"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no saved set fits in 1000 bytes; the smallest that fits needs 1024 bytes"));
}

#[test]
fn an_infeasible_budget_with_json_says_so_on_stdout() {
    let out = remat()
        .args(["mincut", &fixture("dropout_like"), "--memory", "1000", "--json"])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, serde_json::json!({"status": "infeasible", "budget": 1000, "min_budget": 1024}));
}

#[test]
fn a_given_saved_set_is_evaluated_and_a_bad_one_named() {
    let out = remat()
        .args(["mincut", &fixture("gelu_erf"), "--saved", "primals_1", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["method"], "given");
    assert_eq!(v["chosen"], v["min_cut"]);
    remat()
        .args(["mincut", &fixture("gelu_erf"), "--saved", "mul"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the backward needs primal `primals_1`, which the saved set does not hold"));
    remat()
        .args(["mincut", &fixture("gelu_erf"), "--saved", "tangents_1"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("saved node `tangents_1` depends on a tangent"));
}

#[test]
fn a_budget_prints_the_proven_optimum() {
    remat()
        .args(["mincut", &fixture("mlp_block"), "--memory", "16KiB"])
        .assert()
        .success()
        .stdout(predicate::str::contains("within 16.00 KiB (proven optimal)"));
}

#[test]
fn pareto_lists_the_front() {
    remat()
        .args(["mincut", &fixture("attention_block"), "--pareto"])
        .assert()
        .success()
        .stdout(predicate::str::contains("saved bytes against least recompute cost"));
    remat().args(["mincut", &fixture("attention_block"), "--pareto", "--memory", "1KiB"]).assert().code(2);
}

fn rejects(nodes: &[&str], message: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &graph(&nodes.join(",")));
    remat()
        .args(["mincut", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(message))
        .stderr(predicate::str::contains("panicked").not());
}

#[test]
fn a_cycle_is_named() {
    let a = r#"{"name": "a", "role": "forward", "op": "pointwise", "inputs": ["x", "b"], "bytes": 4}"#;
    let b = r#"{"name": "b", "role": "forward", "op": "pointwise", "inputs": ["a"], "bytes": 4}"#;
    rejects(&[X, a, b, T, G, DX], "the graph has a cycle: a -> b -> a");
}

#[test]
fn an_unknown_input_is_named() {
    let t = r#"{"name": "t", "role": "forward", "op": "pointwise", "inputs": ["y"], "bytes": 16}"#;
    rejects(&[X, t, G, DX], "node `t` has input `y`, which is not a node of the graph");
}

#[test]
fn a_backward_node_feeding_the_forward_is_named() {
    let t = r#"{"name": "t", "role": "forward", "op": "pointwise", "inputs": ["x", "g"], "bytes": 16}"#;
    rejects(&[X, t, G, DX], "backward node `g` (tangent) feeds forward node `t`");
}

#[test]
fn a_backward_node_without_a_path_to_the_gradients_is_named() {
    let dead = r#"{"name": "dead", "role": "backward", "op": "pointwise", "inputs": ["g"], "bytes": 16}"#;
    rejects(&[X, T, G, DX, dead], "backward node `dead` has no path to the gradients");
}

#[test]
fn other_bad_input_is_named() {
    let no_op = r#"{"name": "t", "role": "forward", "inputs": ["x"], "bytes": 16}"#;
    rejects(&[X, no_op, G, DX], "node `t` (forward) has no `op`");
    let no_size = r#"{"name": "t", "role": "forward", "op": "pointwise", "inputs": ["x"]}"#;
    rejects(&[X, no_size, G, DX], "node `t` has no size");
    let bad_class = r#"{"name": "t", "role": "forward", "op": "matmul", "inputs": ["x"], "bytes": 16}"#;
    rejects(&[X, bad_class, G, DX], "invalid joint graph JSON at `nodes[1].op`");
    rejects(&[X, T, T, G, DX], "node name `t` is used twice (nodes[1] and nodes[2])");
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, r#"{"nodes": [{"name": "x", "role": "primal", "bytes": 4}]}"#);
    remat()
        .args(["mincut", path.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no `gradients`"));
    remat()
        .args(["mincut", "/nonexistent/joint.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read joint graph `/nonexistent/joint.json`"));
}
