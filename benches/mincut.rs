//! The fusion-aware min-cut on a 5,000-node joint graph (the paper's largest,
//! hf_GPT2, has over 5,000 nodes and took 0.48 s in NetworkX). The graph is a
//! stack of synthetic layers, each a matmul, a pointwise chain, a reduction
//! and their backward (both matmuls of the weight and input gradients,
//! backward nodes computable from forward values, a tangent flowing down):
//! the mix of op classes and bans a transformer's joint graph has.

use criterion::{Criterion, criterion_group, criterion_main};
use remat::joint::{Analysis, OperatorGraph, budget, mincut};
use serde_json::{Value, json};

/// A joint graph of `layers` layers (21 nodes each, plus the input and the
/// tangent: 238 layers make 5,000 nodes).
fn layered(layers: usize) -> String {
    let mut nodes: Vec<Value> = Vec::new();
    let shape = json!([64, 1024]);
    let mut node = |name: String, role: &str, op: Option<&str>, inputs: Vec<String>, shape: Value| {
        let mut n = json!({"name": name, "role": role, "inputs": inputs, "shape": shape, "dtype": "float32"});
        if let Some(op) = op {
            n["op"] = json!(op);
        }
        nodes.push(n);
        name
    };
    let x = node("x".into(), "primal", None, vec![], shape.clone());
    let mut h = x.clone();
    let mut forward = Vec::new();
    for l in 0..layers {
        let w = node(format!("w{l}"), "primal", None, vec![], json!([1024, 1024]));
        let mm =
            node(format!("mm{l}"), "forward", Some("compute_intensive"), vec![h.clone(), w.clone()], shape.clone());
        let a = node(format!("add{l}"), "forward", Some("pointwise"), vec![mm.clone()], shape.clone());
        let t = node(format!("tanh{l}"), "forward", Some("pointwise"), vec![a.clone()], shape.clone());
        let m = node(format!("mul{l}"), "forward", Some("pointwise"), vec![t.clone(), h.clone()], shape.clone());
        let s = node(format!("sum{l}"), "forward", Some("reduction"), vec![m.clone()], json!([64, 1]));
        let n = node(format!("div{l}"), "forward", Some("pointwise"), vec![m.clone(), s.clone()], shape.clone());
        forward.push((h.clone(), w, t, m, s));
        h = n;
    }
    let mut g = node("tangent".into(), "tangent", None, vec![], shape.clone());
    let mut gradients = Vec::new();
    for (l, (h_in, w, t, m, s)) in forward.into_iter().enumerate().rev() {
        let p = |s: &str| format!("{s}{l}");
        let dn = node(p("d_div"), "backward", Some("pointwise"), vec![g.clone(), s.clone()], shape.clone());
        let gm = node(p("d_gm"), "backward", Some("pointwise"), vec![g.clone(), m.clone()], shape.clone());
        let ds = node(p("d_sum"), "backward", Some("reduction"), vec![gm], json!([64, 1]));
        let dm = node(p("d_mul"), "backward", Some("pointwise"), vec![dn, ds], shape.clone());
        let dt = node(p("d_tanh_in"), "backward", Some("pointwise"), vec![dm.clone(), h_in.clone()], shape.clone());
        let tsq = node(p("tsq"), "backward", Some("pointwise"), vec![t.clone(), t.clone()], shape.clone());
        let one = node(p("one_minus"), "backward", Some("pointwise"), vec![tsq], shape.clone());
        let da = node(p("d_add"), "backward", Some("pointwise"), vec![dt, one], shape.clone());
        let ht = node(p("h_t"), "backward", Some("view"), vec![h_in.clone()], json!([1024, 64]));
        let dw = node(p("d_w"), "backward", Some("compute_intensive"), vec![ht, da.clone()], json!([1024, 1024]));
        let wt = node(p("w_t"), "backward", Some("view"), vec![w], json!([1024, 1024]));
        let dh = node(p("d_h"), "backward", Some("compute_intensive"), vec![da, wt], shape.clone());
        let dr = node(p("d_res"), "backward", Some("pointwise"), vec![dm, t], shape.clone());
        g = node(p("d_in"), "backward", Some("pointwise"), vec![dh, dr], shape.clone());
        gradients.push(dw);
    }
    gradients.push(g);
    json!({"name": "layered", "nodes": nodes, "outputs": [h], "gradients": gradients}).to_string()
}

fn bench(c: &mut Criterion) {
    let text = layered(238);
    let graph = OperatorGraph::from_json(&text).expect("valid");
    let analysis = Analysis::new(&graph);
    let saved = mincut::min_cut(&graph, &analysis);
    eprintln!("mincut: {} nodes, {} saved by the min-cut", graph.nodes().len(), saved.iter().filter(|&&s| s).count());
    let mut group = c.benchmark_group("mincut");
    group.sample_size(20);
    group.bench_function("5000-node joint graph/min-cut (analysis + cut)", |b| {
        b.iter(|| {
            let analysis = Analysis::new(&graph);
            mincut::min_cut(&graph, &analysis)
        })
    });
    // The byte budget's Lagrangian (about 100 max-flows) at a tenth of the
    // min-cut's activation bytes.
    let tenth = mincut::evaluate(&graph, &analysis, &saved).activation_bytes / 10;
    let hull = budget::lagrangian(&graph, &analysis, tenth);
    eprintln!(
        "mincut: budget {tenth} B: cost {:.3e} s, bound {:.3e} s, proven {}",
        hull.cost_seconds, hull.bound_seconds, hull.proven
    );
    group.bench_function("5000-node joint graph/budget Lagrangian at a tenth of the min-cut", |b| {
        b.iter(|| budget::lagrangian(&graph, &analysis, tenth))
    });
    group.bench_function("5000-node joint graph/parse + validate", |b| {
        b.iter(|| OperatorGraph::from_json(&text).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
