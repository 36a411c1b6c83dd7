//! remat: optimal activation rematerialization (gradient checkpointing)
//! schedules for training deep networks under a memory budget.
//!
//! Training keeps every forward activation for the backward pass; when that
//! does not fit, some activations are dropped and recomputed. remat computes
//! which, so that training is as fast as possible within the budget, and
//! proves each answer by replaying it in an exact simulator.
//!
//! # Example
//!
//! ```
//! use remat::{Algorithm, Chain, SolveOptions, solve};
//!
//! // Two stages and a loss: times in ms, sizes in bytes.
//! let chain = Chain::from_json(r#"{
//!     "name": "two-layers", "input_size": 100,
//!     "stages": [
//!         {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
//!         {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}
//!     ]
//! }"#)?;
//! let solution = solve(&chain, 700, Algorithm::Auto, &SolveOptions::default())?;
//! // The schedule was replayed by the simulator: its peak is within budget.
//! assert!(solution.schedule.peak_memory <= 700);
//! println!("{}", remat::schedule::compact_notation(&solution.schedule.operations));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How data flows
//!
//! A file becomes a validated [`Problem`] ([`Problem::read`]: a [`Chain`] or a
//! graph, read once, from a path or standard input); [`problem::solve`], the
//! one router, sends it to the chain solvers ([`solve()`]) or the graph
//! solvers ([`graph::solve_checkmate`], [`graph::checkmate_forward`]), neither
//! of which decides where an input goes; whatever a solver returns is replayed by the exact
//! simulator ([`simulate()`], [`graph::simulate()`]) before it is handed out, and
//! the front ends (the `remat` command, the Python package) only print or run
//! it. [The model](crate::model) is the contract all of them follow.
//!
//! # Modules
//!
//! | module | what it holds |
//! |---|---|
//! | [`model`] | the rematerialization model: stages, the four operations, memory, slots |
//! | [`problem`] | what an input file holds, read once, and the one router: what to run ([`problem::Method`]), options, outcome, error |
//! | [`chain`] | the chain and its JSON form, validated with errors naming the field |
//! | [`schedule`] | operations, schedules (which name their chain), notation |
//! | [`simulate`](mod@simulate) | the exact replay in bytes: the judge of every chain schedule |
//! | [`slots`] | budgets in bytes to memory slots for the dynamic programs |
//! | [`solve`](mod@solve) | every chain algorithm behind [`solve()`], `auto`'s policy, minimum budgets |
//! | [`graph`] | forward graphs and Checkmate graphs (joint, layer-level), their simulator, the Checkmate MILP and LP rounding |
//! | [`joint`] | operator graphs (joint, operator-level, PyTorch's partitioner): the fusion-aware min-cut and its exact byte budget |
//! | `exec` | an ndarray executor that runs schedules and proves the model in Rust (feature `exec`) |
//! | [`zoo`] | real architectures (ResNet, DenseNet, Inception, VGG, GPT-2, U-Net) as chains and graphs |
//! | [`report`] | `compare` and `sweep` tables, SVG plots |
//! | [`size`] | byte sizes as people write them (`11.2GiB`) |
//! | [`error`] | [`ErrorKind`]: whether a failure is a verdict, bad input, a time limit or a bug |
//! | `cli` | the `remat` command line as a function, argument vector to exit code (feature `cli`) |
//!
//! # Errors
//!
//! Every top-level error ([`problem::Error`], the router's, and the solvers'
//! it wraps: [`SolveError`], [`graph::GraphSolveError`]; [`ProblemError`], [`joint::PartitionError`], the simulators'
//! [`SimulateError`] and [`graph::GraphSimulateError`]) says its
//! [`ErrorKind`] through `kind()`: a verdict on the budget, bad input, a time limit, or a bug in
//! remat. Front ends choose from the kind alone: the `remat` command its exit
//! code (1, 2, 3, 70), the Python package its exception.
//!
//! # Algorithms and their cost
//!
//! L is the number of stages, S the number of memory slots (500 by default).
//!
//! | algorithm | computes | time | memory |
//! |---|---|---|---|
//! | `exhaustive` | the optimum over every schedule, exact in bytes | exponential (at most 14 stages) | exponential |
//! | `floating` | the optimum over nested schedules | O(S L^4) | O(S L^3) |
//! | `persistent` | the optimum over persistent schedules (Rotor) | O(S L^3) | O(S L^2) |
//! | `auto` | exhaustive up to 10 stages, else floating or persistent fitted by replay, beside the cheap baselines | that of its DP | that of its DP |
//! | `revolve` | the best checkpoint-only (AD model) persistent schedule | O(S L^3) | O(S L^2) |
//! | `store-all`, `sequential`, `chen-sqrt`, `chen-greedy` | baselines | O(L) to O(L^3) | O(L) |
//! | `checkmate` | the optimum staged schedule of a graph (MILP) | exponential worst case | O(n^2) variables |
//! | `checkmate-approx` | LP relaxation with two-phase rounding | polynomial (one LP) | O(n^2) variables |
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod chain;
#[cfg(feature = "cli")]
pub mod cli;
pub mod error;
#[cfg(feature = "exec")]
pub mod exec;
pub mod graph;
// The graph MILP's limit (the chain solvers' are in solve::limits): used by
// the graph solvers, not part of the API.
pub(crate) mod guard;
pub mod joint;
pub mod machine;
pub mod model {
    #![doc = include_str!("../docs/model.md")]
}
pub mod problem;
pub mod report;
pub mod schedule;
pub mod simulate;
pub mod size;
pub mod slots;
pub mod solve;
// Generators of random and network-like chains: for tests, benches and
// examples, not part of the API.
#[doc(hidden)]
pub mod synthetic;
pub mod zoo;

pub use chain::{Chain, ChainError, Stage};
pub use error::ErrorKind;
pub use problem::{Problem, ProblemError};
pub use schedule::{Op, Schedule};
pub use simulate::{Replay, SimulateError, simulate, simulate_within};
pub use solve::{Algorithm, Solution, SolveError, SolveOptions, solve};

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (docs/guide.md: the executor's), run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
pub struct GuideDoctests;

/// The other chapters moved out of the README: any Rust example they gain
/// is run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../docs/design.md")]
#[doc = include_str!("../docs/results.md")]
#[doc = include_str!("../docs/python.md")]
pub struct ChapterDoctests;
