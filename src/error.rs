//! What kind of failure an error is, said once by the error itself, so that
//! every front end chooses its response from the kind and never from the
//! variants.

/// The kind of a library error. Each top-level error (the router's
/// [`problem::Error`](crate::problem::Error), a solve's
/// [`SolveError`](crate::SolveError) and
/// [`GraphSolveError`](crate::graph::GraphSolveError), reading's
/// [`ProblemError`](crate::ProblemError), the joint min-cut's
/// [`PartitionError`](crate::joint::PartitionError) and
/// [`BudgetError`](crate::joint::BudgetError), a replay's
/// [`SimulateError`](crate::SimulateError) and
/// [`GraphSimulateError`](crate::graph::GraphSimulateError)) has a `kind()`
/// method that returns it. The `remat` command maps it to its exit code
/// (`remat::cli::Exit`: 1, 2, 3, 70), the Python package to its exception
/// (`InfeasibleError`, `ValueError`, `RematError`, `InternalError`).
///
/// ```
/// use remat::{Algorithm, Chain, ErrorKind, SolveOptions, solve};
///
/// let chain = Chain::from_json(r#"{"name": "one", "input_size": 100, "stages": [
///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
/// // A budget below what any schedule needs is a verdict, not bad input.
/// let e = solve(&chain, 10, Algorithm::Persistent, &SolveOptions::default()).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::Infeasible);
/// // Five segments of a one-stage chain is the caller's mistake.
/// let opts = SolveOptions { segments: Some(5), ..SolveOptions::default() };
/// let e = solve(&chain, 1000, Algorithm::Sequential, &opts).unwrap_err();
/// assert_eq!(e.kind(), ErrorKind::Input);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The answer is no: nothing the algorithm considers fits the budget.
    /// The input was valid; the error says the smallest budget when known.
    Infeasible,
    /// The input or the options are at fault (a field, a size, an algorithm
    /// that does not apply, an instance too large for the algorithm): the
    /// message says what to change.
    Input,
    /// A time limit passed before any schedule was found: no verdict on the
    /// budget, a longer limit may find one.
    TimeLimit,
    /// Nothing the caller gave is at fault: a bug in remat (a schedule its
    /// simulator rejects, a solver's makespan that its replay contradicts)
    /// or a failure of the LP/ILP solver remat calls.
    Internal,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 4] =
        [ErrorKind::Infeasible, ErrorKind::Input, ErrorKind::TimeLimit, ErrorKind::Internal];

    /// The kind's name: `infeasible`, `input`, `time_limit` or `internal`.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::Infeasible => "infeasible",
            ErrorKind::Input => "input",
            ErrorKind::TimeLimit => "time_limit",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ErrorKind {
    type Err = String;

    /// Parses a [`name`](ErrorKind::name).
    fn from_str(s: &str) -> Result<ErrorKind, String> {
        ErrorKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
            format!("`{s}` is not an error kind: one of {}", names.join(", "))
        })
    }
}
