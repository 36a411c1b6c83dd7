//! Every integration test of the crate in one test binary (issue 26): one
//! link of the library instead of one per file, which was most of a cold
//! `cargo test`. Each file is a module named after it, so a file's tests run
//! with `cargo test --test suite NAME::` (e.g. `cargo test --test suite fuzz::`).
//! `tests/exec.rs` stays apart: it needs the `exec` feature.

mod common;
mod reference;

mod auto;
mod backward_frees;
mod baselines;
mod cli;
mod cli_floating;
mod cli_graph;
mod cli_one_answer;
mod cli_report;
mod docs;
mod floating_fig4;
mod floating_limits;
mod floating_solve;
mod floating_vs_exhaustive;
mod fronts_exact;
mod fuzz;
mod graph_chain;
mod graph_lift;
mod graph_milp_property;
mod graph_milp_vs_exhaustive;
mod graph_real;
mod graph_time_limit;
mod hardening;
mod hardening3;
mod hardening4;
mod in_flight;
mod joint_cli;
mod joint_fixtures;
mod joint_graph;
mod joint_properties;
mod options_floating;
mod options_persistent;
mod persistent_budgets;
mod persistent_exact_solve;
mod persistent_pinned;
mod persistent_reference;
mod persistent_vs_exhaustive;
mod recording_overhead;
mod repeated_blocks;
mod rotor_example;
mod router;
mod zoo;
