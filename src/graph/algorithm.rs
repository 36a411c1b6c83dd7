//! The algorithms that solve a Checkmate graph ([`GraphAlgorithm`]), a type of
//! their own so that no chain solver can be handed one.

use std::fmt;
use std::str::FromStr;

use crate::solve::Algorithm;

/// What solves a Checkmate graph ([`crate::graph::solve_checkmate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GraphAlgorithm {
    /// The Checkmate MILP ([`crate::graph::milp`]): the optimal staged schedule.
    Checkmate,
    /// Checkmate's LP relaxation with two-phase rounding
    /// ([`crate::graph::approx`]): fast, not optimal.
    CheckmateApprox,
    /// Exhaustive search over graph schedules (tiny graphs only).
    Exhaustive,
}

impl GraphAlgorithm {
    /// The graph-only algorithms, as the command line lists them (exhaustive
    /// search is named `exhaustive` for chains and graphs alike).
    pub const GRAPH_ONLY: &'static [GraphAlgorithm] = &[GraphAlgorithm::Checkmate, GraphAlgorithm::CheckmateApprox];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            GraphAlgorithm::Checkmate => "checkmate",
            GraphAlgorithm::CheckmateApprox => "checkmate-approx",
            GraphAlgorithm::Exhaustive => "exhaustive",
        }
    }

    /// One line on what the algorithm does.
    pub fn describe(self) -> &'static str {
        match self {
            GraphAlgorithm::Checkmate => "optimal staged schedule of a graph by the Checkmate MILP",
            GraphAlgorithm::CheckmateApprox => "Checkmate's LP relaxation with two-phase rounding (fast, not optimal)",
            GraphAlgorithm::Exhaustive => "exact optimum by search over graph schedules (tiny graphs only)",
        }
    }
}

impl fmt::Display for GraphAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GraphAlgorithm {
    type Err = String;

    /// Parses the graph-only names (`checkmate`, `checkmate-approx`).
    fn from_str(s: &str) -> Result<GraphAlgorithm, String> {
        GraphAlgorithm::GRAPH_ONLY.iter().copied().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<_> = GraphAlgorithm::GRAPH_ONLY.iter().map(|a| a.name()).collect();
            format!("unknown graph algorithm `{s}`; expected one of: {}", names.join(", "))
        })
    }
}

/// What a user asks to run: a chain algorithm (which a forward graph that is
/// a path also takes, and `auto` and `exhaustive` on any graph), or a
/// graph-only one. The command line's `--algorithm` parses into this.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// A chain algorithm.
    Chain(Algorithm),
    /// A graph-only algorithm (`checkmate`, `checkmate-approx`).
    Graph(GraphAlgorithm),
}

impl Method {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Method::Chain(a) => a.name(),
            Method::Graph(g) => g.name(),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Method, String> {
        if let Ok(g) = s.parse::<GraphAlgorithm>() {
            return Ok(Method::Graph(g));
        }
        s.parse::<Algorithm>().map(Method::Chain).map_err(|_| {
            let names: Vec<&str> = Algorithm::ALL
                .iter()
                .map(|a| a.name())
                .chain(GraphAlgorithm::GRAPH_ONLY.iter().map(|g| g.name()))
                .collect();
            format!("unknown algorithm `{s}`; expected one of: {}", names.join(", "))
        })
    }
}

impl From<Algorithm> for Method {
    fn from(a: Algorithm) -> Method {
        Method::Chain(a)
    }
}

impl From<GraphAlgorithm> for Method {
    fn from(g: GraphAlgorithm) -> Method {
        Method::Graph(g)
    }
}
