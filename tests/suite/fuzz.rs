//! A structure-aware fuzzing harness for remat's promise (issue 15): for any
//! input, a clear error (bad input), an infeasible verdict naming a budget that
//! then works, or a schedule that replays within the budget; never a panic, a
//! hang or a schedule over budget.
//!
//! proptest generates chains, graphs, schedules and option values as JSON text
//! (so the parsers are fuzzed too), from well-formed ones to hostile ones:
//! extreme times (up to 1e308) and sizes (up to u64::MAX), zero sizes, names
//! that collide, stages as arrays, trailing data, truncated text. Most cases go
//! through the library (fast); every 40th chain case also runs the `remat`
//! binary, whose exit code must be 0, 1 or 2, whose schedule must replay within
//! the budget and whose infeasible verdict must name a budget that `remat
//! solve` then meets. The run prints its counts by outcome.
//!
//! Issue 27 widened it: `mincut` on generated joint graphs (sizes up to near
//! 2^62, random and banned ops; budgets, Pareto fronts under a time limit,
//! every 25th through the binary), notation with runs too long to hold, and
//! SIGKILLs during writes (the old file or the whole new one, never a torn
//! one, and no temporary file after the next write). The Python API's
//! hostile arguments are fuzzed in python/tests/test_hardening.py.
//!
//! `REMAT_FUZZ_CASES` sets the number of chain cases (default 10,000; graphs
//! get a twentieth, schedules and joint graphs a tenth, kills a hundredth on
//! top).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use remat::problem::{Options, Problem};
use remat::solve::{Algorithm, SolveError, SolveOptions};
use remat::{Chain, simulate_within};

/// The longest a single case may take before it counts as a hang. Not a
/// performance test: cases take milliseconds; this only turns a hang into a
/// failure with the input that caused it.
const HANG: Duration = Duration::from_secs(60);

/// Counts by outcome, printed at the end.
static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn count(what: impl Into<String>) {
    *COUNTS.lock().unwrap().entry(what.into()).or_default() += 1;
}

fn cases() -> u32 {
    std::env::var("REMAT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

/// A deterministic runner: the same cases on every run, so CI is reproducible
/// (set `PROPTEST_RNG_SEED`-like variation by changing `seed`).
fn runner(cases: u32, seed: u8) -> TestRunner {
    let config = Config { cases, failure_persistence: None, max_shrink_iters: 200, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]))
}

/// A time as JSON text: ordinary, zero, tiny, huge, or invalid.
fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        60 => (0.0f64..100.0).prop_map(|t| format!("{t}")),
        3 => Just("0".to_string()),
        1 => prop_oneof![Just("1e-300"), Just("1e300"), Just("1e308"), Just("1.7976931348623157e308"), Just("-1"),
                         Just("1e999"), Just("\"1\""), Just("null")]
            .prop_map(str::to_string),
    ]
}

/// A size as JSON text: small, large, extreme or invalid.
fn size() -> impl Strategy<Value = String> {
    prop_oneof![
        50 => (0u64..1000).prop_map(|s| s.to_string()),
        10 => (0u64..(1 << 40)).prop_map(|s| s.to_string()),
        1 => prop_oneof![Just("0"), Just("18446744073709551615"), Just("9223372036854775808"), Just("-5"),
                         Just("1.5"), Just("18446744073709551616")]
            .prop_map(str::to_string),
    ]
}

/// One stage as JSON text: an object with the required fields and some
/// optional ones, occasionally with a field missing, unknown, or as an array.
fn stage_text() -> impl Strategy<Value = String> {
    (
        time(),
        time(),
        size(),
        size(),
        proptest::option::weighted(0.3, size()),
        proptest::option::weighted(0.2, size()),
        proptest::option::weighted(0.2, size()),
        proptest::option::weighted(0.2, prop_oneof![Just("loss"), Just("stage 2"), Just("a"), Just("")]),
        0u8..200,
    )
        .prop_map(|(f, b, out, saved, grad, of, ob, name, shape)| {
            let mut fields = vec![
                format!("\"forward_time\": {f}"),
                format!("\"backward_time\": {b}"),
                format!("\"output_size\": {out}"),
                format!("\"saved_size\": {saved}"),
            ];
            if let Some(g) = grad {
                fields.push(format!("\"gradient_size\": {g}"));
            }
            if let Some(o) = of {
                fields.push(format!("\"forward_overhead\": {o}"));
            }
            if let Some(o) = ob {
                fields.push(format!("\"backward_overhead\": {o}"));
            }
            if let Some(n) = name {
                fields.push(format!("\"name\": \"{n}\""));
            }
            match shape {
                0 => format!("[{f}, {b}, {out}, {saved}]"), // positional: must be rejected
                1 => format!("{{{}}}", fields[1..].join(", ")), // forward_time missing
                2 => format!("{{{}, \"extra\": 1}}", fields.join(", ")),
                _ => format!("{{{}}}", fields.join(", ")),
            }
        })
}

/// A whole chain file as text, with occasional damage after or inside it.
fn chain_text() -> impl Strategy<Value = String> {
    (size(), proptest::collection::vec(stage_text(), 0..10), proptest::option::weighted(0.3, stage_text()), 0u8..100)
        .prop_map(|(input, stages, loss, damage)| {
            let loss = loss.map(|l| format!(", \"loss\": {l}")).unwrap_or_default();
            let text =
                format!("{{\"name\": \"fuzz\", \"input_size\": {input}, \"stages\": [{}]{loss}}}", stages.join(", "));
            match damage {
                0 => format!("{text} trailing"),
                1 => format!("{text}{text}"),
                2 => text[..text.len() / 2].to_string(),
                3 => text.replace("\"stages\"", "\"stage\""),
                _ => text,
            }
        })
}

/// A budget: a fraction of the chain's store-all peak, or an extreme.
fn budget_for(chain: &Chain, pick: u8, frac: f64) -> u64 {
    let n = chain.len() + 1;
    let store_all: Vec<remat::Op> =
        (1..=n).map(|l| remat::Op::FAll(l, 0)).chain((1..=n).rev().map(remat::Op::B)).collect();
    let peak = remat::simulate(chain, &store_all).map(|r| r.peak_memory).unwrap_or(u64::MAX);
    match pick {
        0 => 0,
        1 => u64::MAX,
        2 => peak,
        _ => (peak as f64 * frac) as u64,
    }
}

fn algorithm(pick: u8) -> Algorithm {
    Algorithm::ALL[pick as usize % Algorithm::ALL.len()]
}

fn slots(pick: u8) -> usize {
    [1, 2, 7, 50, 500, 500, 500, 1_000_000_000, usize::MAX][pick as usize % 9]
}

/// The most table memory a case may use: the guard allows tables up to half
/// the machine's memory, which a test run shared with other builds must not
/// take. (Refusals above the limit are covered by the guard's own tests.)
const MAX_TABLE: u64 = 256 << 20;

/// True when solving would build a table over [`MAX_TABLE`] that the guard
/// allows (by the estimates the solvers use; for floating, whose exact
/// estimate needs its plan, any upper estimate over [`MAX_TABLE`]).
fn big_table(chain: &Chain, budget: u64, alg: Algorithm, opts: &SolveOptions) -> bool {
    let m = remat::slots::Slots::new(budget, opts.slots.get()).capacity;
    let floating = chain.len() <= remat::solve::floating::MAX_STAGES
        && remat::solve::floating::upper_estimate(chain.len(), m).table_bytes > MAX_TABLE;
    // Over the guard's limit is fine: that is refused before allocation.
    let limit = remat::machine::memory_limit();
    let dp = remat::solve::memory_estimate(chain, budget, alg, opts).is_some_and(|b| b > MAX_TABLE && b <= limit);
    dp || (floating && matches!(alg, Algorithm::Floating | Algorithm::Auto))
}

/// Runs one chain case through the library and checks the promise.
fn check_chain_case(text: &str, alg: Algorithm, slots: usize, pick: u8, frac: f64) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let chain = match Chain::from_json(text) {
        Ok(c) => c,
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            count("chain: rejected at read (exit 2)");
            return Ok(());
        }
    };
    let budget = budget_for(&chain, pick, frac);
    let opts = SolveOptions { slots: std::num::NonZeroUsize::new(slots.max(1)).unwrap(), ..SolveOptions::default() };
    if big_table(&chain, budget, alg, &opts) {
        count("chain: skipped, table over 256 MiB allowed by the guard");
        return Ok(());
    }
    match remat::solve(&chain, budget, alg, &opts) {
        Ok(sol) => {
            let replay = simulate_within(&chain, &sol.schedule.operations, budget);
            prop_assert!(replay.is_ok(), "{alg} schedule over budget {budget}: {replay:?}\n{text}");
            prop_assert_eq!(replay.unwrap().peak_memory, sol.schedule.peak_memory);
            prop_assert!(sol.schedule.makespan.is_finite());
            count("chain: solved, replayed within budget (exit 0)");
        }
        Err(SolveError::Infeasible { min_budget: Some(m), .. }) => {
            prop_assert!(m > budget, "{alg}: min budget {m} not above {budget}\n{text}");
            if big_table(&chain, m, alg, &opts) {
                count("chain: infeasible, named budget not re-solved (table over 256 MiB)");
                return Ok(());
            }
            match remat::solve(&chain, m, alg, &opts) {
                Ok(_) => count("chain: infeasible, named budget works (exit 1)"),
                Err(e) => prop_assert!(false, "{alg}: named budget {m} fails: {e}\n{text}"),
            }
        }
        Err(SolveError::Infeasible { min_budget: None, .. }) => count("chain: infeasible, no budget works (exit 1)"),
        Err(e @ (SolveError::Rejected { .. } | SolveError::Mispredicted { .. })) => {
            prop_assert!(false, "{alg} at {budget} with {slots} slots: {e}\n{text}");
        }
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            count("chain: refused (too large or bad options, exit 2)");
        }
    }
    prop_assert!(start.elapsed() < HANG, "{alg} took {:?}\n{text}", start.elapsed());
    if std::env::var("REMAT_FUZZ_SLOW").is_ok() && start.elapsed() > Duration::from_millis(300) {
        eprintln!("slow: {:?} {alg} slots {slots} budget {budget}: {text}", start.elapsed());
    }
    Ok(())
}

/// Runs one chain case through the binary: exit 0, 1 or 2 only, no panic; the
/// schedule replays within the budget; an infeasible verdict names a budget
/// that the same command then meets.
fn check_chain_binary(dir: &std::path::Path, text: &str, alg: Algorithm, slots: usize, budget: u64) {
    let path = dir.join("chain.json");
    std::fs::write(&path, text).unwrap();
    let run = |budget: u64| {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"));
        cmd.args(["solve", path.to_str().unwrap(), "--json", "-a", alg.name()])
            .arg(format!("--memory={budget}"))
            .arg(format!("--slots={slots}"));
        cmd.output().unwrap()
    };
    let out = run(budget);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(matches!(code, Some(0..=2)), "exit {code:?} for {alg} {slots} {budget}: {stderr}\n{text}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let chain = Chain::from_json(text);
    match code {
        Some(0) => {
            let ops = remat::schedule::parse_operations(&String::from_utf8_lossy(&out.stdout)).unwrap();
            simulate_within(&chain.unwrap(), &ops, budget).unwrap();
            count("binary: exit 0, schedule replayed within budget");
        }
        Some(1) => {
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            match json["min_budget"].as_u64() {
                Some(m)
                    if big_table(
                        chain.as_ref().unwrap(),
                        m,
                        alg,
                        &SolveOptions {
                            slots: std::num::NonZeroUsize::new(slots.max(1)).unwrap(),
                            ..SolveOptions::default()
                        },
                    ) =>
                {
                    count("binary: exit 1, named budget not re-run (table over 256 MiB)");
                }
                Some(m) => {
                    let again = run(m);
                    let stderr = String::from_utf8_lossy(&again.stderr);
                    assert_eq!(again.status.code(), Some(0), "named budget {m} fails: {stderr}\n{text}");
                    count("binary: exit 1, named budget then exit 0");
                }
                None => count("binary: exit 1, no budget works"),
            }
        }
        _ => {
            assert!(stderr.contains("error: "), "{stderr}");
            count("binary: exit 2 with an error message");
        }
    }
}

#[test]
fn chains_keep_the_promise() {
    let dir = tempfile::tempdir().unwrap();
    let n = cases();
    let strategy = (chain_text(), any::<u8>(), any::<u8>(), 0u8..8, 0.0f64..1.2, any::<u16>());
    let mut runner = runner(n, 15);
    runner
        .run(&strategy, |(text, alg, sl, pick, frac, sample)| {
            let (alg, slots) = (algorithm(alg), slots(sl));
            check_chain_case(&text, alg, slots, pick, frac)?;
            let parsed = Chain::from_json(&text);
            let opts =
                SolveOptions { slots: std::num::NonZeroUsize::new(slots.max(1)).unwrap(), ..SolveOptions::default() };
            let big = parsed.as_ref().is_ok_and(|c| big_table(c, budget_for(c, pick, frac), alg, &opts));
            if sample % 40 == 0 && !big {
                let budget = parsed.map_or(1 << 20, |c| budget_for(&c, pick, frac));
                // The binary takes at most 10^9 slots: other values test its parser.
                check_chain_binary(dir.path(), &text, alg, slots, budget);
            }
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// A small DAG as a forward-graph file: node i reads some earlier nodes.
fn graph_text() -> impl Strategy<Value = String> {
    proptest::collection::vec((time(), time(), size(), size(), any::<u8>(), 0u8..30), 1..7).prop_map(|nodes| {
        let items: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, (f, b, out, saved, reads, shape))| {
                let inputs: Vec<String> = (0..i).filter(|j| reads >> (j % 8) & 1 == 1 || *j + 1 == i).map(|j| format!("\"n{j}\"")).collect();
                match shape {
                    0 => format!("[\"n{i}\", [{}], {f}, {b}, {out}, {saved}]", inputs.join(", ")),
                    1 => format!("{{\"name\": \"n0\", \"inputs\": [], \"forward_time\": {f}, \"backward_time\": {b}, \"output_size\": {out}, \"saved_size\": {saved}}}"),
                    _ => format!(
                        "{{\"name\": \"n{i}\", \"inputs\": [{}], \"forward_time\": {f}, \"backward_time\": {b}, \"output_size\": {out}, \"saved_size\": {saved}}}",
                        inputs.join(", ")
                    ),
                }
            })
            .collect();
        format!("{{\"name\": \"g\", \"input_size\": 10, \"nodes\": [{}]}}", items.join(", "))
    })
}

#[test]
fn graphs_keep_the_promise() {
    // Each graph case may build and solve a MILP: a twentieth as many.
    let n = (cases() / 20).max(1);
    let strategy = (graph_text(), 0u8..3, any::<u64>());
    let mut runner = runner(n, 16);
    runner
        .run(&strategy, |(text, alg, budget)| {
            let start = Instant::now();
            let problem = match Problem::from_json(&text, "fuzz") {
                Ok(p) => p,
                Err(_) => {
                    count("graph: rejected at read (exit 2)");
                    return Ok(());
                }
            };
            let budget = budget % (1 << 12);
            let alg = [
                remat::problem::Method::Chain(Algorithm::Auto),
                remat::problem::Method::Graph(remat::graph::GraphAlgorithm::Checkmate),
                remat::problem::Method::Graph(remat::graph::GraphAlgorithm::CheckmateApprox),
            ][alg as usize];
            let opts = Options {
                chain: SolveOptions::default(),
                milp: remat::graph::milp::MilpOptions {
                    time_limit: Some(Duration::from_secs(2)),
                    ..Default::default()
                },
            };
            match remat::problem::solve(&problem, budget, alg, &opts) {
                Ok(remat::problem::Outcome::Graph { graph, solution, .. }) => {
                    let replay = remat::graph::simulate_within(&graph, &solution.schedule.operations, budget);
                    prop_assert!(replay.is_ok(), "{alg}: {replay:?}\n{text}");
                    count("graph: solved, replayed within budget (exit 0)");
                }
                Ok(remat::problem::Outcome::Chain { chain, solution, .. }) => {
                    prop_assert!(simulate_within(&chain, &solution.schedule.operations, budget).is_ok());
                    count("graph: solved as a chain, replayed within budget (exit 0)");
                }
                Err(e) => {
                    let text_e = e.to_string();
                    prop_assert!(!text_e.contains("internal error"), "{text_e}\n{text}");
                    count(format!(
                        "graph: {} (exit 1 or 2)",
                        if text_e.starts_with("no ") { "infeasible" } else { "error" }
                    ));
                }
            }
            prop_assert!(start.elapsed() < HANG);
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// Schedules in every accepted form, valid or not, against a fixed chain.
#[test]
fn schedules_keep_the_promise() {
    let chain = Chain::from_json(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/chains/rotor-fc6.json")).unwrap(),
    )
    .unwrap();
    let token = prop_oneof![
        40 => (1usize..9).prop_map(|l| format!("F_all^{l}")),
        40 => (1usize..9).prop_map(|l| format!("F_ck^{l}")),
        40 => (1usize..9).prop_map(|l| format!("F_none^{l}")),
        40 => (0usize..9).prop_map(|l| format!("B^{l}")),
        40 => (0usize..9, 0usize..9).prop_map(|(a, b)| format!("B^{a}..{b}")),
        10 => Just("F_all^18446744073709551615".to_string()),
        10 => Just("B^1..18446744073709551615".to_string()),
        // Issue 27: runs too long to hold, refused before they are expanded.
        1 => Just("F_none^1..18446744073709551615".to_string()),
        1 => Just("F_ck^1..100000000".to_string()),
        1 => Just("F_all^2..16777300".to_string()),
        10 => Just("junk".to_string()),
    ];
    let strategy = (proptest::collection::vec(token, 0..30), 0u8..4);
    let mut runner = runner((cases() / 10).max(1), 17);
    runner
        .run(&strategy, |(tokens, form)| {
            let text = match form {
                0 => tokens.join(" "),
                1 => format!("[{}]", tokens.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(", ")),
                2 => format!("{} trailing", tokens.join(",")),
                _ => format!("[\"{}\"] []", tokens.join("\", \"")),
            };
            let start = Instant::now();
            let parsed = remat::schedule::parse_operations(&text);
            prop_assert!(start.elapsed() < Duration::from_secs(10), "{:?} to parse\n{text}", start.elapsed());
            match parsed {
                Ok(ops) => match remat::simulate(&chain, &ops) {
                    Ok(r) => {
                        prop_assert!(r.makespan.is_finite());
                        count("schedule: parsed and valid");
                    }
                    Err(_) => count("schedule: parsed, rejected by the simulator (exit 2)"),
                },
                Err(_) => count("schedule: rejected at read (exit 2)"),
            }
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// A joint (forward + backward) graph as JSON text, for `remat mincut`: a
/// forward chain with skips and random op classes (random ops, banned nodes,
/// tuples), a backward chain reading it; sizes small, near 2^48 or huge.
fn joint_text() -> impl Strategy<Value = String> {
    let node = (0u8..8, any::<u8>(), 0u8..6, 0u64..(1 << 20), 0u8..12);
    (proptest::collection::vec(node, 1..25), 0u8..4).prop_map(|(forward, scale)| {
        let n = forward.len();
        let bytes = |b: u64, i: usize| match scale {
            0 => b,
            1 => (1u64 << 48) - (b % 1000) - i as u64,
            2 => (1u64 << 62) / 64 + b,
            _ => b % 7,
        };
        let mut nodes = Vec::with_capacity(n);
        for (i, &(op, skip, extra, b, flags)) in forward.iter().enumerate() {
            let i = i + 1;
            let mut inputs = vec![if i == 1 { "\"x\"".to_string() } else { format!("\"f{}\"", i - 1) }];
            if i > 2 && skip % 3 == 0 {
                inputs.push(format!("\"f{}\"", 1 + skip as usize % (i - 2)));
            }
            let op = ["pointwise", "pointwise", "compute_intensive", "reduction", "view", "random", "other", "pointwise"]
                [op as usize];
            let flops = if op == "compute_intensive" { format!(r#", "flops": {}"#, 1 + b * 1000) } else { String::new() };
            let banned = if flags == 0 { r#", "banned": true"# } else { "" };
            let _ = extra;
            nodes.push(format!(
                r#"{{"name": "f{i}", "role": "forward", "op": "{op}", "inputs": [{}], "shape": [4], "dtype": "float32", "bytes": {}{flops}{banned}}}"#,
                inputs.join(", "),
                bytes(b, i)
            ));
        }
        common::joint_graph_json("fuzz", 4096, nodes)
    })
}

/// Issue 27's surface: `mincut` on generated joint graphs, at budgets from 0
/// to past the largest, and its Pareto front under a time limit. Every answer
/// fits its budget, an infeasible verdict names a budget that then works,
/// and the solver never fails (it used to exit 70 near 2^48). Every 25th
/// case also runs the binary (exit 0, 1 or 2, no panic).
#[test]
fn joint_graphs_keep_the_promise() {
    use remat::joint::budget::BudgetOptions;
    use remat::joint::{BudgetError, OperatorGraph};
    let dir = tempfile::tempdir().unwrap();
    let n = (cases() / 10).max(1);
    let strategy = (joint_text(), 0u8..6, 0.0f64..1.5, any::<u8>());
    let mut runner = runner(n, 18);
    let options = BudgetOptions { time_limit: Some(2.0) };
    runner
        .run(&strategy, |(text, pick, frac, sample)| {
            let start = Instant::now();
            let graph = match OperatorGraph::from_json(&text) {
                Ok(g) => g,
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    count("joint: rejected at read (exit 2)");
                    return Ok(());
                }
            };
            let free = remat::joint::partition_with(&graph, None, &options)
                .map_err(|e| TestCaseError::fail(format!("min-cut failed: {e}\n{text}")))?;
            let (smallest, all) = (free.smallest_budget, free.save_all.activation_bytes);
            let memory = match pick {
                0 => 0,
                1 => u64::MAX,
                2 => smallest,
                3 => smallest.saturating_sub(1),
                _ => (all as f64 * frac) as u64,
            };
            match remat::joint::partition_with(&graph, Some(memory), &options) {
                Ok(answer) => {
                    prop_assert!(
                        answer.chosen.activation_bytes <= memory,
                        "{} over {memory}\n{text}",
                        answer.chosen.activation_bytes
                    );
                    count("joint: within budget (exit 0)");
                }
                Err(BudgetError::Infeasible { budget, smallest: named }) => {
                    prop_assert!(named > budget);
                    let again = remat::joint::partition_with(&graph, Some(named), &options);
                    prop_assert!(again.is_ok(), "named budget {named} fails: {again:?}\n{text}");
                    count("joint: infeasible, named budget works (exit 1)");
                }
                Err(e) => prop_assert!(false, "solver failed at {memory}: {e}\n{text}"),
            }
            if sample % 8 == 0 {
                let (front, _) = remat::joint::pareto_with(&graph, 50, &BudgetOptions { time_limit: Some(1.0) })
                    .map_err(|e| TestCaseError::fail(format!("pareto failed: {e}\n{text}")))?;
                prop_assert!(front.windows(2).all(|w| w[1].0.activation_bytes < w[0].0.activation_bytes));
                count("joint: pareto front, bytes strictly falling");
            }
            if sample % 25 == 0 {
                let path = dir.path().join("joint.json");
                std::fs::write(&path, &text).unwrap();
                let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
                    .args(["mincut", path.to_str().unwrap(), "--json", "--time-limit", "2"])
                    .arg(format!("--memory={memory}"))
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                prop_assert!(
                    matches!(out.status.code(), Some(0..=2)),
                    "exit {:?}: {stderr}\n{text}",
                    out.status.code()
                );
                prop_assert!(!stderr.contains("panicked"), "{stderr}");
                count(format!("joint binary: exit {}", out.status.code().unwrap()));
            }
            prop_assert!(start.elapsed() < HANG, "{:?}\n{text}", start.elapsed());
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// Kills during writes (issue 27): `remat zoo ... -o FILE` killed with
/// SIGKILL at spread-out moments. The target is always the old file or the
/// whole new one, and the next write leaves no temporary file behind.
#[cfg(target_os = "linux")]
#[test]
fn kills_during_writes_lose_nothing_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("graph.json");
    let remat = assert_cmd::cargo::cargo_bin("remat");
    let write = |name: &str| {
        let status = std::process::Command::new(&remat)
            .args(["zoo", name, "--graph", "layers", "-o"])
            .arg(&out)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    };
    write("resnet18");
    let mut old = std::fs::read_to_string(&out).unwrap();
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[19; 32]);
    let kills = (cases() / 100).max(10);
    for _ in 0..kills {
        let name = ["resnet1001", "densenet201", "resnet152"][rng.random_range(0..3usize)];
        let mut child = std::process::Command::new(&remat)
            .args(["zoo", name, "--graph", "layers", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.random_range(0..30_000u64)));
        let _ = child.kill();
        let finished = child.wait().unwrap().success();
        let text = std::fs::read_to_string(&out).unwrap();
        if text == old {
            count(if finished { "kill: too late, the same file written again" } else { "kill: old file intact" });
        } else {
            assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok(), "a torn file");
            count("kill: new file complete");
            old = text;
        }
        let left = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"))
            .count();
        if left > 0 {
            count("kill: temporary file left, for the next write to remove");
        }
    }
    write("resnet18");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    count("kill: next write left no temporary file");
    print_counts();
}

/// Issue 36's surface: a chain file with recording options, transients,
/// gradients unlike outputs and, now and then, a size near 2^60, valid in
/// most cases (what pipelines, micro-batches in flight and schedules with
/// options are fuzzed on).
fn option_chain_text() -> impl Strategy<Value = String> {
    let size = prop_oneof![
        40 => 1u64..2000,
        4 => 0u64..1,
        2 => (1u64 << 59)..(1u64 << 60),
    ];
    let option = (size.clone(), 0.0f64..3.0, 0u64..300);
    let stage = (
        0.0f64..10.0,
        0.0f64..20.0,
        size.clone(),
        0u64..2000,
        proptest::option::weighted(0.3, size.clone()),
        0u64..500,
        0u64..500,
        proptest::collection::vec(option, 0..3),
    );
    (size.clone(), proptest::collection::vec(stage, 1..7), proptest::option::weighted(0.5, (0.0f64..2.0, size)))
        .prop_map(|(input, stages, loss)| {
            let stages: Vec<String> = stages
                .iter()
                .map(|(f, b, out, extra, grad, of, ob, options)| {
                    let mut fields = vec![
                        format!("\"forward_time\": {f}"),
                        format!("\"backward_time\": {b}"),
                        format!("\"output_size\": {out}"),
                        format!("\"saved_size\": {}", out.saturating_add(*extra)),
                        format!("\"forward_overhead\": {of}"),
                        format!("\"backward_overhead\": {ob}"),
                    ];
                    if let Some(g) = grad {
                        fields.push(format!("\"gradient_size\": {g}"));
                    }
                    if !options.is_empty() {
                        let options: Vec<String> = options
                            .iter()
                            .map(|(saved, r, o)| {
                                format!(
                                    "{{\"saved_size\": {}, \"recompute_time\": {r}, \"backward_overhead\": {o}}}",
                                    out.saturating_add(saved % 1000)
                                )
                            })
                            .collect();
                        fields.push(format!("\"options\": [{}]", options.join(", ")));
                    }
                    format!("{{{}}}", fields.join(", "))
                })
                .collect();
            let loss = loss
                .map(|(t, size)| {
                    format!(", \"loss\": {{\"forward_time\": {t}, \"output_size\": {size}, \"saved_size\": {size}}}")
                })
                .unwrap_or_default();
            format!("{{\"name\": \"fuzz\", \"input_size\": {input}, \"stages\": [{}]{loss}}}", stages.join(", "))
        })
}

/// What a schedule holds, replayed from the model's rules by hand, apart
/// from `remat::simulate`: the stages `first..=last` of `chain` (a pipeline
/// rank; `1..=L` for the whole chain), whose input is a^{first-1} with
/// gradient delta^{first-1} and whose loss is the chain's on the last rank,
/// a zero loss elsewhere. Returns (peak, residue): the most bytes while an
/// operation runs, and the bytes stored just before the first backward.
/// Only for schedules `remat::simulate` accepted (it panics on others).
fn hand_replay(chain: &Chain, first: usize, last: usize, ops: &[remat::Op]) -> (u128, u128) {
    let len = last - first + 1;
    let n = len + 1;
    let whole = last == chain.len();
    // Stage l of the rank (1..=n) is stage first - 1 + l of the chain; its loss is n.
    let stage = |l: usize| if l == n && !whole { None } else { Some(first - 1 + l) };
    let output = |l: usize| -> u128 {
        if l == 0 { chain.output_size(first - 1).into() } else { stage(l).map_or(0, |g| chain.output_size(g).into()) }
    };
    let gradient = |l: usize| -> u128 {
        if l == 0 {
            chain.gradient_size(first - 1).into()
        } else {
            stage(l).map_or(0, |g| chain.gradient_size(g).into())
        }
    };
    let recording = |l: usize, o: usize| stage(l).map(|g| chain.recording(g, o));
    let forward_overhead = |l: usize| -> u128 { stage(l).map_or(0, |g| chain.forward_overhead(g).into()) };
    // held[l]: None absent, Some(None) plain, Some(Some(o)) saved with option o.
    let mut held: Vec<Option<Option<usize>>> = vec![None; n + 1];
    held[0] = Some(None);
    let mut grad = n;
    let stored = |held: &[Option<Option<usize>>], grad: usize| -> u128 {
        let mut total = gradient(grad);
        for (l, h) in held.iter().enumerate() {
            total += match h {
                None => 0,
                Some(None) => output(l),
                Some(Some(o)) => recording(l, *o).map_or(0, |r| r.saved_size.into()),
            };
        }
        total
    };
    let (mut peak, mut residue) = (stored(&held, grad), None);
    for &op in ops {
        let base = stored(&held, grad);
        let during = match op {
            remat::Op::FNone(l) => {
                assert_eq!(held[l - 1], Some(None), "{op}");
                held[l - 1] = None;
                held[l] = Some(None);
                base + output(l) + forward_overhead(l)
            }
            remat::Op::FCk(l) => {
                held[l] = Some(None);
                base + output(l) + forward_overhead(l)
            }
            remat::Op::FAll(l, o) => {
                held[l] = Some(Some(o));
                let r = recording(l, o);
                base + r.map_or(0, |r| u128::from(r.saved_size) + u128::from(r.forward_overhead))
            }
            remat::Op::B(l) => {
                assert_eq!(l, grad, "{op}");
                if residue.is_none() {
                    residue = Some(base);
                }
                let Some(Some(o)) = held[l] else { panic!("{op} without abar^{l}") };
                let r = recording(l, o);
                held[l] = None;
                if held[l - 1] == Some(None) {
                    held[l - 1] = None;
                }
                grad = l - 1;
                base + gradient(l - 1) + r.map_or(0, |r| u128::from(r.backward_overhead))
            }
        };
        peak = peak.max(during);
    }
    (peak, residue.unwrap_or(0))
}

/// A count of micro-batches: ordinary, the largest allowed, or past it.
fn micro_batches(pick: u8) -> u64 {
    let max = remat::solve::MAX_IN_FLIGHT as u64;
    [1, 2, 3, 4, 8, 2, 3, 0, max, max + 1, u64::MAX][pick as usize % 11]
}

/// Issue 36: pipelines. Every plan of `remat::report::pipeline::plan` on a
/// generated chain, split and micro-batch count: each rank's schedule
/// replayed by hand on the rank's stages (its input's gradient the previous
/// stage's) has the peak and residue the planner says, and its rank peak,
/// recomputed exactly, is within the rank's budget; every 12th also through
/// `remat pipeline --json`, whose ranks are checked the same way (exit 0,
/// 1 or 2, never a panic).
#[test]
fn pipelines_keep_the_promise() {
    use remat::report::pipeline::{PipelineSchedule, balanced_split, plan};
    let dir = tempfile::tempdir().unwrap();
    let n = (cases() / 20).max(1);
    let strategy = (option_chain_text(), 1usize..5, any::<u8>(), any::<bool>(), 0u8..6, 0.0f64..1.5, any::<u8>());
    let mut runner = runner(n, 36);
    runner
        .run(&strategy, |(text, ranks, pick, gpipe, memory_pick, frac, sample)| {
            let start = Instant::now();
            let Ok(chain) = Chain::from_json(&text) else {
                count("pipeline: chain rejected at read (exit 2)");
                return Ok(());
            };
            let ranks = ranks.min(chain.len());
            let m = micro_batches(pick);
            let schedule = if gpipe { PipelineSchedule::GPipe } else { PipelineSchedule::OneFOneB };
            let split = balanced_split(&chain, ranks).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let opts = SolveOptions::default();
            let budgets: Option<Vec<u64>> = match memory_pick {
                0 => Some(vec![0]),
                1 => Some(vec![u64::MAX]),
                2 | 3 => None,
                _ => Some(vec![(reference_peak(&chain) as f64 * frac) as u64]),
            };
            let m_usize = usize::try_from(m).unwrap_or(usize::MAX);
            match plan(&chain, &split, schedule, m_usize, budgets.as_deref(), &opts) {
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    count("pipeline: refused (micro-batches out of range or a bad split, exit 2)");
                }
                Ok(p) => {
                    for (k, r) in p.ranks.iter().enumerate() {
                        let (first, last) = (*r.stages.start(), *r.stages.end());
                        let expect = schedule.in_flight(k, ranks, m_usize);
                        prop_assert_eq!(r.in_flight, expect);
                        let others = r.in_flight as u128 - 1;
                        let e = &r.every_block;
                        let (peak, residue) = hand_replay(&chain, first, last, &e.schedule.operations);
                        prop_assert_eq!(peak, u128::from(e.replay.peak_memory), "every block, rank {}\n{}", k, text);
                        prop_assert_eq!(residue, u128::from(e.replay.residue()));
                        match &r.remat {
                            Ok(s) => {
                                let (peak, residue) = hand_replay(&chain, first, last, &s.schedule.operations);
                                prop_assert_eq!(peak, u128::from(s.replay.peak_memory), "rank {}\n{}", k, text);
                                let rank_peak = peak + others * residue;
                                prop_assert!(rank_peak <= u128::from(p.budgets[k]), "rank {k}: {rank_peak}\n{text}");
                                count("pipeline: rank planned, rank peak recomputed within its budget");
                            }
                            Err(SolveError::Infeasible { .. }) => {
                                count("pipeline: rank infeasible at its budget (exit 1)")
                            }
                            Err(e @ (SolveError::Rejected { .. } | SolveError::Mispredicted { .. })) => {
                                prop_assert!(false, "rank {k}: {e}\n{text}");
                            }
                            Err(_) => count("pipeline: rank refused (too large, exit 2)"),
                        }
                    }
                }
            }
            if sample % 12 == 0 {
                let path = dir.path().join("chain.json");
                std::fs::write(&path, &text).unwrap();
                let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"));
                cmd.args(["pipeline", path.to_str().unwrap(), "--json", "--ranks", &ranks.to_string()]).args([
                    "--micro-batches",
                    &m.to_string(),
                    "--schedule",
                    if gpipe { "gpipe" } else { "1f1b" },
                ]);
                if let Some(b) = &budgets {
                    cmd.arg(format!("--memory={}", b[0]));
                }
                let out = cmd.output().unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                let code = out.status.code();
                prop_assert!(matches!(code, Some(0..=2)), "exit {code:?}: {stderr}\n{text}");
                prop_assert!(!stderr.contains("panicked"), "{stderr}");
                if code != Some(2) {
                    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    for r in v["ranks"].as_array().unwrap() {
                        if r["plan"]["status"] != "solved" {
                            continue;
                        }
                        let ops: Vec<remat::Op> =
                            serde_json::from_value(r["plan"]["schedule"]["operations"].clone()).unwrap();
                        let (first, last) =
                            (r["first_stage"].as_u64().unwrap() as usize, r["last_stage"].as_u64().unwrap() as usize);
                        let (peak, residue) = hand_replay(&chain, first, last, &ops);
                        let rank_peak = peak + (r["in_flight"].as_u64().unwrap() as u128 - 1) * residue;
                        prop_assert_eq!(r["plan"]["rank_peak"].as_u64().map(u128::from), Some(rank_peak), "{}", text);
                        prop_assert!(rank_peak <= u128::from(r["budget"].as_u64().unwrap()));
                    }
                    count(format!("pipeline binary: exit {}, ranks recomputed", code.unwrap()));
                } else {
                    prop_assert!(stderr.contains("error: "), "{stderr}");
                    count("pipeline binary: exit 2 with an error message");
                }
            }
            prop_assert!(start.elapsed() < HANG, "{:?}\n{text}", start.elapsed());
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// Store-all's peak of `chain`, by hand (every forward recorded, then every
/// backward), saturated to a u64 for picking budgets.
fn reference_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<remat::Op> = (1..=n).map(|l| remat::Op::FAll(l, 0)).chain((1..=n).rev().map(remat::Op::B)).collect();
    u64::try_from(hand_replay(chain, 1, chain.len(), &ops).0).unwrap_or(u64::MAX)
}

/// Issue 36: micro-batches in flight. Every algorithm with 1 to 8
/// micro-batches in flight (and counts past the limit) on generated chains
/// with options: a schedule's rank peak, recomputed by hand, is within the
/// budget and the schedule records its residue; an infeasible verdict names
/// a budget that then works. Every 25th also through the binary: `remat
/// solve --in-flight`, then `remat simulate` and `remat show` of the file it
/// wrote, which must print that rank peak (and exit 1 one byte below it).
#[test]
fn in_flight_plans_keep_the_promise() {
    let dir = tempfile::tempdir().unwrap();
    let n = (cases() / 10).max(1);
    let strategy = (option_chain_text(), any::<u8>(), any::<u8>(), 0.0f64..1.3, any::<u8>());
    let mut runner = runner(n, 37);
    runner
        .run(&strategy, |(text, alg, pick, frac, sample)| {
            let start = Instant::now();
            let Ok(chain) = Chain::from_json(&text) else {
                count("in flight: chain rejected at read (exit 2)");
                return Ok(());
            };
            let alg = algorithm(alg);
            // Exhaustive search on the longest of these chains with options takes seconds.
            if alg == Algorithm::Exhaustive && remat::solve::exhaustive::equivalent_stages(&chain) > 8 {
                count("in flight: skipped, exhaustive search on a large state space");
                return Ok(());
            }
            let k = micro_batches(pick);
            let Some(k) = usize::try_from(k).ok().and_then(std::num::NonZeroUsize::new) else {
                count("in flight: zero micro-batches, refused by the front ends (exit 2)");
                return Ok(());
            };
            let budget = (reference_peak(&chain) as f64 * frac * (k.get().min(4) as f64)) as u64;
            let opts = SolveOptions { in_flight: k, ..SolveOptions::default() };
            let others = k.get() as u128 - 1;
            match remat::solve(&chain, budget, alg, &opts) {
                Ok(sol) => {
                    let (peak, residue) = hand_replay(&chain, 1, chain.len(), &sol.schedule.operations);
                    prop_assert_eq!(peak, u128::from(sol.schedule.peak_memory), "{}\n{}", alg, text);
                    prop_assert!(peak + others * residue <= u128::from(budget), "{alg} over {budget}\n{text}");
                    prop_assert_eq!(sol.schedule.in_flight, k.get());
                    if k.get() > 1 {
                        prop_assert_eq!(sol.schedule.residue.map(u128::from), Some(residue));
                    }
                    count("in flight: solved, rank peak recomputed within budget (exit 0)");
                }
                Err(SolveError::Infeasible { min_budget: Some(m), .. }) => {
                    prop_assert!(m > budget, "{alg}: {m} not above {budget}\n{text}");
                    match remat::solve(&chain, m, alg, &opts) {
                        Ok(sol) => {
                            let (peak, residue) = hand_replay(&chain, 1, chain.len(), &sol.schedule.operations);
                            prop_assert!(peak + others * residue <= u128::from(m));
                            count("in flight: infeasible, named budget works (exit 1)");
                        }
                        Err(e) => prop_assert!(false, "{alg} with {k} in flight: named {m} fails: {e}\n{text}"),
                    }
                }
                Err(SolveError::Infeasible { min_budget: None, .. }) => {
                    count("in flight: infeasible, no budget works (exit 1)");
                }
                Err(e @ (SolveError::Rejected { .. } | SolveError::Mispredicted { .. })) => {
                    prop_assert!(false, "{alg} at {budget} with {k} in flight: {e}\n{text}");
                }
                Err(e) => {
                    prop_assert!(!e.to_string().is_empty());
                    count("in flight: refused (too many micro-batches or too large, exit 2)");
                }
            }
            if sample % 25 == 0 {
                check_in_flight_binary(dir.path(), &text, &chain, alg, k.get(), budget)?;
            }
            prop_assert!(start.elapsed() < HANG, "{:?}\n{text}", start.elapsed());
            Ok(())
        })
        .unwrap();
    print_counts();
}

/// `remat solve --in-flight K --json -o s.json`, then `remat simulate` and
/// `remat show` of s.json: the rank peak they print is the hand replay's,
/// within the budget, and one byte less is exit 1.
fn check_in_flight_binary(
    dir: &std::path::Path,
    text: &str,
    chain: &Chain,
    alg: Algorithm,
    k: usize,
    budget: u64,
) -> Result<(), TestCaseError> {
    let path = dir.join("chain.json");
    let schedule = dir.join("s.json");
    let _ = std::fs::remove_file(&schedule);
    std::fs::write(&path, text).unwrap();
    let run = |args: &[String]| {
        std::process::Command::new(assert_cmd::cargo::cargo_bin("remat")).args(args).output().unwrap()
    };
    let chain_arg = path.to_str().unwrap().to_string();
    let out = run(&[
        "solve".into(),
        chain_arg.clone(),
        "--json".into(),
        "-a".into(),
        alg.name().into(),
        format!("--memory={budget}"),
        format!("--in-flight={k}"),
        "-o".into(),
        schedule.to_str().unwrap().into(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    prop_assert!(matches!(out.status.code(), Some(0..=2)) && !stderr.contains("panicked"), "{stderr}\n{text}");
    if out.status.code() != Some(0) {
        count(format!("in flight binary: solve exit {}", out.status.code().unwrap()));
        return Ok(());
    }
    let ops = remat::schedule::parse_operations(&std::fs::read_to_string(&schedule).unwrap()).unwrap();
    let (peak, residue) = hand_replay(chain, 1, chain.len(), &ops);
    let rank_peak = peak + (k as u128 - 1) * residue;
    let sched_arg = schedule.to_str().unwrap().to_string();
    let simulate =
        run(&["simulate".into(), chain_arg.clone(), sched_arg.clone(), format!("--memory={budget}"), "--json".into()]);
    prop_assert_eq!(simulate.status.code(), Some(0), "{}", String::from_utf8_lossy(&simulate.stderr));
    let v: serde_json::Value = serde_json::from_slice(&simulate.stdout).unwrap();
    prop_assert_eq!(v["rank_peak"].as_u64().map(u128::from), Some(rank_peak));
    prop_assert_eq!(v["in_flight"].as_u64(), Some(k as u64));
    prop_assert_eq!(&v["within_budget"], &serde_json::Value::Bool(true));
    let show = run(&["show".into(), chain_arg.clone(), sched_arg.clone(), "--json".into()]);
    prop_assert_eq!(show.status.code(), Some(0), "{}", String::from_utf8_lossy(&show.stderr));
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    prop_assert_eq!(v["rank_peak"].as_u64().map(u128::from), Some(rank_peak));
    if rank_peak > 0 {
        let below = run(&["simulate".into(), chain_arg, sched_arg, format!("--memory={}", rank_peak - 1)]);
        prop_assert_eq!(below.status.code(), Some(1), "{}", String::from_utf8_lossy(&below.stderr));
    }
    count("in flight binary: solve, simulate and show agree on the rank peak");
    Ok(())
}

/// Issue 36: `simulate` and `show` of schedules with recording options
/// (`F_all^3[1]`), runs, hostile tokens and micro-batch counts, given as
/// the argument itself (notation) or as a file, on generated chains with
/// options: exit 0, 1 or 2, never a panic; a valid schedule's peak is the
/// hand replay's, its rank peak the hand replay's, and `within_budget` says
/// whether that fits.
#[test]
fn schedules_with_options_and_micro_batches_through_simulate_and_show() {
    let dir = tempfile::tempdir().unwrap();
    let n = (cases() / 20).max(1);
    let token = prop_oneof![
        30 => (1usize..8, 0usize..4).prop_map(|(l, o)| if o == 0 { format!("F_all^{l}") } else { format!("F_all^{l}[{o}]") }),
        20 => (1usize..8).prop_map(|l| format!("F_ck^{l}")),
        20 => (1usize..8).prop_map(|l| format!("F_none^{l}")),
        30 => (1usize..8).prop_map(|l| format!("B^{l}")),
        10 => (1usize..8, 1usize..8).prop_map(|(a, b)| format!("F_all^{a}..{b}")),
        10 => (1usize..8, 1usize..8).prop_map(|(a, b)| format!("B^{a}..{b}")),
        1 => Just("F_all^2[18446744073709551615]".to_string()),
        1 => Just("junk".to_string()),
    ];
    let strategy = (
        option_chain_text(),
        proptest::collection::vec(token, 0..20),
        any::<u8>(),
        0.0f64..2.0,
        any::<bool>(),
        any::<bool>(),
    );
    let mut runner = runner(n, 38);
    runner
        .run(&strategy, |(text, tokens, pick, frac, store_all, as_file)| {
            let Ok(chain) = Chain::from_json(&text) else {
                count("simulate/show: chain rejected at read (exit 2)");
                return Ok(());
            };
            // Half the cases: store-all with each stage's last option, always valid.
            let notation = if store_all {
                let n = chain.len() + 1;
                let mut t: Vec<String> = (1..=n).map(|l| format!("F_all^{l}[{}]", chain.option_count(l) - 1)).collect();
                t.extend((1..=n).rev().map(|l| format!("B^{l}")));
                t.join(" ").replace("[0]", "")
            } else {
                tokens.join(" ")
            };
            let k = micro_batches(pick);
            let library = remat::schedule::parse_operations(&notation)
                .ok()
                .and_then(|ops| remat::simulate(&chain, &ops).ok().map(|r| (ops, r)));
            let hand = library.as_ref().map(|(ops, r)| {
                let (peak, residue) = hand_replay(&chain, 1, chain.len(), ops);
                assert_eq!(peak, u128::from(r.peak_memory), "{notation}\n{text}");
                assert_eq!(residue, u128::from(r.residue()), "{notation}\n{text}");
                (peak, residue)
            });
            // Around the rank peak when the schedule is valid (either side of
            // it), else around store-all's peak.
            let around = hand.map_or(u128::from(reference_peak(&chain)), |(peak, residue)| {
                peak + u128::from(k.clamp(1, 1 << 20) - 1) * residue
            });
            let budget = u64::try_from((around as f64 * (0.5 + frac / 2.0)) as u128).unwrap_or(u64::MAX);
            let path = dir.path().join("chain.json");
            std::fs::write(&path, &text).unwrap();
            let schedule_arg = if as_file {
                let s = dir.path().join("s.txt");
                std::fs::write(&s, &notation).unwrap();
                s.to_str().unwrap().to_string()
            } else {
                notation.clone()
            };
            for command in ["simulate", "show"] {
                let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("remat"))
                    .args([command, path.to_str().unwrap(), &schedule_arg, "--json"])
                    .arg(format!("--memory={budget}"))
                    .arg(format!("--in-flight={k}"))
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                let code = out.status.code();
                prop_assert!(matches!(code, Some(0..=2)), "{command} exit {code:?}: {stderr}\n{notation}\n{text}");
                prop_assert!(!stderr.contains("panicked"), "{stderr}");
                let valid_k = (1..=remat::solve::MAX_IN_FLIGHT as u64).contains(&k);
                match (hand, code) {
                    (Some((peak, residue)), Some(0 | 1)) if !schedule_arg.is_empty() => {
                        prop_assert!(valid_k, "{command} took --in-flight {k}");
                        let rank_peak = peak + (k as u128 - 1) * residue;
                        let fits = rank_peak <= u128::from(budget);
                        prop_assert_eq!(
                            code == Some(0),
                            fits,
                            "{} at {}: {}\n{}\n{}",
                            command,
                            budget,
                            stderr,
                            notation,
                            text
                        );
                        if !out.stdout.is_empty() {
                            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                            prop_assert_eq!(
                                v["rank_peak"].as_u64().map(u128::from),
                                u64::try_from(rank_peak).ok().map(u128::from)
                            );
                        }
                        count(format!("{command}: valid, rank peak recomputed, exit {}", code.unwrap()));
                    }
                    (_, Some(2)) => {
                        prop_assert!(stderr.contains("error: "), "{stderr}");
                        prop_assert!(
                            hand.is_none() || !valid_k || schedule_arg.is_empty(),
                            "{command} refused a valid schedule: {stderr}\n{notation}"
                        );
                        count(format!("{command}: refused (invalid schedule or count, exit 2)"));
                    }
                    _ => prop_assert!(false, "{command} exit {code:?} for {hand:?}: {stderr}\n{notation}\n{text}"),
                }
            }
            Ok(())
        })
        .unwrap();
    print_counts();
}

fn print_counts() {
    let counts = COUNTS.lock().unwrap();
    let total: u64 = counts.values().sum();
    println!("fuzz outcomes so far ({total} inputs):");
    for (what, n) in counts.iter() {
        println!("  {n:>7}  {what}");
    }
}
