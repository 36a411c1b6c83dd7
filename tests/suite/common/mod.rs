//! Helpers shared by the oracle tests (each test crate uses a part of them).
#![allow(dead_code)]

use std::collections::HashMap;
use std::rc::Rc;

use remat::solve::SolveOptions;
use remat::{Chain, Op, simulate, simulate_within};

/// Exact solve: as many slots as bytes in the budget (slot = 1 byte).
pub fn exact(budget: u64) -> SolveOptions<'static> {
    SolveOptions {
        slots: std::num::NonZeroUsize::new(budget.max(1) as usize).expect("slots > 0"),
        ..SolveOptions::default()
    }
}

/// A search over sequences: the fastest within a budget, with its operations
/// (`exhaustive::fastest`, `exhaustive::fastest_nested`).
pub type Search = fn(&Chain, u64) -> Option<(f64, Vec<Op>)>;

/// The optimum of `search` at every budget in `lo..=hi`, using that it is a
/// step function of the budget: a schedule found at budget M with peak p is
/// optimal for every budget in p..=M.
pub fn profile(chain: &Chain, lo: u64, hi: u64, search: Search) -> Vec<Option<f64>> {
    let mut best = vec![None; (hi - lo + 1) as usize];
    let mut m = hi;
    while let Some((time, ops)) = search(chain, m) {
        let peak = simulate_within(chain, &ops, m).unwrap().peak_memory;
        for b in peak.max(lo)..=m {
            best[(b - lo) as usize] = Some(time);
        }
        if peak <= lo {
            break;
        }
        m = peak - 1;
    }
    best
}

/// A joint (forward + backward) graph as JSON text: the primal `x` of
/// `primal_bytes` bytes, the forward nodes `forward` (named f1..fn by the
/// caller), the tangent `g` and a backward chain dn..d1, each
/// reading the gradient after it, its forward node and the one before that.
pub fn joint_graph_json(name: &str, primal_bytes: u64, forward: Vec<String>) -> String {
    let n = forward.len();
    let mut nodes = vec![format!(
        r#"{{"name": "x", "role": "primal", "shape": [4], "dtype": "float32", "bytes": {primal_bytes}}}"#
    )];
    nodes.extend(forward);
    nodes.push(r#"{"name": "g", "role": "tangent", "shape": [4], "dtype": "float32", "bytes": 4096}"#.to_string());
    let mut prev = "g".to_string();
    for i in (1..=n).rev() {
        let mut inputs = vec![format!("\"{prev}\""), format!("\"f{i}\"")];
        if i > 1 {
            inputs.push(format!("\"f{}\"", i - 1));
        }
        nodes.push(format!(
            r#"{{"name": "d{i}", "role": "backward", "op": "pointwise", "inputs": [{}], "shape": [4], "dtype": "float32", "bytes": 4096}}"#,
            inputs.join(", ")
        ));
        prev = format!("d{i}");
    }
    format!(r#"{{"name": "{name}", "nodes": [{}], "outputs": ["f{n}"], "gradients": ["{prev}"]}}"#, nodes.join(",\n"))
}

/// (peak, makespan) of every persistent sequence of `chain`, each replayed
/// by the simulator: the persistent DP's class, judged without a recurrence.
pub fn persistent_class(chain: &Chain) -> Vec<(u64, f64)> {
    persistent_sequences(chain, 1, chain.len() + 1, &mut HashMap::new())
        .iter()
        .map(|ops| {
            let r = simulate(chain, ops).unwrap_or_else(|e| panic!("{chain:?}: {ops:?}: {e}"));
            (r.peak_memory, r.makespan)
        })
        .collect()
}

/// Every persistent sequence of (s, t), memoised by sub-chain: for each
/// sub-chain either F_all^s[o] (each option o), (s+1, t), B^s, or F_ck^s
/// F_none^{s+1} .. F_none^{s'-1}, (s', t), (s, s'-1) for each split s', and
/// (s, s) as F_all^s[o] B^s (the persistent DP's class, enumerated).
pub fn persistent_sequences(
    chain: &Chain,
    s: usize,
    t: usize,
    memo: &mut HashMap<(usize, usize), Rc<Vec<Vec<Op>>>>,
) -> Rc<Vec<Vec<Op>>> {
    if let Some(v) = memo.get(&(s, t)) {
        return v.clone();
    }
    let mut out = Vec::new();
    let rest = if s < t { persistent_sequences(chain, s + 1, t, memo) } else { Rc::new(vec![Vec::new()]) };
    for o in 0..chain.option_count(s) {
        for r in rest.iter() {
            let mut ops = vec![Op::FAll(s, o)];
            ops.extend_from_slice(r);
            ops.push(Op::B(s));
            out.push(ops);
        }
    }
    for split in s + 1..=t {
        let mut prefix = vec![Op::FCk(s)];
        prefix.extend((s + 1..split).map(Op::FNone));
        let right = persistent_sequences(chain, split, t, memo);
        let left = persistent_sequences(chain, s, split - 1, memo);
        for r in right.iter() {
            for l in left.iter() {
                let mut ops = prefix.clone();
                ops.extend_from_slice(r);
                ops.extend_from_slice(l);
                out.push(ops);
            }
        }
    }
    let out = Rc::new(out);
    memo.insert((s, t), out.clone());
    out
}

/// The `remat` binary, killed after 120 s: a hang fails the test instead of
/// stalling the suite.
pub fn remat() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("remat").unwrap();
    cmd.timeout(std::time::Duration::from_secs(120));
    cmd
}

/// A path in the repository.
pub fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// Writes `text` to `dir/name`, returning the path.
pub fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A command's output read as JSON, or a panic showing what it was.
pub fn json(out: &[u8]) -> serde_json::Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(out)))
}
