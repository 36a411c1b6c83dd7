//! The min-cut, the byte budget and the max-flow against brute force on many
//! small random joint graphs (deterministic seeds), and the max-flow against
//! the `pathfinding` crate's Edmonds-Karp.

use std::collections::BTreeMap;

use remat::joint::maxflow::FlowNetwork;
use remat::joint::{Analysis, OpClass, OperatorGraph, Role, budget, mincut};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A random joint graph: primals, a forward DAG of mixed op classes, one
/// tangent, and backward nodes reading the tangent's descendants and forward
/// values; some backward nodes read only forward values (computable from the
/// forward, so saveable).
fn random_graph(seed: u64) -> String {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut nodes: Vec<serde_json::Value> = Vec::new();
    let mut forward: Vec<String> = Vec::new();
    let sizes = [4u64, 8, 16, 32, 64, 128];
    for p in 0..1 + rng.below(2) {
        let name = format!("p{p}");
        nodes.push(serde_json::json!({"name": name, "role": "primal", "bytes": rng.pick(&sizes)}));
        forward.push(name);
    }
    let classes = ["pointwise", "pointwise", "pointwise", "view", "reduction", "compute_intensive", "random", "other"];
    for f in 0..3 + rng.below(6) {
        let name = format!("f{f}");
        let mut inputs = vec![forward[rng.below(forward.len() as u64) as usize].clone()];
        if rng.below(2) == 0 {
            inputs.push(forward[rng.below(forward.len() as u64) as usize].clone());
        }
        let mut node = serde_json::json!({"name": name, "role": "forward", "op": rng.pick(&classes),
            "inputs": inputs, "bytes": rng.pick(&sizes)});
        if rng.below(3) == 0 {
            node["flops"] = serde_json::json!(rng.below(1_000_000) as f64);
        }
        if rng.below(12) == 0 {
            node["banned"] = serde_json::json!(true);
        }
        nodes.push(node);
        forward.push(name);
    }
    let output = forward.last().unwrap().clone();
    nodes.push(serde_json::json!({"name": "g", "role": "tangent", "bytes": 8}));
    let mut grads: Vec<String> = vec!["g".to_string()];
    let mut pending_free: Option<String> = None;
    for b in 0..2 + rng.below(4) {
        if rng.below(3) == 0 {
            // A backward node computable from the forward alone.
            let name = format!("c{b}");
            let input = forward[rng.below(forward.len() as u64) as usize].clone();
            nodes.push(serde_json::json!({"name": name, "role": "backward", "op": "pointwise",
                "inputs": [input], "bytes": rng.pick(&sizes)}));
            pending_free = Some(name);
        }
        let name = format!("b{b}");
        let mut inputs = vec![grads[rng.below(grads.len() as u64) as usize].clone()];
        for _ in 0..rng.below(3) {
            inputs.push(forward[rng.below(forward.len() as u64) as usize].clone());
        }
        if let Some(c) = pending_free.take() {
            inputs.push(c);
        }
        nodes.push(serde_json::json!({"name": name, "role": "backward", "op": rng.pick(&["pointwise", "compute_intensive", "other"]),
            "inputs": inputs, "bytes": rng.pick(&sizes)}));
        grads.push(name);
    }
    // Gradients: backward nodes no other backward node reads.
    let read: Vec<String> = nodes
        .iter()
        .flat_map(|n| n["inputs"].as_array().cloned().unwrap_or_default())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let gradients: Vec<&String> = grads.iter().skip(1).filter(|b| !read.contains(b)).collect();
    serde_json::json!({"name": format!("random{seed}"), "nodes": nodes, "outputs": [output], "gradients": gradients})
        .to_string()
}

/// Every subset of the forward-computable nodes, as saved flags.
fn subsets(g: &OperatorGraph, a: &Analysis) -> Vec<Vec<bool>> {
    let vf: Vec<usize> = (0..g.nodes().len()).filter(|&i| a.forward_computable[i]).collect();
    (0u32..1 << vf.len())
        .map(|mask| {
            let mut saved = vec![false; g.nodes().len()];
            for (k, &i) in vf.iter().enumerate() {
                saved[i] = mask & (1 << k) != 0;
            }
            saved
        })
        .collect()
}

#[test]
fn min_cut_is_the_cheapest_valid_saved_set() {
    for seed in 0..300 {
        let text = random_graph(seed);
        let g = OperatorGraph::from_json(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        let a = Analysis::new(&g);
        let cost = |s: &[bool]| -> u128 { (0..s.len()).filter(|&i| s[i]).map(|i| mincut::cut_weight(&g, &a, i)).sum() };
        let valid = |s: &[bool]| {
            mincut::recompute_set(&g, &a, s)
                .is_ok_and(|rec| rec.iter().all(|&i| mincut::ban_reason(&g, &a, i).is_none()))
        };
        let best = subsets(&g, &a).into_iter().filter(|s| valid(s)).map(|s| cost(&s)).min().unwrap();
        let ours = mincut::min_cut(&g, &a);
        assert!(valid(&ours), "seed {seed}: the min-cut's set is not valid\n{text}");
        assert_eq!(cost(&ours), best, "seed {seed}\n{text}");
    }
}

#[test]
fn the_budget_ilp_finds_the_least_recompute_cost_that_fits() {
    for seed in 0..120 {
        let text = random_graph(seed);
        let g = OperatorGraph::from_json(&text).unwrap();
        let a = Analysis::new(&g);
        let allowed = |s: &[bool]| {
            mincut::recompute_set(&g, &a, s).is_ok_and(|rec| {
                rec.iter().all(|&i| {
                    let n = &g.nodes()[i];
                    n.role != Role::Primal && !n.banned && n.op != Some(OpClass::Random)
                })
            })
        };
        let bytes = |s: &[bool]| -> u64 { (0..s.len()).filter(|&i| s[i]).map(|i| budget::budget_bytes(&g, i)).sum() };
        let all = subsets(&g, &a);
        let (smallest, _) = budget::smallest_budget(&g, &a);
        assert_eq!(smallest, all.iter().filter(|s| allowed(s)).map(|s| bytes(s)).min().unwrap(), "seed {seed}");
        let top = bytes(&mincut::save_all(&g, &a));
        for m in [smallest, (smallest + top) / 2, top] {
            let best = all
                .iter()
                .filter(|s| allowed(s) && bytes(s) <= m)
                .map(|s| mincut::evaluate(&g, &a, s).recompute_seconds)
                .fold(f64::INFINITY, f64::min);
            // The Lagrangian set fits, its bound is below the optimum, and
            // when it claims optimality it is right.
            let hull = budget::lagrangian(&g, &a, m);
            assert!(bytes(&hull.saved) <= m && allowed(&hull.saved), "seed {seed} at {m}");
            let hull_cost = mincut::evaluate(&g, &a, &hull.saved).recompute_seconds;
            assert!(hull_cost >= best * (1.0 - 1e-9), "seed {seed} at {m}");
            assert!(hull.bound_seconds <= best * (1.0 + 1e-9) + 1e-18, "seed {seed} at {m}: bound above the optimum");
            if hull.proven {
                assert!(
                    (hull_cost - best).abs() <= 1e-9 * best.max(1e-12),
                    "seed {seed} at {m}: proven but not optimal"
                );
            }
            let ours =
                budget::least_recompute(&g, &a, Some(m)).unwrap_or_else(|e| panic!("seed {seed} at {m}: {e}\n{text}"));
            assert!(ours.optimal, "seed {seed}");
            assert!(bytes(&ours.saved) <= m && allowed(&ours.saved), "seed {seed} at {m}");
            let cost = mincut::evaluate(&g, &a, &ours.saved).recompute_seconds;
            assert!((cost - best).abs() <= 1e-9 * best.max(1e-12), "seed {seed} at {m}: {cost} vs {best}\n{text}");
        }
        if smallest > 0 {
            assert_eq!(
                budget::least_recompute(&g, &a, Some(smallest - 1)).unwrap_err(),
                budget::BudgetError::Infeasible { budget: smallest - 1, smallest }
            );
        }
    }
}

#[test]
fn max_flow_matches_pathfinding_and_picks_the_smallest_sink_side() {
    let mut rng = Rng(0xDEAD_BEEF);
    for _ in 0..400 {
        let n = 2 + rng.below(6) as usize;
        let mut caps: BTreeMap<(usize, usize), i64> = BTreeMap::new();
        for _ in 0..rng.below(16) {
            let (u, v) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
            if u != v {
                *caps.entry((u, v)).or_insert(0) += rng.below(10) as i64;
            }
        }
        let mut net = FlowNetwork::new(n);
        for (&(u, v), &c) in &caps {
            net.add_edge(u, v, c as u128);
        }
        let ours = net.min_cut(0, n - 1);
        let vertices: Vec<usize> = (0..n).collect();
        let list: Vec<((usize, usize), i64)> = caps.iter().map(|(&k, &c)| (k, c)).collect();
        let (_, total, _) = pathfinding::directed::edmonds_karp::edmonds_karp_sparse(&vertices, &0, &(n - 1), list);
        assert_eq!(ours.value, Some(total as u128));
        // Brute force: every s-t cut; ours is the intersection of the minimum
        // ones' sink sides (the smallest).
        let mut meet = vec![true; n];
        for mask in 0u32..1 << n {
            let sink_side: Vec<bool> = (0..n).map(|v| mask & (1 << v) != 0).collect();
            if sink_side[0] || !sink_side[n - 1] {
                continue;
            }
            let cap: i64 = caps.iter().filter(|&(&(u, v), _)| !sink_side[u] && sink_side[v]).map(|(_, &c)| c).sum();
            if cap == total {
                for v in 0..n {
                    meet[v] &= sink_side[v];
                }
            }
        }
        assert_eq!(ours.sink_side, meet);
    }
}
