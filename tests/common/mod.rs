//! Helpers shared by the oracle tests (each test crate uses a part of them).
#![allow(dead_code)]

use remat::solve::SolveOptions;
use remat::{Chain, Op, simulate_within};

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
