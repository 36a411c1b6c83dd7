//! Issue 27 through the binary, the third round of hostile inputs: each
//! reproducer of the issue ends with a correct answer, a clear error (exit 2
//! naming the field and the value) or an infeasible verdict naming a budget
//! that then works; never a panic, an abort, a time limit ignored, or a lost
//! or leftover file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{self, json, remat, repo, write};

use predicates::prelude::*;
use predicates::str::contains;

/// A chain whose sizes are near 2^58: f64 sums of them round.
const CHAIN_2_58: &str = r#"{"name": "big", "input_size": 24906382760534120, "stages": [
    {"forward_time": 1, "backward_time": 7, "output_size": 145906731218257284, "saved_size": 145906731218257300,
     "gradient_size": 71, "forward_overhead": 56772566533924122},
    {"forward_time": 3, "backward_time": 3, "output_size": 156751472627549479, "saved_size": 156751472627549484,
     "gradient_size": 196960507296365965, "backward_overhead": 69406642664413595}]}"#;

/// The smallest budget any schedule of [`CHAIN_2_58`] needs, by hand: the
/// floating DP meets the lower bound there.
const MIN_2_58: u64 = 593_931_736_567_120_519;

#[test]
fn smallest_budgets_near_2_58_are_exact_to_the_byte() {
    let dir = tempfile::tempdir().unwrap();
    let chain = write(dir.path(), "big.json", CHAIN_2_58);
    for algorithm in ["auto", "exhaustive", "floating", "persistent"] {
        let out = remat()
            .args(["min-memory", chain.to_str().unwrap(), "-a", algorithm, "--json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v = json(&out);
        assert_eq!(v["any_schedule"], MIN_2_58, "{algorithm}: {v}");
        let named = v["algorithm_min"].as_u64().unwrap();
        assert_eq!(named, MIN_2_58, "{algorithm}: {v}");
        // `solve` meets the budget named, and not one byte less.
        remat().args(["solve", chain.to_str().unwrap(), "-a", algorithm, "-m", &named.to_string()]).assert().success();
        remat()
            .args(["solve", chain.to_str().unwrap(), "-a", algorithm, "-m", &(named - 1).to_string()])
            .assert()
            .code(1)
            .stderr(contains(format!("({named} bytes)")));
    }
}

/// `(12345 bytes) works` or `the smallest budget it can meet is ... (12345 bytes)`: the budget named.
fn named_budget(stderr: &str) -> u64 {
    let at = stderr.find("; ").map(|i| &stderr[i..]).unwrap_or_else(|| panic!("no budget named: {stderr}"));
    let open = at.find('(').unwrap();
    let close = at[open..].find(" bytes)").unwrap() + open;
    at[open + 1..close].parse().unwrap_or_else(|_| panic!("no budget named: {stderr}"))
}

#[test]
fn checkmate_approx_names_a_budget_at_which_it_then_succeeds() {
    // The MILP's smallest budget (225.50 MiB) is below what the rounding
    // meets; the verdict used to name it.
    let graph = repo("chains/graphs/unet-tiny.json");
    let out =
        remat().args(["solve", &graph, "-a", "checkmate-approx", "-m", "1KiB"]).assert().code(1).get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(stderr.contains("works") && stderr.contains("at least 225.50 MiB"), "{stderr}");
    let named = named_budget(&stderr);
    assert!(named > 236_453_888, "{stderr}");
    remat().args(["solve", &graph, "-a", "checkmate-approx", "-m", &named.to_string()]).assert().success();
}

#[test]
fn a_huge_run_in_notation_is_refused_without_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let chain = write(
        dir.path(),
        "c.json",
        r#"{"name": "c", "input_size": 10, "stages": [{"forward_time": 1, "backward_time": 1, "output_size": 10, "saved_size": 10}]}"#,
    );
    for (notation, length) in [
        ("F_none^1..18446744073709551615", "18446744073709551615"),
        ("F_all^1..100000001 B^2..1", "100000001"),
        ("F_ck^1..16777216 F_all^1..2", "16777218"),
    ] {
        let schedule = write(dir.path(), "s.txt", notation);
        let start = Instant::now();
        remat()
            .args(["simulate", chain.to_str().unwrap(), schedule.to_str().unwrap()])
            .assert()
            .code(2)
            .stderr(contains(format!("{length} operations long")).and(contains("at most 16777216")));
        assert!(start.elapsed() < Duration::from_secs(20), "{notation}: {:?}", start.elapsed());
    }
    // The longest schedule allowed is still read (and judged on its merits).
    let schedule = write(dir.path(), "s.txt", "F_ck^1..16777215 B^1");
    remat()
        .args(["simulate", chain.to_str().unwrap(), schedule.to_str().unwrap()])
        .assert()
        .code(2)
        .stderr(contains("is not valid on chain").and(contains("operations long").not()));
}

/// A generated joint graph: `n` forward nodes in a chain with some skips and
/// a backward chain reading them; every activation `bytes` bytes less a
/// little when given, else random sizes.
fn joint_graph(n: usize, seed: u64, bytes: Option<u64>) -> String {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move |m: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % m.max(1)
    };
    let size = |r: u64| bytes.map_or(1 + r % (1 << 20), |b| b - r % 1000);
    let mut forward = Vec::with_capacity(n);
    for i in 1..=n {
        let mut inputs = vec![if i == 1 { "\"x\"".to_string() } else { format!("\"f{}\"", i - 1) }];
        if i > 2 && next(10) < 3 {
            inputs.push(format!("\"f{}\"", 1 + next(i as u64 - 2)));
        }
        let op = ["pointwise", "pointwise", "compute_intensive", "reduction", "view"][next(5) as usize];
        let flops = if op == "compute_intensive" {
            format!(r#", "flops": {}"#, 1 + next(1_000_000_000))
        } else {
            String::new()
        };
        forward.push(format!(
            r#"{{"name": "f{i}", "role": "forward", "op": "{op}", "inputs": [{}], "shape": [4], "dtype": "float32", "bytes": {}{flops}}}"#,
            inputs.join(", "),
            size(next(u64::MAX >> 1))
        ));
    }
    common::joint_graph_json(&format!("gen{n}"), bytes.unwrap_or(4096), forward)
}

#[test]
fn mincut_near_2_48_answers_instead_of_exit_70() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..3 {
        let graph = write(dir.path(), "j.json", &joint_graph(20, seed, Some(1 << 48)));
        let out = remat()
            .args(["mincut", graph.to_str().unwrap(), "--memory", "1KiB", "--json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v = json(&out);
        assert!(v["chosen"]["activation_bytes"].as_u64().unwrap() <= 1024, "{v}");
        let out = remat().args(["mincut", graph.to_str().unwrap(), "--pareto", "--json"]).assert().success();
        let front = json(&out.get_output().stdout);
        let points = front.as_array().unwrap();
        assert!(!points.is_empty());
        // Most bytes first, each point's bytes strictly below the last's.
        let bytes: Vec<u64> = points.iter().map(|p| p["partition"]["activation_bytes"].as_u64().unwrap()).collect();
        assert!(bytes.windows(2).all(|w| w[1] < w[0]), "{bytes:?}");
    }
}

#[test]
fn mincut_pareto_keeps_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let graph = write(dir.path(), "j.json", &joint_graph(1000, 3, None));
    let start = Instant::now();
    remat()
        .args(["mincut", graph.to_str().unwrap(), "--pareto", "--time-limit", "1"])
        .assert()
        .success()
        .stderr(contains("stopped at the time limit (1 s)"))
        .stdout(contains("(stopped at the time limit after"));
    // One second for the front, the rest for reading the graph and the
    // analysis, on a loaded machine.
    assert!(start.elapsed() < Duration::from_secs(30), "{:?}", start.elapsed());
    for bad in ["-1", "nan", "inf", "1e20"] {
        remat()
            .args(["mincut", graph.to_str().unwrap(), "--pareto", &format!("--time-limit={bad}")])
            .assert()
            .code(2)
            .stderr(contains("--time-limit must be a number of seconds"));
    }
}

#[cfg(unix)]
#[test]
fn mincut_on_a_closed_pipe_or_a_full_device_exits_cleanly() {
    use std::process::Stdio;
    let fixture = repo("tests/data/joint/attention_block.json");
    for args in [vec!["mincut", &fixture], vec!["mincut", &fixture, "--json"], vec!["mincut", &fixture, "--pareto"]] {
        // A reader that has gone: exit 0, no panic.
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        // A full device: exit 2 and say so.
        if Path::new("/dev/full").exists() {
            let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
            let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
                .args(&args)
                .stdout(full)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains("cannot write to standard output") && !stderr.contains("panicked"), "{stderr}");
        }
    }
}

#[test]
fn no_cli_module_prints_with_println() {
    // `println!` panics on a closed pipe or a full device: every command
    // prints through cli/output.rs's `outln!`.
    for entry in std::fs::read_dir(repo("src/cli")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap();
            let bare = code.replace("eprintln!", "").replace("eprint!", "");
            assert!(!bare.contains("println!(") && !bare.contains("print!("), "{}:{}: {line}", path.display(), i + 1);
        }
    }
}

#[test]
fn front_ends_call_no_guard() {
    // Issue 26: every public entry point checks its own limits
    // (remat::solve::limits), so the CLI and the Python bindings call none
    // of those checks themselves (the CLI once called guard::solve before
    // solve called it again). Estimates for a note (`seconds_for`) and
    // `SolveOptions::check` on the options alone are not guards.
    let banned =
        ["guard::", "limits::solve(", "limits::min_budget(", "limits::any_min_budget(", "limits::exact_memory("];
    for dir in ["src/cli", "python/src"] {
        for entry in std::fs::read_dir(repo(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap();
                for b in banned {
                    assert!(!code.contains(b), "{}:{}: {line}", path.display(), i + 1);
                }
            }
        }
    }
}

/// A chain of `len` identical stages.
fn long_chain(dir: &Path, len: usize) -> PathBuf {
    let stage = r#"{"forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100}"#;
    let stages = vec![stage; len].join(", ");
    write(dir, &format!("chain{len}.json"), &format!(r#"{{"name": "t", "input_size": 1000, "stages": [{stages}]}}"#))
}

#[test]
fn min_memory_on_a_long_chain_is_refused_at_once_with_a_remedy() {
    // Issue 27: 2,000 stages ran 318 s and 10,000 past 300 s; the guard's
    // estimate counted a tenth of the min-peak passes.
    let dir = tempfile::tempdir().unwrap();
    let chain = long_chain(dir.path(), 10_000);
    for algorithm in ["auto", "persistent"] {
        let start = Instant::now();
        remat()
            .args(["min-memory", chain.to_str().unwrap(), "-a", algorithm])
            .assert()
            .code(2)
            .stderr(contains("10000-stage chain").and(contains("hint: pass a chain with fewer, larger stages")));
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    }
}

#[test]
fn an_exact_memory_above_the_machine_is_refused_up_front() {
    // Issue 27: a large --exact-memory ran until an allocation failed and
    // the process aborted (about 100 s under a 2 GiB limit).
    let chain = repo("chains/rotor-fc6.json");
    for args in [
        vec!["solve", &chain, "-m", "90MiB", "--exact-memory", "1000TiB"],
        vec!["solve", &chain, "-m", "90MiB", "-a", "floating", "--exact-memory", "18446744073709551615"],
        vec!["compare", &chain, "-m", "90MiB", "--exact-memory", "1000TiB"],
    ] {
        let start = Instant::now();
        let out = remat().args(&args).assert().code(2).get_output().clone();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("is more than this machine can give a solve")
                && stderr.contains("hint: pass --exact-memory"),
            "{args:?}: {stderr}"
        );
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?}: {:?}", start.elapsed());
    }
    remat().args(["solve", &chain, "-m", "90MiB", "--exact-memory", "64MiB"]).assert().success();
}

#[cfg(unix)]
#[test]
fn sweep_refuses_one_path_for_both_outputs_directly_or_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let chain = repo("chains/rotor-fc6.json");
    let out = write(dir.path(), "out.csv", "old output\n");
    let link = dir.path().join("link.svg");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let fresh = dir.path().join("new.csv");
    let dangling = dir.path().join("dangling.svg");
    std::os::unix::fs::symlink(&fresh, &dangling).unwrap();
    for (output, plot) in [(&out, &out), (&out, &link), (&fresh, &fresh), (&fresh, &dangling)] {
        remat()
            .args(["sweep", &chain, "--steps", "3", "-o"])
            .arg(output)
            .arg("--plot")
            .arg(plot)
            .assert()
            .code(2)
            .stderr(contains("are the same file").and(contains("--output")).and(contains("--plot")));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old output\n");
        assert!(!fresh.exists());
    }
    // Two different paths: both written.
    let plot = dir.path().join("plot.svg");
    remat().args(["sweep", &chain, "--steps", "3", "-o"]).arg(&out).arg("--plot").arg(&plot).assert().success();
    assert!(std::fs::read_to_string(&out).unwrap().contains("algorithm"));
    assert!(std::fs::read_to_string(&plot).unwrap().contains("<svg"));
}

fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".remat-") && n.ends_with(".tmp"))
        .collect()
}

/// A process id no process has now: one that ran and was reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(target_os = "linux")]
#[test]
fn temporaries_left_by_a_killed_writer_are_removed_by_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    // What a SIGKILL between the temporary file and the rename leaves.
    let dead = dead_pid();
    let stale = write(dir.path(), &format!(".remat-{dead}-AbC123.tmp"), &"x".repeat(1 << 20));
    // A writer still running (this test) keeps its file.
    let live = write(dir.path(), &format!(".remat-{}-XyZ789.tmp", std::process::id()), "partial");
    // Not ours: never touched.
    let other = write(dir.path(), ".remat-notes.tmp", "mine");
    let out = dir.path().join("z.json");
    remat().args(["zoo", "resnet18", "-o"]).arg(&out).assert().success();
    assert!(!stale.exists(), "{:?}", temporaries(dir.path()));
    assert!(live.exists() && other.exists());
    std::fs::remove_file(&live).unwrap();

    // Real kills at spread-out moments of a write: the target is always the
    // old file or the whole new one, and whatever a kill leaves is gone after
    // the next write.
    let old = std::fs::read_to_string(&out).unwrap();
    let mut left = 0;
    for i in 0..40u64 {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
            .args(["zoo", "resnet1001", "--graph", "layers", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(500 * i));
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text == old || serde_json::from_str::<serde_json::Value>(&text).is_ok(), "kill {i}: a torn file");
        left += temporaries(dir.path()).len();
    }
    remat().args(["zoo", "resnet18", "-o"]).arg(&out).assert().success();
    assert_eq!(temporaries(dir.path()), vec![".remat-notes.tmp".to_string()], "{left} left by kills");
}

#[test]
fn a_graph_with_a_json_syntax_error_is_reported_as_a_graph() {
    let dir = tempfile::tempdir().unwrap();
    let node =
        r#"{"name": "a", "forward_time": 1, "backward_time": 1, "output_size": 1, "saved_size": 1, "inputs": []}"#;
    let trailing = write(dir.path(), "trailing.json", &format!(r#"{{"name": "g", "nodes": [{node},]}}"#));
    let hex = write(
        dir.path(),
        "hex.json",
        &format!(r#"{{"name": "g", "nodes": [{}]}}"#, node.replace("\"output_size\": 1", "\"output_size\": 0x10")),
    );
    remat()
        .args(["solve", trailing.to_str().unwrap(), "-m", "1KiB"])
        .assert()
        .code(2)
        .stderr(contains("graph file").and(contains("trailing comma")).and(contains("unknown field").not()));
    remat()
        .args(["solve", hex.to_str().unwrap(), "-m", "1KiB"])
        .assert()
        .code(2)
        .stderr(contains("graph file").and(contains("output_size")).and(contains("`0x10` is not a JSON value")));
}

#[test]
fn a_chain_without_a_name_is_read_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let chain = write(
        dir.path(),
        "c.json",
        r#"{"input_size": 10, "stages": [{"forward_time": 1, "backward_time": 1, "output_size": 10, "saved_size": 10}]}"#,
    );
    remat()
        .args(["solve", chain.to_str().unwrap(), "-m", "1KiB"])
        .assert()
        .success()
        .stdout(contains("chain:       chain (1 stages"));
}

#[test]
fn a_schedule_given_as_the_chain_says_it_is_a_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let schedule = dir.path().join("s.json");
    remat()
        .args(["solve", &repo("chains/rotor-fc6.json"), "-m", "90MiB", "--json", "-o"])
        .arg(&schedule)
        .assert()
        .success();
    for command in [vec!["solve", "-m", "90MiB"], vec!["min-memory"], vec!["compare", "-m", "90MiB"]] {
        let (cmd, rest) = command.split_first().unwrap();
        remat()
            .arg(cmd)
            .arg(&schedule)
            .args(rest)
            .assert()
            .code(2)
            .stderr(contains("is a schedule").and(contains("remat simulate")).and(contains("unknown field").not()));
    }
}

#[test]
fn a_numeric_syntax_error_names_the_field_and_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let s =
        |size: &str| format!(r#"{{"forward_time": 1, "backward_time": 1, "output_size": {size}, "saved_size": 1}}"#);
    for (bad, shown) in [("0x10", "0x10"), ("+5", "+5"), ("1_000", "1_000")] {
        let text = format!(r#"{{"name": "c", "input_size": 1, "stages": [{}, {}, {}]}}"#, s("1"), s("1"), s(bad));
        let chain = write(dir.path(), "c.json", &text);
        remat().args(["solve", chain.to_str().unwrap(), "-m", "1KiB"]).assert().code(2).stderr(
            contains("stages[2].output_size (stage 3)")
                .and(contains(format!("`{shown}` is not a JSON value")))
                .and(contains(".?").not()),
        );
    }
}

#[test]
fn the_text_solve_prints_is_read_back_by_simulate() {
    let dir = tempfile::tempdir().unwrap();
    for (input, budget) in [(repo("chains/graphs/unet-tiny.json"), "400MiB"), (repo("chains/rotor-fc6.json"), "90MiB")]
    {
        let out = remat().args(["solve", &input, "-m", budget]).assert().success().get_output().stdout.clone();
        let printed = write(dir.path(), "printed.txt", &String::from_utf8(out).unwrap());
        let replay = remat()
            .args(["simulate", &input])
            .arg(&printed)
            .args(["-m", budget, "--json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v = json(&replay);
        // The same replay as the JSON schedule's.
        let schedule = dir.path().join("s.json");
        remat().args(["solve", &input, "-m", budget, "--json", "-o"]).arg(&schedule).assert().success();
        let from_json =
            remat().args(["simulate", &input]).arg(&schedule).args(["-m", budget, "--json"]).assert().success();
        let w = json(&from_json.get_output().stdout);
        assert_eq!(v["peak_memory"], w["peak_memory"], "{input}");
        assert_eq!(v["makespan"], w["makespan"], "{input}");
    }
    let bad = write(dir.path(), "bad.txt", "enc1 no-such-node");
    remat()
        .args(["simulate", &repo("chains/graphs/unet-tiny.json")])
        .arg(&bad)
        .assert()
        .code(2)
        .stderr(contains("token 2: `no-such-node` is not a node of graph `unet-tiny`"));
}

#[test]
fn no_schedule_within_the_time_limit_has_its_own_exit_code_and_json() {
    let graph = repo("chains/graphs/unet-tiny.json");
    let out = remat()
        .args(["solve", &graph, "-a", "checkmate", "-m", "30MiB", "--time-limit", "0.01", "--json"])
        .assert()
        .code(3)
        .stderr(contains("no schedule found within the time limit"))
        .get_output()
        .stdout
        .clone();
    let v = json(&out);
    assert_eq!(v["status"], "time_limit", "{v}");
    assert_eq!(v["budget"], 30 << 20, "{v}");
    assert!(v["seconds"].as_f64().is_some(), "{v}");
}

#[test]
fn min_memory_on_a_2000_stage_chain_says_it_takes_minutes_before_it_starts() {
    // Allowed (within the ten-minute policy), but 318 s without a word
    // before: the note comes first, with what answers sooner.
    let dir = tempfile::tempdir().unwrap();
    let chain = distinct_chain(dir.path(), 2000);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
        .args(["min-memory", chain.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("note: the smallest auto budget of this 2000-stage chain takes about"), "{stderr}");
    assert!(stderr.contains("--algorithm chen-sqrt answers at once"), "{stderr}");
    // A short chain gets no note, nor 2,000 identical stages: the min-peak
    // pass fills each distinct sub-chain once (issue 25), about a second.
    let short = long_chain(dir.path(), 50);
    remat().args(["min-memory", short.to_str().unwrap()]).assert().success().stderr(contains("note:").not());
    let repeated = long_chain(dir.path(), 2000);
    remat().args(["min-memory", repeated.to_str().unwrap()]).assert().success().stderr(contains("note:").not());
}

/// A chain of `len` stages whose figures differ from one stage to the next.
fn distinct_chain(dir: &Path, len: usize) -> PathBuf {
    let stages: Vec<String> = (0..len)
        .map(|i| {
            format!(
                r#"{{"forward_time": {}, "backward_time": {}, "output_size": {}, "saved_size": {}}}"#,
                1 + i % 7,
                2 + i % 5,
                100 + i % 97,
                200 + i % 89
            )
        })
        .collect();
    write(
        dir,
        &format!("distinct{len}.json"),
        &format!(r#"{{"name": "d", "input_size": 1000, "stages": [{}]}}"#, stages.join(", ")),
    )
}

/// A chain of zero sizes at a budget of u64::MAX bytes with one slot: the
/// exact fronts reach a sub-problem cap of usize::MAX, and the end of a split's range saturates
/// there instead of overflowing (found by tests/suite/fuzz.rs once `uniform` shifted
/// its choice of algorithm).
#[test]
fn persistent_fronts_at_the_largest_budget() {
    let chain = remat::Chain::from_json(
        r#"{"name": "fuzz", "input_size": 0, "stages": [{"forward_time": 0, "backward_time": 0, "output_size": 0, "saved_size": 0}]}"#,
    )
    .unwrap();
    let opts = remat::SolveOptions { slots: std::num::NonZeroUsize::MIN, ..remat::SolveOptions::default() };
    let s = remat::solve(&chain, u64::MAX, remat::Algorithm::Persistent, &opts).unwrap();
    assert_eq!((s.schedule.makespan, s.schedule.peak_memory), (0.0, 0));
}
