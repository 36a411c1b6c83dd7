//! The graph solvers' limit: the Checkmate MILP (and its LP relaxation)
//! refused, before its model is built, when its estimated size would not fit
//! (issue 26: the chain solvers' limits are written once beside them, in
//! [`crate::solve::limits`]; the machine's memory is
//! [`crate::machine::memory_limit`]).

use crate::machine::memory_limit;
use crate::size::format_size;

/// Bytes the Checkmate MILP (or its LP relaxation) takes per squared node of
/// the joint graph: its variables and constraints grow as T^2 for T joint
/// nodes. Measured: 1.2 GB for densenet121's layer graph (307 forward nodes),
/// 3.9 GB peak resident for densenet201's (507; 1015 joint nodes), with
/// microlp, the solver's own copy included.
pub const MILP_BYTES_PER_NODE_SQUARED: u64 = 4_000;
/// The most memory remat lets a MILP formulation take, below
/// [`memory_limit`]: beyond it, building the model alone takes minutes
/// whatever `--time-limit` says.
pub const MILP_MAX_BYTES: u64 = 4 << 30;

/// Refuses, before the model is built, the Checkmate MILP or LP of a joint
/// graph of `nodes` nodes whose estimated size
/// ([`MILP_BYTES_PER_NODE_SQUARED`] x T^2) exceeds [`MILP_MAX_BYTES`] or
/// [`memory_limit`]; the message names the estimate and what to change. O(1).
pub fn milp(nodes: usize) -> Result<(), String> {
    let needed = (nodes as u64).saturating_mul(nodes as u64).saturating_mul(MILP_BYTES_PER_NODE_SQUARED);
    let limit = MILP_MAX_BYTES.min(memory_limit());
    if needed <= limit {
        return Ok(());
    }
    Err(format!(
        "the Checkmate MILP of this graph ({nodes} joint nodes) would take about {} to build (the limit is {}), and \
         minutes before the time limit applies; coarsen the graph (e.g. `remat zoo ... --graph blocks`) or solve it \
         as a chain",
        format_size(needed),
        format_size(limit)
    ))
}

/// Seconds the Checkmate MILP's build (formulation and hand-over to the
/// solver) takes per squared joint node, measured with microlp on a shared
/// 2-core machine: 4.4 s for densenet201's layer graph (1015 joint nodes).
pub const MILP_BUILD_SECONDS_PER_NODE_SQUARED: f64 = 5e-6;

/// Estimated seconds to build the Checkmate MILP of a joint graph of `nodes`
/// nodes ([`MILP_BUILD_SECONDS_PER_NODE_SQUARED`] x T^2): when a time limit
/// leaves less, the MILP is skipped rather than started. O(1).
pub fn milp_build_seconds(nodes: usize) -> f64 {
    (nodes as f64).powi(2) * MILP_BUILD_SECONDS_PER_NODE_SQUARED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milp_estimate_refuses_a_2000_node_joint_graph_only() {
        assert!(milp(600).is_ok());
        let err = milp(2000).unwrap_err();
        assert!(err.contains("2000 joint nodes") && err.contains("14.90 GiB"), "{err}");
    }
}
