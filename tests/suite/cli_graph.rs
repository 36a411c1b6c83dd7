//! `remat solve` and `remat simulate` on graph files, as a user runs them.

use assert_cmd::Command;
use predicates::prelude::*;

fn remat() -> Command {
    Command::cargo_bin("remat").unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const DIAMOND: &str = r#"{"name": "diamond", "input_size": 3, "nodes": [
  {"name": "a", "inputs": [], "forward_time": 1, "backward_time": 2, "output_size": 10, "saved_size": 11},
  {"name": "b", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 20, "saved_size": 20, "gradient_size": 5},
  {"name": "c", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 30, "saved_size": 30},
  {"name": "d", "inputs": ["b", "c"], "forward_time": 1, "backward_time": 2, "output_size": 4, "saved_size": 4, "backward_overhead": 7}
]}"#;

const PATH_STAGES: [(f64, f64, u64, u64); 4] =
    [(1.0, 2.0, 30, 40), (2.0, 3.0, 20, 50), (1.5, 2.5, 40, 40), (3.0, 1.0, 10, 25)];

fn path_graph() -> String {
    let nodes: Vec<String> = PATH_STAGES
        .iter()
        .enumerate()
        .map(|(i, (f, b, o, s))| {
            let inputs = if i == 0 { String::new() } else { format!("\"l{}\"", i - 1) };
            format!(
                r#"{{"name": "l{i}", "inputs": [{inputs}], "forward_time": {f}, "backward_time": {b}, "output_size": {o}, "saved_size": {s}}}"#
            )
        })
        .collect();
    format!(r#"{{"name": "path", "input_size": 8, "nodes": [{}]}}"#, nodes.join(", "))
}

fn path_chain() -> String {
    let stages: Vec<String> = PATH_STAGES
        .iter()
        .enumerate()
        .map(|(i, (f, b, o, s))| {
            format!(r#"{{"name": "l{i}", "forward_time": {f}, "backward_time": {b}, "output_size": {o}, "saved_size": {s}}}"#)
        })
        .collect();
    format!(r#"{{"name": "path", "input_size": 8, "stages": [{}]}}"#, stages.join(", "))
}

fn json_of(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap()
}

#[test]
fn a_path_graph_costs_what_its_chain_costs() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "path-graph.json", &path_graph());
    let chain = write(&dir, "path-chain.json", &path_chain());
    for memory in ["138", "150", "200", "400"] {
        let g = remat().args(["solve", graph.to_str().unwrap(), "--memory", memory, "--json"]).assert().success();
        let note = String::from_utf8_lossy(&g.get_output().stderr).to_string();
        assert!(note.contains("auto chose the chain solver (exhaustive): the forward graph is a path"), "{note}");
        let c = remat().args(["solve", chain.to_str().unwrap(), "--memory", memory, "--json"]).assert().success();
        assert_eq!(json_of(&g.get_output().stdout), json_of(&c.get_output().stdout), "at {memory} bytes");
    }
    // The chain schedule of the path graph replays on the graph file too.
    let schedule = dir.path().join("s.json");
    remat().args(["solve", graph.to_str().unwrap(), "--memory", "150", "-o"]).arg(&schedule).assert().success();
    remat()
        .args(["simulate", graph.to_str().unwrap(), schedule.to_str().unwrap(), "--memory", "150"])
        .assert()
        .success()
        .stdout(predicate::str::contains("fits the budget of 150 B"));
    let expected = "error: no exhaustive schedule fits in 120 B (120 bytes); the smallest budget it can meet is 138 B";
    for file in [&graph, &chain] {
        remat()
            .args(["solve", file.to_str().unwrap(), "--memory", "120"])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(expected));
    }
}

#[test]
fn auto_searches_tiny_graphs_and_checkmate_says_why_and_the_schedule_replays() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "diamond.json", DIAMOND);
    // Its joint graph has 9 nodes: auto searches every schedule.
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "110"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "path:        exhaustive search: the forward graph is not a chain (node `c` reads `a`",
        ))
        .stdout(predicate::str::contains("its derived joint graph has 9 nodes (at most 14)"))
        .stdout(predicate::str::contains("makespan:    13.00 (no recomputation: 12.00, +8.3%)"));
    let schedule = dir.path().join("schedule.json");
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "110", "-a", "checkmate", "--lp-solver", "microlp", "-o"])
        .arg(&schedule)
        .assert()
        .success()
        .stdout(predicate::str::contains("path:        checkmate on the derived joint graph (9 nodes), as asked"))
        .stdout(predicate::str::contains("status:      optimal (proven)"))
        .stdout(predicate::str::contains("makespan:    13.00 (no recomputation: 12.00, +8.3%)"));
    let saved = json_of(&std::fs::read(&schedule).unwrap());
    assert_eq!(saved["algorithm"], "checkmate");
    assert_eq!(saved["status"], "optimal");
    assert_eq!(saved["gap"], 0.0);
    assert_eq!(saved["operations"][0], serde_json::json!({"op": "compute", "node": "a"}));
    remat()
        .args(["simulate", graph.to_str().unwrap(), schedule.to_str().unwrap(), "--memory", "110"])
        .assert()
        .success()
        .stdout(predicate::str::contains("makespan:    13.00"))
        .stdout(predicate::str::contains("fits the budget of 110 B"));
    remat()
        .args(["simulate", graph.to_str().unwrap(), schedule.to_str().unwrap(), "--memory", "100"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("over the budget of 100 bytes"));
}

#[test]
fn infeasible_budgets_name_the_smallest_one() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "diamond.json", DIAMOND);
    remat().args(["solve", graph.to_str().unwrap(), "--memory", "102"]).assert().code(1).stderr(
        predicate::str::contains(
            "no exhaustive schedule fits in 102 B (102 bytes); the smallest budget it can meet is 103 B (103 bytes)",
        ),
    );
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "102", "-a", "checkmate", "--lp-solver", "microlp"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "no checkmate schedule fits in 102 B (102 bytes); the smallest budget it can meet is 103 B (103 bytes)",
        ));
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "103", "-a", "checkmate-approx"])
        .args(["--lp-solver", "microlp"])
        .assert()
        .code(predicate::in_iter([0, 1]));
}

#[test]
fn infeasible_graph_budgets_answer_in_json_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "diamond.json", DIAMOND);
    let g = graph.to_str().unwrap();
    let out = remat()
        .args(["solve", g, "--memory", "102", "-a", "checkmate", "--lp-solver", "microlp", "--json"])
        .assert()
        .code(1);
    let status = json_of(&out.get_output().stdout);
    assert_eq!(
        status,
        serde_json::json!({
            "status": "infeasible", "algorithm": "checkmate", "budget": 102,
            "min_budget": 103, "min_budget_proven": true, "min_budget_lower": 103,
        })
    );
    // The budget it names works, and is the smallest: the exhaustive search agrees.
    let ok = remat().args(["solve", g, "--memory", "103", "--lp-solver", "microlp", "--json"]).assert().success();
    assert_eq!(json_of(&ok.get_output().stdout)["status"], "optimal");
    let exhaustive = remat().args(["solve", g, "--memory", "102", "-a", "exhaustive", "--json"]).assert().code(1);
    assert_eq!(json_of(&exhaustive.get_output().stdout)["min_budget"], 103);
    // A path graph goes to the chain solvers: their infeasible object, as for a chain file.
    let path = write(&dir, "path.json", &path_graph());
    let out = remat().args(["solve", path.to_str().unwrap(), "--memory", "120", "--json"]).assert().code(1);
    let status = json_of(&out.get_output().stdout);
    assert_eq!((&status["status"], &status["min_budget"]), (&serde_json::json!("infeasible"), &serde_json::json!(138)));
}

#[test]
fn bad_graph_files_are_named_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            DIAMOND.replace(r#""inputs": ["b", "c"]"#, r#""inputs": ["b", "x"]"#),
            "nodes[3] (`d`): input `x` is not the name of any node",
        ),
        (
            DIAMOND.replace(
                r#""inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 20"#,
                r#""inputs": ["c"], "forward_time": 1, "backward_time": 2, "output_size": 20"#,
            ),
            "nodes[1] (`b`): input `c` comes later in `nodes`",
        ),
        (DIAMOND.replace(r#""name": "c""#, r#""name": "b""#), "nodes[2].name `b` is already the name of nodes[1]"),
        (DIAMOND.replace(r#""output_size": 30"#, r#""output_size": -30"#), "nodes[2].output_size (node 3)"),
        (
            DIAMOND.replace(r#""backward_time": 2, "output_size": 4"#, r#""backward_time": -2, "output_size": 4"#),
            "nodes[3] (`d`): backward_time is -2",
        ),
        (
            DIAMOND.replace(r#""inputs": ["b", "c"]"#, r#""inputs": ["b"]"#),
            "nodes[2] (`c`) is not an input of any later node",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = write(&dir, &format!("bad{i}.json"), text);
        remat()
            .args(["solve", file.to_str().unwrap(), "--memory", "1KiB"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(*expected));
    }
}

#[test]
fn chain_algorithms_refuse_graphs_and_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "diamond.json", DIAMOND);
    let g = graph.to_str().unwrap();
    remat().args(["solve", g, "--memory", "1KiB", "-a", "persistent"]).assert().code(2).stderr(
        predicate::str::contains("persistent solves chains, and graph `diamond` is not one: node `c` reads `a`"),
    );
    remat().args(["solve", g, "--memory", "1KiB", "--time-limit", "0"]).assert().code(2).stderr(
        predicate::str::contains(
            "`0` is not a time limit: give a number of seconds above 0 and at most 1e9, or `none`",
        ),
    );
    let lp = remat().args(["solve", g, "--memory", "1KiB", "--lp-solver", "gurobi"]).assert().code(2);
    let err = String::from_utf8_lossy(&lp.get_output().stderr).to_string();
    assert!(err.contains("unknown LP solver `gurobi`"), "{err}");
}

#[test]
fn checkmate_on_a_chain_file_goes_through_its_forward_graph() {
    let dir = tempfile::tempdir().unwrap();
    let chain = write(&dir, "chain.json", &path_chain());
    let out = remat()
        .args([
            "solve",
            chain.to_str().unwrap(),
            "--memory",
            "400",
            "-a",
            "checkmate",
            "--lp-solver",
            "microlp",
            "--json",
        ])
        .assert()
        .success();
    let s = json_of(&out.get_output().stdout);
    assert_eq!(s["makespan"], 16.0, "ample memory: every node once");
    assert_eq!(s["operations"][0]["node"], "l0");
}

#[test]
fn joint_graphs_are_read_as_given() {
    let dir = tempfile::tempdir().unwrap();
    // Checkmate's linear graph with two forward nodes.
    let text = r#"{"name": "linear2", "joint": true, "nodes": [
        {"name": "f0", "cost": 1, "size": 1, "inputs": []},
        {"name": "f1", "cost": 1, "size": 1, "inputs": ["f0"]},
        {"name": "loss", "cost": 1, "size": 1, "inputs": ["f1"]},
        {"name": "b1", "cost": 1, "size": 1, "inputs": ["f1", "loss"]},
        {"name": "b0", "cost": 1, "size": 1, "inputs": ["f0", "b1"]}
    ]}"#;
    let graph = write(&dir, "linear2.json", text);
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "3"])
        .assert()
        .success()
        .stdout(predicate::str::contains("path:        exhaustive search on the joint graph as given: 5 nodes"))
        .stdout(predicate::str::contains("makespan:    6.00 (no recomputation: 5.00, +20.0%)"));
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "3", "-a", "checkmate", "--lp-solver", "microlp"])
        .assert()
        .success()
        .stdout(predicate::str::contains("path:        MILP (checkmate) on the joint graph as given (5 nodes"))
        .stdout(predicate::str::contains("makespan:    6.00 (no recomputation: 5.00, +20.0%)"));
    remat()
        .args(["solve", graph.to_str().unwrap(), "--memory", "2"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("the smallest budget it can meet is 3 B"));
}

/// `chains/rotor-fc6.json` written as a forward graph that is a path (each
/// stage a node reading the one before): what `remat solve` takes as its
/// chain.
fn rotor_fc6_as_a_path_graph() -> String {
    let chain: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("chains/rotor-fc6.json").unwrap()).unwrap();
    let nodes: Vec<serde_json::Value> = chain["stages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, stage)| {
            let mut node = stage.clone();
            node["name"] = format!("s{i}").into();
            node["inputs"] = if i == 0 { serde_json::json!([]) } else { serde_json::json!([format!("s{}", i - 1)]) };
            node
        })
        .collect();
    let graph = serde_json::json!({"name": "rotor-fc6", "input_size": chain["input_size"], "nodes": nodes});
    graph.to_string()
}

/// Issue 26: a path-shaped forward graph is solved as its chain, and the
/// chain options reach that solve unchanged (the router once rebuilt them
/// from --slots alone: --exact-memory 0 answered "exact bytes", --segments 3
/// gave K = 1).
#[test]
fn a_path_graph_keeps_exact_memory_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(&dir, "rotor-fc6-path.json", &rotor_fc6_as_a_path_graph());
    let graph = graph.to_str().unwrap();
    for input in ["chains/rotor-fc6.json", graph] {
        remat()
            .args(["solve", input, "--memory", "90MiB", "-a", "persistent", "--exact-memory", "0"])
            .assert()
            .success()
            .stdout(predicate::str::contains("not exact: exact answers are turned off"));
        remat()
            .args(["solve", input, "--memory", "1GiB", "-a", "sequential", "--segments", "3"])
            .assert()
            .success()
            .stdout(predicate::str::contains("K = 3 segments").and(predicate::str::contains("makespan:    46.13")));
    }
    // Without the flags the path graph is solved exactly, as the chain is.
    remat()
        .args(["solve", graph, "--memory", "90MiB", "-a", "persistent"])
        .assert()
        .success()
        .stdout(predicate::str::contains("exact bytes"));
}
