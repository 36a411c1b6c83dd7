//! Why a chain solve returned no schedule.

use thiserror::Error;

use crate::error::ErrorKind;
use crate::simulate::SimulateError;
use crate::size::format_size;
use crate::solve::Algorithm;

/// Why no schedule came back.
#[derive(Debug, Error)]
pub enum SolveError {
    /// No schedule of this algorithm fits the budget.
    #[error("{}", infeasible_message(*algorithm, *budget, *min_budget))]
    Infeasible {
        /// The algorithm asked.
        algorithm: Algorithm,
        /// The budget asked, in bytes.
        budget: u64,
        /// The smallest budget at which this algorithm finds a schedule, if known.
        min_budget: Option<u64>,
    },
    /// The instance is too large for the algorithm or for memory: `reason`
    /// says why (with the estimate), `remedy` what to change.
    #[error("{reason}; {remedy}")]
    TooLarge {
        /// Why (the chain's length, the table's estimated bytes...).
        reason: String,
        /// What to change.
        remedy: Remedy,
    },
    /// Bad options (zero slots, a segment count out of range...), in the
    /// library's words; front ends name their own flags.
    #[error("{0}")]
    Options(String),
    /// The solver produced a schedule the simulator rejected: a bug in remat.
    #[error("internal error: the {algorithm} schedule failed its replay ({source}); please report this")]
    Rejected {
        /// The algorithm at fault.
        algorithm: Algorithm,
        /// What the simulator said.
        source: SimulateError,
    },
    /// The solver's makespan differs from its schedule's replay: a bug in remat.
    #[error(
        "internal error: {algorithm} predicted makespan {predicted} but its schedule replays at {replayed}; please report this"
    )]
    Mispredicted {
        /// The algorithm at fault.
        algorithm: Algorithm,
        /// What the solver claimed.
        predicted: f64,
        /// What the simulator measured.
        replayed: f64,
    },
}

impl SolveError {
    /// What kind of failure this is: [`Infeasible`](SolveError::Infeasible)
    /// is [`ErrorKind::Infeasible`], [`TooLarge`](SolveError::TooLarge) and
    /// [`Options`](SolveError::Options) are [`ErrorKind::Input`],
    /// [`Rejected`](SolveError::Rejected) and
    /// [`Mispredicted`](SolveError::Mispredicted) (bugs in remat)
    /// [`ErrorKind::Internal`].
    pub fn kind(&self) -> ErrorKind {
        // No wildcard: a new variant must choose its kind here.
        match self {
            SolveError::Infeasible { .. } => ErrorKind::Infeasible,
            SolveError::TooLarge { .. } | SolveError::Options(_) => ErrorKind::Input,
            SolveError::Rejected { .. } | SolveError::Mispredicted { .. } => ErrorKind::Internal,
        }
    }
}

/// What to change when a solve is refused as too large. Front ends map it to
/// their own options (the CLI to `--slots` and `--algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// Fewer memory slots: time and table memory grow linearly with them.
    FewerSlots,
    /// Fewer memory slots, or another algorithm.
    FewerSlotsOr(Algorithm),
    /// Another algorithm.
    Use(Algorithm),
    /// A coarser chain: fewer, larger stages.
    FewerStages,
    /// Less exact memory: at most this many bytes.
    ExactMemoryAtMost(u64),
}

impl std::fmt::Display for Remedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remedy::FewerSlots => f.write_str("use fewer memory slots (time and tables grow linearly with them)"),
            Remedy::FewerSlotsOr(a) => {
                write!(f, "use fewer memory slots (time and tables grow linearly with them), or the {a} algorithm")
            }
            Remedy::Use(a) => write!(f, "use the {a} algorithm"),
            Remedy::FewerStages => f.write_str("group the stages into fewer, larger ones"),
            Remedy::ExactMemoryAtMost(m) => {
                write!(f, "allow the exact answer at most {} ({m} bytes), or less", format_size(*m))
            }
        }
    }
}

fn infeasible_message(algorithm: Algorithm, budget: u64, min_budget: Option<u64>) -> String {
    let mut msg = format!("no {algorithm} schedule fits in {} ({budget} bytes)", format_size(budget));
    match min_budget {
        Some(m) => msg += &format!("; the smallest budget it can meet is {} ({m} bytes)", format_size(m)),
        None => msg += "; no budget works with these options",
    }
    msg
}
