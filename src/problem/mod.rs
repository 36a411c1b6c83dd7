//! What an input file holds, read once: a [`Chain`] or a graph
//! ([`GraphFile`]: a forward graph or a Checkmate graph (the joint form)), and the one
//! solve entry that routes it to the right solvers.
//!
//! Every front end (the CLI, the Python bindings) reads its input through
//! [`Problem::read`] or [`Problem::from_json`], so a file is read exactly once
//! (a pipe or `-` for standard input works as well as a path), recognised by
//! its keys (`stages` for a chain, `nodes` for a graph), and validated with
//! errors that name the field.

use std::io::Read;
use std::path::Path;

use thiserror::Error;

use crate::chain::{Chain, ChainError};
use crate::error::ErrorKind;
use crate::graph::{ForwardGraph, GraphError, GraphFile, GraphOptions, GraphSolveError, Outcome, looks_like_graph};
use crate::solve::Algorithm;

/// A validated input: what a chain or graph file holds.
#[derive(Clone, Debug)]
pub enum Problem {
    /// A chain of stages (the main case).
    Chain(Chain),
    /// A graph file: a forward graph (a path is also a chain) or a Checkmate graph.
    Graph(GraphFile),
}

/// Why an input could not be read.
#[derive(Debug, Error)]
pub enum ProblemError {
    /// The file (or standard input) could not be read.
    #[error("cannot read {what} `{path}`: {source}")]
    Io {
        /// What was being read (`chain or graph file`, `schedule file`).
        what: &'static str,
        /// The path as given (`-` for standard input).
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// A chain file with an invalid field.
    #[error("chain file `{path}`: {source}")]
    Chain {
        /// The path as given.
        path: String,
        /// What is wrong.
        source: ChainError,
    },
    /// A graph file with an invalid field.
    #[error("graph file `{path}`: {source}")]
    Graph {
        /// The path as given.
        path: String,
        /// What is wrong.
        source: GraphError,
    },
    /// A schedule given where a chain or graph is expected.
    #[error(
        "`{path}` is a schedule (it has `operations`), not a chain or graph file: give the chain or graph here, \
         and the schedule as the second argument of `remat simulate` or `remat show`"
    )]
    Schedule {
        /// The path as given.
        path: String,
    },
    /// A graph given where only chains are accepted.
    #[error("`{path}` is a {kind}, not a chain: {why}")]
    NotAChain {
        /// The path as given.
        path: String,
        /// `forward graph` or `joint graph`.
        kind: &'static str,
        /// Why it cannot be read as a chain.
        why: String,
    },
}

impl ProblemError {
    /// Always [`ErrorKind::Input`]: the file cannot be read, or it is not a
    /// valid chain or graph where one is expected.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Input
    }
}

/// Reads a whole input as text: a file, or standard input when `path` is `-`
/// (so `remat zoo resnet18 | remat solve - ...` and `solve <(...)` work: the
/// input is read once, never reopened).
pub fn read_input(path: &Path, what: &'static str) -> Result<String, ProblemError> {
    let io = |source| ProblemError::Io { what, path: path.display().to_string(), source };
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(io)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(io)
    }
}

impl Problem {
    /// Parses a chain or graph from its JSON text. `path` only names the input
    /// in errors. A top-level `nodes` key makes it a graph, anything else is
    /// read as a chain (whose errors then name the missing fields).
    pub fn from_json(text: &str, path: &str) -> Result<Problem, ProblemError> {
        let key = |k| crate::graph::has_key(text, k);
        if key("operations") && !key("stages") && !key("nodes") {
            return Err(ProblemError::Schedule { path: path.into() });
        }
        if looks_like_graph(text) {
            let graph =
                GraphFile::from_json(text).map_err(|source| ProblemError::Graph { path: path.into(), source })?;
            Ok(Problem::Graph(graph))
        } else {
            let chain = Chain::from_json(text).map_err(|source| ProblemError::Chain { path: path.into(), source })?;
            Ok(Problem::Chain(chain))
        }
    }

    /// Reads and parses `path` (`-` for standard input) once.
    pub fn read(path: &Path) -> Result<Problem, ProblemError> {
        let text = read_input(path, "chain or graph file")?;
        Problem::from_json(&text, &path.display().to_string())
    }

    /// The name recorded in the file.
    pub fn name(&self) -> &str {
        match self {
            Problem::Chain(c) => c.name(),
            Problem::Graph(g) => g.name(),
        }
    }

    /// `chain`, `forward graph` or `joint graph`.
    pub fn kind(&self) -> &'static str {
        match self {
            Problem::Chain(_) => "chain",
            Problem::Graph(GraphFile::Forward(_)) => "forward graph",
            Problem::Graph(GraphFile::Checkmate(_)) => "joint graph",
        }
    }

    /// Validation warnings (a `saved_size` raised to `output_size`...).
    pub fn warnings(&self) -> &[String] {
        match self {
            Problem::Chain(c) => c.warnings(),
            Problem::Graph(g) => g.warnings(),
        }
    }

    /// The chain this input is: a chain, or a forward graph that is a path
    /// (its chain form). Any other graph is a [`ProblemError::NotAChain`]
    /// whose message says what to run instead; `command` names the command
    /// that asked (`remat compare`).
    pub fn into_chain(self, path: &str, command: &str) -> Result<Chain, ProblemError> {
        let kind = self.kind();
        let not_a_chain = |why: String| ProblemError::NotAChain { path: path.into(), kind, why };
        match self {
            Problem::Chain(c) => Ok(c),
            Problem::Graph(GraphFile::Forward(f)) => f.as_chain().cloned().map_err(|e| {
                not_a_chain(format!(
                    "{e}. {command} works on chains; solve a graph with `remat solve {path} --memory SIZE` \
                     (the Checkmate MILP), or write the network as a chain (`remat zoo NAME` without --graph)"
                ))
            }),
            Problem::Graph(GraphFile::Checkmate(_)) => Err(not_a_chain(format!(
                "{command} works on chains; solve a joint graph with `remat solve {path} --memory SIZE`"
            ))),
        }
    }
}

/// What a user asks to run (defined beside the graph solvers, which take
/// it, so that `graph` needs nothing from this module above it; parsed
/// for the chain-only front ends by [`Method::chain_algorithm`], here).
pub use crate::graph::Method;

impl Method {
    /// Parses `name` where only a chain algorithm will do (`remat
    /// min-memory`, the Python functions that take a chain): a chain
    /// algorithm is returned; a graph-only one (`checkmate`,
    /// `checkmate-approx`) is an error that says so and what to run instead;
    /// any other name is [`Algorithm`]'s error, listing the chain algorithms.
    /// The one place that tells the two kinds of names apart, so that the
    /// chain solvers know nothing of graphs.
    ///
    /// # Examples
    ///
    /// ```
    /// use remat::Algorithm;
    /// use remat::problem::Method;
    ///
    /// assert_eq!(Method::chain_algorithm("floating")?, Algorithm::Floating);
    /// // A graph algorithm is not a chain algorithm: the error says what to use.
    /// let e = Method::chain_algorithm("checkmate").unwrap_err();
    /// assert!(e.contains("checkmate solves graphs, not chains"), "{e}");
    /// let e = Method::chain_algorithm("fastest").unwrap_err();
    /// assert!(e.starts_with("unknown algorithm `fastest`; expected one of: "), "{e}");
    /// # Ok::<(), String>(())
    /// ```
    pub fn chain_algorithm(name: &str) -> Result<Algorithm, String> {
        match name.parse::<Method>() {
            Ok(Method::Chain(algorithm)) => Ok(algorithm),
            Ok(Method::Graph(g)) => Err(format!(
                "{g} solves graphs, not chains; solve the chain's forward graph instead \
                 (`remat::problem::solve` does, as `remat solve` does)"
            )),
            Err(_) => name.parse::<Algorithm>(),
        }
    }
}

/// Options of [`solve`]: the chain solvers' (`chain`) and the graph solvers'
/// (`milp`). The same type as [`GraphOptions`], so that the value a front end
/// builds reaches the chain solvers unchanged whichever way the input is
/// routed (a path graph once lost `exact_memory` and `segments` here).
pub type Options<'a> = GraphOptions<'a>;

/// Solves any input under `budget` bytes with `algorithm`, routed by what it
/// is: a chain goes to [`crate::solve::solve`] (or, for a graph-only
/// algorithm such as `checkmate`, to the graph solvers through its forward
/// graph); a graph goes to [`crate::graph::solve`] (a path as a chain, any
/// other graph to the MILP). Every schedule is replayed by the exact chain or
/// graph simulator before it is returned. The [`Outcome`]'s `why` says which
/// path was taken (empty for a chain solved as asked).
///
/// # Examples
///
/// A forward graph with a skip connection (not a chain), solved on its
/// Checkmate graph:
///
/// ```
/// use remat::graph::{Outcome, simulate_within};
/// use remat::problem::{self, Method, Options, Problem};
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
pub fn solve(problem: &Problem, budget: u64, method: Method, opts: &Options) -> Result<Outcome, GraphSolveError> {
    match (problem, method) {
        (Problem::Chain(chain), Method::Chain(algorithm)) => {
            let solution = crate::solve::solve(chain, budget, algorithm, &opts.chain)?;
            Ok(Outcome::Chain { chain: chain.clone(), solution, why: String::new() })
        }
        (Problem::Chain(chain), Method::Graph(_)) => {
            crate::graph::solve(&GraphFile::Forward(ForwardGraph::from_chain(chain)), budget, method, opts)
        }
        (Problem::Graph(file), _) => crate::graph::solve(file, budget, method, opts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = r#"{"name": "c", "input_size": 4, "stages": [
        {"forward_time": 1, "backward_time": 2, "output_size": 4, "saved_size": 8}]}"#;

    #[test]
    fn recognises_chains_and_graphs() {
        let p = Problem::from_json(CHAIN, "c.json").unwrap();
        assert_eq!(p.kind(), "chain");
        assert_eq!(p.name(), "c");
        let graph = ForwardGraph::from_chain(&Chain::from_json(CHAIN).unwrap());
        let text = crate::zoo::json::graph(&graph);
        let g = Problem::from_json(&text, "g.json").unwrap();
        assert_eq!(g.kind(), "forward graph");
        // A path graph is a chain.
        assert_eq!(g.into_chain("g.json", "remat compare").unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_file() {
        let e = Problem::from_json(r#"{"name": "c"}"#, "c.json").unwrap_err().to_string();
        assert!(e.starts_with("chain file `c.json`:"), "{e}");
        let e = Problem::read(Path::new("/no/such/file.json")).unwrap_err().to_string();
        assert!(e.contains("cannot read chain or graph file `/no/such/file.json`"), "{e}");
    }
}
