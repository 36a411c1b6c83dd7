//! Forward graphs that are paths, and how the joint-graph model relates to the
//! chain model.
//!
//! What "the same cost as the chain solver" means, precisely:
//! 1. `auto` solves a path forward graph *as a chain*: node v becomes stage
//!    v+1, with a zero loss, and the chain DP's schedule is returned. Its
//!    makespan, peak and operations are exactly those of the chain solver on
//!    that chain (tested here on random chains and through the CLI).
//! 2. The joint graph derived from such a path models the same computation.
//!    When every `saved_size` equals its `output_size`, every chain schedule
//!    is a graph schedule of the derived graph with the same makespan and the
//!    same peak (tested op by op), so the joint optimum is at most the chain
//!    optimum at every budget. It can be strictly lower: the joint model may
//!    free a forward's input right after the forward and recompute it for the
//!    backward, which the chain's operation table cannot express (F_all keeps
//!    its input until the backward). When `saved_size > output_size` the joint
//!    model has no cheap plain forward (F_ck), so neither bound holds in
//!    general.

use remat::chain::{Chain, Stage};
use remat::graph::{
    ForwardGraph, GraphFile, GraphOp, backward, exhaustive as graph_exhaustive, simulate as graph_simulate,
};
use remat::problem::{self, Options, Outcome, Problem};
use remat::schedule::Op;
use remat::solve::{Algorithm, SolveOptions, exhaustive, solve};
use remat::synthetic::{Rng, small_chain};

/// A random small chain with a zero loss (the chain form of a path forward
/// graph has one); `plain` forces saved_size = output_size.
pub(crate) fn path_chain(rng: &mut Rng, len: usize, plain: bool) -> Chain {
    let c = small_chain(rng, len, 6, 5);
    let stages = c
        .stages()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            s.name = Some(format!("layer{i}"));
            if plain {
                s.saved_size = s.output_size;
            }
            s
        })
        .collect();
    Chain::new(c.name(), c.input_size(), stages, Stage::zero_loss()).unwrap()
}

#[test]
fn a_path_forward_graph_is_solved_as_its_chain() {
    let mut rng = Rng::new(60);
    for i in 0..60 {
        let chain = path_chain(&mut rng, 1 + i % 6, false);
        let forward = ForwardGraph::from_chain(&chain);
        assert_eq!(forward.as_chain().unwrap(), &chain, "the chain form of the path is the chain");
        let file = Problem::Graph(GraphFile::Forward(forward));
        let top = solve(&chain, 1 << 20, Algorithm::Persistent, &SolveOptions::default()).unwrap().schedule.peak_memory;
        for budget in [top / 3, top / 2, 2 * top / 3, top] {
            let direct = solve(&chain, budget, Algorithm::Auto, &SolveOptions::default());
            match (problem::solve(&file, budget, Algorithm::Auto.into(), &Options::default()), direct) {
                (Ok(Outcome::Chain { solution, why, .. }), Ok(direct)) => {
                    assert_eq!(solution.schedule, direct.schedule);
                    assert!(why.starts_with("chain solver"), "{why}");
                }
                (Err(problem::Error::Chain(a)), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("graph path {a:?} vs chain {b:?}"),
            }
        }
    }
}

/// The graph schedule of the derived joint graph that performs a chain
/// schedule: forwards compute forward nodes, B^{L+1} the loss gradient, B^l
/// the gradient node of layer l; deletions become frees right after.
fn as_graph_schedule(chain: &Chain, ops: &[Op]) -> Vec<GraphOp> {
    #[derive(Clone, Copy, PartialEq)]
    enum Held {
        No,
        Plain,
        Saved,
    }
    let n = chain.len(); // forward nodes 0..n are stages 1..=n
    let node = |l: usize| l - 1;
    let grad = |l: usize| backward::backward_index(n, l - 1);
    let mut held = vec![Held::No; n + 2];
    let mut out = Vec::new();
    for &op in ops {
        match op {
            Op::FAll(l, _) | Op::FCk(l) | Op::FNone(l) if l <= n => {
                out.push(GraphOp::Compute(node(l)));
                held[l] = if matches!(op, Op::FAll(..)) { Held::Saved } else { Held::Plain };
                if matches!(op, Op::FNone(_)) && l >= 2 {
                    out.push(GraphOp::Free(node(l - 1)));
                    held[l - 1] = Held::No;
                }
            }
            Op::FAll(..) | Op::FCk(_) | Op::FNone(_) => {} // the zero loss forward
            Op::B(l) if l == n + 1 => {
                out.push(GraphOp::Compute(n)); // loss-grad
                if held[n] == Held::Plain {
                    out.push(GraphOp::Free(node(n)));
                    held[n] = Held::No;
                }
            }
            Op::B(l) => {
                out.push(GraphOp::Compute(grad(l)));
                out.push(GraphOp::Free(if l == n { n } else { grad(l + 1) }));
                out.push(GraphOp::Free(node(l)));
                held[l] = Held::No;
                if l >= 2 && held[l - 1] == Held::Plain {
                    out.push(GraphOp::Free(node(l - 1)));
                    held[l - 1] = Held::No;
                }
            }
        }
    }
    out
}

#[test]
fn chain_schedules_are_joint_schedules_with_the_same_makespan_and_peak() {
    let mut rng = Rng::new(61);
    for i in 0..300 {
        let chain = path_chain(&mut rng, 1 + i % 6, true);
        let graph = backward::derive(&ForwardGraph::from_chain(&chain)).unwrap();
        let (min, _) = exhaustive::min_peak(&chain);
        for budget in [min, min + 3, min + 10] {
            let (time, ops) = exhaustive::fastest(&chain, budget).unwrap();
            let chain_replay = remat::simulate(&chain, &ops).unwrap();
            let replay = graph_simulate(&graph, &as_graph_schedule(&chain, &ops))
                .unwrap_or_else(|e| panic!("{}: {e}", remat::schedule::notation(&ops)));
            assert_eq!(replay.makespan, time);
            assert_eq!(replay.peak_memory, chain_replay.peak_memory, "{}", remat::schedule::notation(&ops));
        }
    }
}

#[test]
fn the_joint_optimum_is_at_most_the_chain_optimum_and_sometimes_below() {
    let mut rng = Rng::new(62);
    let (mut cases, mut strictly_below) = (0, 0);
    for i in 0..80 {
        let chain = path_chain(&mut rng, 1 + i % 5, true); // joint graphs of 3..=11 nodes
        let graph = backward::derive(&ForwardGraph::from_chain(&chain)).unwrap();
        let (min, _) = exhaustive::min_peak(&chain);
        let (graph_min, _) = graph_exhaustive::min_peak(&graph);
        assert!(graph_min <= min);
        for budget in min..=min + 8 {
            cases += 1;
            let chain_best = exhaustive::fastest(&chain, budget).unwrap().0;
            let graph_best = graph_exhaustive::fastest(&graph, budget).unwrap().0;
            assert!(graph_best <= chain_best + 1e-9, "budget {budget}: joint {graph_best} > chain {chain_best}");
            strictly_below += usize::from(graph_best < chain_best - 1e-9);
        }
    }
    // The chain model is a restriction of the joint one, and a real one (about
    // one case in six here). The smallest example found: 3 layers, budget 11,
    // chain `F_ck^1 F_none^2 F_ck^3 F_all^4 B^4 F_all^3 B^3 F_all^1 F_all^2 B^2 B^1`
    // (15) against the joint `layer0 layer1 -layer0 layer2 loss-grad grad:layer2
    // ... layer0 grad:layer1 ...` (14): layer1 is computed once, its input freed
    // at once and recomputed for its backward.
    assert!(strictly_below > 0, "{strictly_below} of {cases}");
    assert!(strictly_below < cases / 2, "{strictly_below} of {cases}");
}
