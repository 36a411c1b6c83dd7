//! What an input file holds, read once: a [`Chain`] or a graph
//! ([`GraphFile`]: a forward graph or a Checkmate graph (the joint form)), and the one
//! router, [`solve`], that sends it to the right solvers: it owns what a user
//! asks to run ([`Method`]), the options ([`Options`]), what came back
//! ([`Outcome`]) and why nothing did ([`Error`](enum@Error)). The chain solvers
//! ([`crate::solve`](mod@crate::solve)) and the graph solvers
//! ([`crate::graph`]) sit below it; neither decides where an input goes.
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
use crate::graph::{GraphError, GraphFile, looks_like_graph};

mod method;
mod route;

pub use method::Method;
pub use route::{AUTO_EXHAUSTIVE_NODES, Error, Options, Outcome, solve};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ForwardGraph;

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
