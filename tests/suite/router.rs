//! The one router (`remat::problem::solve`, issue 26): one options value
//! reaches the solver unchanged whichever way an input is routed, and an
//! option the chosen solver cannot honour is an error, never dropped.

use std::num::NonZeroUsize;

use remat::ErrorKind;
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{CheckmateGraph, ForwardGraph, GraphAlgorithm, GraphFile, backward};
use remat::problem::{self, Error, Method, Options, Outcome, Problem};
use remat::solve::{Algorithm, SolveOptions, solve};
use remat::synthetic::{Figures, Rng, small_forward_graph};

use crate::graph_chain::path_chain;

/// A path forward graph goes to the chain solvers with the caller's options
/// as given: for every chain algorithm and every option that changes an
/// answer (the slots, exact memory off, K segments, micro-batches in flight),
/// the routed answer is the chain solver's on the path's chain form, schedule
/// for schedule and error for error. (A path graph once lost `exact_memory`
/// and `segments` on the way.)
#[test]
fn a_path_graph_reaches_the_chain_solvers_with_the_options_unchanged() {
    let mut rng = Rng::new(2626);
    let (mut same_schedule, mut same_error) = (0, 0);
    for i in 0..24 {
        let len = 2 + i % 4;
        let forward = ForwardGraph::from_chain(&path_chain(&mut rng, len, i % 2 == 0));
        let chain = forward.as_chain().expect("a path").clone();
        let problem = Problem::Graph(GraphFile::Forward(forward));
        let top = solve(&chain, u64::MAX / 4, Algorithm::StoreAll, &SolveOptions::default()).unwrap().schedule;
        let variants = [
            SolveOptions { slots: NonZeroUsize::new(7).unwrap(), ..SolveOptions::default() },
            SolveOptions { exact_memory: Some(0), ..SolveOptions::default() },
            SolveOptions { segments: Some(1 + i % len), ..SolveOptions::default() },
            SolveOptions { in_flight: NonZeroUsize::new(2).unwrap(), ..SolveOptions::default() },
        ];
        for budget in [top.peak_memory / 2, 3 * top.peak_memory / 4, 2 * top.peak_memory] {
            for &algorithm in Algorithm::ALL {
                for chain_opts in variants {
                    if chain_opts.segments.is_some() && algorithm != Algorithm::Sequential {
                        continue;
                    }
                    let opts = Options { chain: chain_opts, ..Options::default() };
                    let routed = problem::solve(&problem, budget, Method::Chain(algorithm), &opts);
                    match (routed, solve(&chain, budget, algorithm, &chain_opts)) {
                        (Ok(Outcome::Chain { chain: c, solution, why }), Ok(direct)) => {
                            assert_eq!(c, chain);
                            assert_eq!(solution.schedule, direct.schedule, "{algorithm}: {why}");
                            assert_eq!(solution.slot_size, direct.slot_size, "{algorithm}: {why}");
                            same_schedule += 1;
                        }
                        (Err(Error::Chain(a)), Err(b)) => {
                            assert_eq!(a.to_string(), b.to_string());
                            same_error += 1;
                        }
                        (a, b) => panic!("{algorithm} at {budget}: routed {a:?}, direct {b:?}"),
                    }
                }
            }
        }
    }
    // Both sides of the comparison occur: it is not vacuous.
    assert!(same_schedule > 500 && same_error > 50, "{same_schedule} schedules, {same_error} errors");
}

/// Micro-batches in flight are planned by the chain solvers only: asked of an
/// input that goes to the graph solvers (a forward graph that is not a path,
/// a joint graph, a chain with a graph algorithm) the router refuses it with
/// an input error that names the field, instead of planning one micro-batch.
#[test]
fn in_flight_on_an_input_the_graph_solvers_take_is_an_input_error() {
    let mut rng = Rng::new(2627);
    let forward = not_a_path(&mut rng, 5);
    let joint: CheckmateGraph = backward::derive(&forward).unwrap();
    let chain = path_chain(&mut rng, 3, true);
    let opts = Options {
        chain: SolveOptions { in_flight: NonZeroUsize::new(3).unwrap(), ..SolveOptions::default() },
        ..Options::default()
    };
    let cases = [
        (Problem::Graph(GraphFile::Forward(forward)), Method::Chain(Algorithm::Auto), "forward graph"),
        (Problem::Graph(GraphFile::Checkmate(joint)), Method::Chain(Algorithm::Auto), "joint graph"),
        (Problem::Chain(chain.clone()), Method::Graph(GraphAlgorithm::Checkmate), "chain"),
    ];
    for (problem, method, what) in cases {
        let e = problem::solve(&problem, u64::MAX / 4, method, &opts).unwrap_err();
        assert!(matches!(e, Error::InFlight { in_flight: 3, .. }), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::Input);
        let text = e.to_string();
        assert!(text.starts_with(&format!("in_flight 3 applies to chains only ({what} `")), "{text}");
        // With one micro-batch the same inputs solve.
        let one = Options { milp: milp(), ..Options::default() };
        assert!(problem::solve(&problem, u64::MAX / 4, method, &one).is_ok(), "{what}");
    }
    // A chain with a chain algorithm plans them.
    let Outcome::Chain { solution, .. } =
        problem::solve(&Problem::Chain(chain), u64::MAX / 4, Method::Chain(Algorithm::Auto), &opts).unwrap()
    else {
        panic!("a chain is solved as a chain")
    };
    assert_eq!(solution.schedule.in_flight, 3);
}

/// A chain algorithm other than `auto` and `exhaustive` asked for a graph
/// that is not a chain: the router's own error, an input error that says
/// what to run instead; `auto` and `exhaustive` route it to the graph
/// solvers.
#[test]
fn a_chain_algorithm_on_a_graph_that_is_not_a_chain_says_what_to_run() {
    let forward = not_a_path(&mut Rng::new(2628), 4);
    let name = forward.name().to_string();
    let problem = Problem::Graph(GraphFile::Forward(forward));
    let opts = Options { milp: milp(), ..Options::default() };
    let e = problem::solve(&problem, u64::MAX / 4, Method::Chain(Algorithm::Floating), &opts).unwrap_err();
    assert!(matches!(&e, Error::NotAChain { algorithm: Algorithm::Floating, graph, .. } if *graph == name), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Input);
    assert!(e.to_string().ends_with("use --algorithm checkmate or auto"), "{e}");
    for algorithm in [Algorithm::Auto, Algorithm::Exhaustive] {
        let outcome = problem::solve(&problem, u64::MAX / 4, Method::Chain(algorithm), &opts).unwrap();
        assert!(matches!(outcome, Outcome::Graph { .. }), "{algorithm}");
    }
}

/// A random forward graph of `nodes` nodes with a skip connection.
fn not_a_path(rng: &mut Rng, nodes: usize) -> ForwardGraph {
    loop {
        let f = small_forward_graph(rng, nodes, true, Figures::Random);
        if f.as_chain().is_err() {
            return f;
        }
    }
}

fn milp() -> MilpOptions<'static> {
    MilpOptions { backend: Backend::Microlp, time_limit: Some(std::time::Duration::from_secs(20)), ticker: None }
}
