//! remat: optimal activation rematerialization (gradient checkpointing)
//! schedules for training deep networks under a memory budget.
//!
//! The data flows one way: a file becomes a validated [`Chain`], a solver turns
//! the chain and a budget into a [`Schedule`], and the exact [`simulate()`]
//! replays the schedule in bytes before anything is shown.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod chain;
pub mod exec;
pub mod graph;
pub mod joint;
pub mod report;
pub mod schedule;
pub mod simulate;
pub mod size;
pub mod slots;
pub mod solve;
pub mod synthetic;
pub mod zoo;

pub use chain::{Chain, ChainError, Stage};
pub use schedule::{Op, Schedule};
pub use simulate::{Replay, SimulateError, simulate, simulate_within};
pub use solve::{Algorithm, Solution, SolveError, SolveOptions, solve};

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
