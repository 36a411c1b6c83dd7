//! The one router: [`solve`] takes any [`Problem`] and a [`Method`] and
//! decides which solver runs it (a chain, or a forward graph that is a path,
//! to the chain solvers; any other graph to the graph solvers; `auto`'s
//! choice between exhaustive search, the lifted chain DP and the MILP), with
//! one [`Options`] value passed down unchanged and one [`Error`] back.

use thiserror::Error;

use crate::chain::Chain;
use crate::error::ErrorKind;
use crate::graph::milp::MilpOptions;
use crate::graph::{
    CheckmateGraph, ForwardGraph, GraphAlgorithm, GraphFile, GraphSolution, GraphSolveError, LIFT_NAME, WhenRefused,
    backward, checkmate_forward, exhaustive, solve_checkmate,
};
use crate::solve::{Algorithm, Solution, SolveError, SolveOptions};

use super::{Method, Problem};

/// Options of [`solve`]: the chain solvers' (`chain`) and the graph solvers'
/// (`milp`). One value from the front end to the solver, never rebuilt on
/// the way, so every chain option (`slots`, `exact_memory`, `segments`,
/// `progress`) reaches the chain solvers also when a graph is solved as a
/// chain (a path graph once lost `exact_memory` and `segments` here).
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// Slots, exact memory, segments and progress of the chain solvers (a
    /// forward graph that is a path is solved as a chain).
    pub chain: SolveOptions<'a>,
    /// The MILP/LP solver, its time limit and progress ticker.
    pub milp: MilpOptions<'a>,
}

/// What [`solve`] did with an input, and why.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Solved by the chain solvers: a chain, or a forward graph that is a
    /// path.
    Chain {
        /// The chain (as read, or the path graph's chain form).
        chain: Chain,
        /// The chain solver's checked solution.
        solution: Solution,
        /// Which path was taken and why (empty for a chain solved as asked).
        why: String,
    },
    /// Solved on this Checkmate graph.
    Graph {
        /// The Checkmate graph (derived from a forward graph, or as read).
        graph: CheckmateGraph,
        /// The checked graph schedule.
        solution: GraphSolution,
        /// Which path was taken and why.
        why: String,
    },
}

/// Why [`solve`] returned no schedule: the chain solvers' error, the graph
/// solvers' error, or a chain algorithm asked for a graph that is not a
/// chain. Its [`kind`](Error::kind) picks the CLI's exit code and the Python
/// exception.
#[derive(Debug, Error)]
pub enum Error {
    /// The chain solvers found no schedule (infeasible budget, a limit, bad
    /// options...).
    #[error(transparent)]
    Chain(#[from] SolveError),
    /// The graph solvers found no schedule (or the derived Checkmate graph
    /// is invalid).
    #[error(transparent)]
    Graph(#[from] GraphSolveError),
    /// A chain algorithm asked for a graph that is not a chain.
    #[error("{algorithm} solves chains, and graph `{graph}` is not one: {why}; use --algorithm checkmate or auto")]
    NotAChain {
        /// The algorithm asked.
        algorithm: Algorithm,
        /// The graph's name.
        graph: String,
        /// Why it is not a chain.
        why: String,
    },
    /// Micro-batches in flight (`in_flight` > 1) asked for an input the
    /// graph solvers take: they plan one micro-batch.
    #[error(
        "in_flight {in_flight} applies to chains only ({what} `{name}` goes to the graph solvers, which plan one \
         micro-batch): split the network into pipeline stages that are chains"
    )]
    InFlight {
        /// The micro-batches asked for.
        in_flight: usize,
        /// `forward graph`, `joint graph` or `chain` (with a graph algorithm).
        what: &'static str,
        /// The input's name.
        name: String,
    },
}

impl Error {
    /// The solver's error keeps its kind ([`SolveError::kind`],
    /// [`GraphSolveError::kind`]); a chain algorithm on a graph that is not
    /// a chain is [`ErrorKind::Input`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Chain(e) => e.kind(),
            Error::Graph(e) => e.kind(),
            Error::NotAChain { .. } | Error::InFlight { .. } => ErrorKind::Input,
        }
    }
}

/// Joint graphs of at most this many nodes are solved by exhaustive search
/// under `auto` (milliseconds at this size): it finds every schedule,
/// including the few that compute a node twice within a stage of the
/// MILP's, which some tight budgets need (`tests/suite/graph_milp_vs_exhaustive.rs`).
pub const AUTO_EXHAUSTIVE_NODES: usize = exhaustive::MAX_NODES;

/// Solves any input under `budget` bytes with `method`, routed by what the
/// input is:
/// - a chain: a chain algorithm runs on it ([`crate::solve::solve`]); a
///   graph-only algorithm on its forward graph, as below;
/// - a forward graph that is a path: solved as its chain by the chain
///   solvers, whatever the chain algorithm (`auto` and `exhaustive`
///   included);
/// - any other forward graph, on its derived Checkmate graph: `auto` runs
///   exhaustive search when that graph has at most [`AUTO_EXHAUSTIVE_NODES`]
///   nodes, else [`checkmate_forward`] (the chain DP of its blocks lifted to
///   the graph, then the MILP warm-started from the better of that and the
///   baselines, never the slower answer; a MILP too large for the guard
///   gives the best known schedule with a note); `checkmate` the same, except
///   that a MILP the guard refuses is an error; `checkmate-approx` LP
///   rounding; `exhaustive` the graph oracle; any other chain algorithm is an
///   [`Error::NotAChain`];
/// - a Checkmate graph as given (chains are only recognised in forward
///   graphs): `auto` exhaustive search up to [`AUTO_EXHAUSTIVE_NODES`] nodes,
///   else the MILP; `checkmate`, `checkmate-approx` and `exhaustive` as
///   named; any other chain algorithm is an [`Error::NotAChain`].
///
/// `opts` reaches the chosen solver unchanged; `opts.chain.in_flight` > 1
/// (a pipeline rank, [`crate::solve::in_flight`]) on an input that goes to
/// the graph solvers is an [`Error::InFlight`], never silently dropped.
/// Every schedule is replayed by
/// the exact chain or graph simulator before it is returned. The
/// [`Outcome`]'s `why` says which path was taken (empty for a chain solved as
/// asked). Deterministic except where a time limit stops a solver.
///
/// # Examples
///
/// A forward graph with a skip connection (not a chain), solved on its
/// Checkmate graph:
///
/// ```
/// use remat::graph::simulate_within;
/// use remat::problem::{self, Method, Options, Outcome, Problem};
///
/// let problem = Problem::from_json(r#"{"name": "skip", "input_size": 100, "nodes": [
///     {"name": "a", "inputs": [], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100},
///     {"name": "b", "inputs": ["a"], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 100},
///     {"name": "c", "inputs": ["b", "a"], "forward_time": 1, "backward_time": 2, "output_size": 100, "saved_size": 200}
/// ]}"#, "skip.json")?;
/// let method: Method = "auto".parse()?;
/// let outcome = problem::solve(&problem, 10_000, method, &Options::default())?;
/// let Outcome::Graph { graph, solution, .. } = outcome else { panic!("not a chain") };
/// // Replayed by the graph simulator: the same makespan, within the budget.
/// let replay = simulate_within(&graph, &solution.schedule.operations, 10_000)?;
/// assert_eq!(replay.makespan, solution.schedule.makespan);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn solve(problem: &Problem, budget: u64, method: Method, opts: &Options) -> Result<Outcome, Error> {
    let to_chain_solvers = match (problem, method) {
        (Problem::Chain(_), Method::Chain(_)) => true,
        (Problem::Graph(GraphFile::Forward(forward)), Method::Chain(_)) => forward.as_chain().is_ok(),
        _ => false,
    };
    let in_flight = opts.chain.in_flight.get();
    if in_flight > 1 && !to_chain_solvers {
        return Err(Error::InFlight { in_flight, what: problem.kind(), name: problem.name().to_string() });
    }
    match (problem, method) {
        (Problem::Chain(chain), Method::Chain(algorithm)) => {
            let solution = crate::solve::solve(chain, budget, algorithm, &opts.chain)?;
            Ok(Outcome::Chain { chain: chain.clone(), solution, why: String::new() })
        }
        (Problem::Chain(chain), Method::Graph(_)) => {
            solve_forward(&ForwardGraph::from_chain(chain), budget, method, opts)
        }
        (Problem::Graph(GraphFile::Forward(forward)), _) => solve_forward(forward, budget, method, opts),
        (Problem::Graph(GraphFile::Checkmate(graph)), _) => solve_given(graph, budget, method, &opts.milp),
    }
}

/// A Checkmate graph as given: chains are not recognised in it.
fn solve_given(graph: &CheckmateGraph, budget: u64, method: Method, milp: &MilpOptions) -> Result<Outcome, Error> {
    let algorithm = match method {
        Method::Graph(g) => g,
        Method::Chain(Algorithm::Exhaustive) => GraphAlgorithm::Exhaustive,
        Method::Chain(Algorithm::Auto) if graph.len() <= AUTO_EXHAUSTIVE_NODES => {
            let why = format!("exhaustive search on the joint graph as given: {}", tiny(graph.len()));
            return on_graph(graph.clone(), budget, GraphAlgorithm::Exhaustive, why, milp);
        }
        Method::Chain(Algorithm::Auto) => GraphAlgorithm::Checkmate,
        Method::Chain(other) => {
            return Err(Error::NotAChain {
                algorithm: other,
                graph: graph.name().to_string(),
                why: "it is a joint forward+backward graph".into(),
            });
        }
    };
    let what = match algorithm {
        GraphAlgorithm::Checkmate => "MILP (checkmate)",
        GraphAlgorithm::CheckmateApprox => "LP rounding (checkmate-approx)",
        GraphAlgorithm::Exhaustive => "exhaustive search",
    };
    let why = format!(
        "{what} on the joint graph as given ({} nodes; chains are only recognised in forward graphs)",
        graph.len()
    );
    on_graph(graph.clone(), budget, algorithm, why, milp)
}

/// A forward graph: a path to the chain solvers, anything else on its
/// derived Checkmate graph.
fn solve_forward(forward: &ForwardGraph, budget: u64, method: Method, opts: &Options) -> Result<Outcome, Error> {
    let derived = || backward::derive(forward).map_err(|e| Error::Graph(e.into()));
    let lifted_or_milp = |graph: CheckmateGraph, when_refused: WhenRefused| -> Result<_, Error> {
        let (solution, choice) = checkmate_forward(forward, &graph, budget, when_refused, &opts.milp)?;
        Ok((graph, solution, choice))
    };
    match (method, forward.as_chain()) {
        (Method::Graph(GraphAlgorithm::Checkmate), _) => {
            let (graph, solution, choice) = lifted_or_milp(derived()?, WhenRefused::Fail)?;
            let why = format!("checkmate on the derived joint graph ({} nodes), as asked: {choice}", graph.len());
            Ok(Outcome::Graph { graph, solution, why })
        }
        (Method::Graph(algorithm), _) => {
            let graph = derived()?;
            let why = format!("{algorithm} on the derived joint graph ({} nodes), as asked", graph.len());
            on_graph(graph, budget, algorithm, why, &opts.milp)
        }
        (Method::Chain(Algorithm::Auto), Ok(chain)) => {
            let solution = crate::solve::solve(chain, budget, Algorithm::Auto, &opts.chain)?;
            let why = format!(
                "chain solver ({}): the forward graph is a path (each node reads only the node before it), \
                 so it is solved exactly as a chain; {}",
                solution.schedule.algorithm,
                solution.reason.as_deref().unwrap_or_default()
            );
            Ok(Outcome::Chain { chain: chain.clone(), solution, why })
        }
        (Method::Chain(Algorithm::Auto), Err(not_path)) => {
            let graph = derived()?;
            if graph.len() <= AUTO_EXHAUSTIVE_NODES {
                let why = format!(
                    "exhaustive search: the forward graph is not a chain ({not_path}); its derived joint graph has {}",
                    tiny(graph.len())
                );
                return on_graph(graph, budget, GraphAlgorithm::Exhaustive, why, &opts.milp);
            }
            let (graph, solution, choice) = lifted_or_milp(graph, WhenRefused::KeepBestKnown)?;
            let head = if solution.schedule.algorithm == LIFT_NAME {
                "chain DP lifted to the graph (chain-lift)"
            } else {
                "MILP (checkmate)"
            };
            let why = format!(
                "{head}: the forward graph is not a chain ({not_path}); on its derived joint graph ({} nodes), {choice}",
                graph.len()
            );
            Ok(Outcome::Graph { graph, solution, why })
        }
        (Method::Chain(Algorithm::Exhaustive), Err(not_path)) => {
            let why = format!("exhaustive search over graph schedules: the forward graph is not a chain ({not_path})");
            on_graph(derived()?, budget, GraphAlgorithm::Exhaustive, why, &opts.milp)
        }
        (Method::Chain(algorithm), Ok(chain)) => {
            let why = format!("{algorithm} on the chain form of the forward graph (it is a path)");
            let solution = crate::solve::solve(chain, budget, algorithm, &opts.chain)?;
            Ok(Outcome::Chain { chain: chain.clone(), solution, why })
        }
        (Method::Chain(algorithm), Err(not_path)) => {
            Err(Error::NotAChain { algorithm, graph: forward.name().to_string(), why: not_path.to_string() })
        }
    }
}

/// `algorithm` on a Checkmate graph, as an [`Outcome`] that says `why`.
fn on_graph(
    graph: CheckmateGraph,
    budget: u64,
    algorithm: GraphAlgorithm,
    why: String,
    milp: &MilpOptions,
) -> Result<Outcome, Error> {
    let solution = solve_checkmate(&graph, budget, algorithm, milp)?;
    Ok(Outcome::Graph { graph, solution, why })
}

/// Why `auto` ran exhaustive search on a Checkmate graph of `nodes` nodes.
fn tiny(nodes: usize) -> String {
    format!(
        "{nodes} nodes (at most {AUTO_EXHAUSTIVE_NODES}), so every schedule is tried, including those the MILP's \
         stages cannot express"
    )
}
