//! The algorithms that solve a Checkmate graph ([`GraphAlgorithm`]), a type of
//! their own so that no chain solver can be handed one.

use std::fmt;
use std::str::FromStr;

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
