//! Guards before work: each solver family's cost estimated from the chain's
//! length, the slot count and the budget, before anything is allocated or
//! looped over, and a refusal ([`SolveError::TooLarge`]) naming the estimate
//! and what to change when it would not finish in reasonable time or fit in
//! memory.
//!
//! Estimates are counted in *steps*, the inner-loop iterations of each
//! algorithm, so that the same input gets the same verdict on every machine;
//! the limits are set from measurements on a 2-core machine (about 1.25 ns
//! per persistent step, 1 ns per floating step, with two threads), so that
//! anything allowed finishes within about ten minutes there. Every function
//! here is O(L) or less (the floating estimate is O(L^2) and only runs at
//! most [`floating::MAX_STAGES`] stages; the persistent one keys sub-chains
//! by content, O(L^2), up to [`crate::solve::distinct::ESTIMATE_MAX_STAGES`]
//! stages).
//!
//! Memory is checked against [`memory_limit`]: half the machine's physical
//! memory, and no more than half of what the process's address-space limit
//! (`ulimit -v`) leaves.

use crate::Chain;
use crate::size::format_size;
use crate::slots::Slots;
use crate::solve::{Algorithm, Remedy, SolveError, SolveOptions, exhaustive, floating, persistent};

/// The most steps a persistent-style DP (persistent, revolve) may take:
/// L^3 / 6 x (M + 2) for M budget slots (the min-peak pass and the table).
pub const PERSISTENT_MAX_STEPS: f64 = 5e11;
/// The most steps the floating DP may take ([`floating::upper_estimate`]).
pub const FLOATING_MAX_STEPS: f64 = 5e11;
/// Exhaustive search solves chains of at most this many stages (its state
/// space grows about 3.7x a stage: 11 s at 13 stages, about 40 s at 14).
pub const EXHAUSTIVE_SOLVE_STAGES: usize = exhaustive::MAX_STAGES;
/// Exhaustive search for the smallest budget (`min_peak`) at most this many
/// stages: it explores every memory state without a budget to prune them, 4x
/// slower than a solve (12 s at 12 stages, 52 s at 13, minutes at 14).
pub const EXHAUSTIVE_MIN_BUDGET_STAGES: usize = 12;

/// `sequential` without `--segments` and `chen-greedy` try O(L) candidate
/// schedules, each replayed in O(L), and hold them all (about 4 L^2 bytes):
/// at most this many stages (0.4 GB, about 10^8 steps).
pub const CANDIDATE_SEARCH_MAX_STAGES: usize = 10_000;

/// The memory, in bytes, one solve may use for its tables: half of the
/// machine's physical memory (`MemTotal` of `/proc/meminfo`; 4 GiB where it
/// cannot be read), and at most half of what the address-space
/// limit (`Max address space` of `/proc/self/limits`) leaves above the
/// process's current size. Half, because tables are not the only allocation
/// and a second copy may exist while a result is built. O(1) (two small file
/// reads).
pub fn memory_limit() -> u64 {
    let physical = physical_memory().map_or(4 << 30, |b| b / 2);
    match address_space_left() {
        Some(left) => physical.min(left / 2),
        None => physical,
    }
}

fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes of address space the process may still map: the soft
/// `RLIMIT_AS` less the current virtual size; `None` when unlimited or
/// unreadable (not Linux).
fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let limit = address_space_limit(&limits)?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let used = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib.saturating_mul(1024));
    Some(limit.saturating_sub(used))
}

/// The soft address-space limit in bytes from the text of
/// `/proc/self/limits` (`Max address space  4294967296  unlimited  bytes`);
/// `None` when unlimited or absent.
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    line.trim_start_matches("Max address space").split_whitespace().next()?.parse().ok()
}

/// Refuses an [`SolveOptions::exact_memory`] above [`memory_limit`] (half
/// of this machine's memory, or of what the address-space limit leaves):
/// the exact fronts would grow until an allocation failed and the process
/// aborted, minutes later. Checked by [`solve`] and [`min_budget`], so every
/// front end gets it before any work. O(1).
pub fn exact_memory(opts: &SolveOptions) -> Result<(), SolveError> {
    let Some(asked) = opts.exact_memory else { return Ok(()) };
    let limit = memory_limit();
    if asked <= limit {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "exact memory {} ({asked} bytes) is more than this machine can give a solve: {} ({limit} bytes), half of \
             its memory or of what the process's address-space limit leaves",
            format_size(asked),
            format_size(limit)
        ),
        remedy: Remedy::ExactMemoryAtMost(limit),
    })
}

/// Refuses, before any work, a [`crate::solve::solve`] of `chain` at `budget`
/// with `algorithm` that would not finish or fit (see the module's limits),
/// or whose [`exact_memory`] is more than the machine has.
/// `auto` is judged by what it would run. O(L^2) at most.
pub fn solve(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Result<(), SolveError> {
    exact_memory(opts)?;
    let len = chain.len();
    let m = Slots::new(budget, opts.slots.get()).capacity;
    match algorithm {
        Algorithm::Persistent | Algorithm::Revolve => {
            if len > persistent::MAX_STAGES {
                return Err(SolveError::TooLarge {
                    reason: format!(
                        "the {algorithm} DP handles at most {} stages; this chain has {len}",
                        persistent::MAX_STAGES
                    ),
                    remedy: Remedy::Use(Algorithm::ChenSqrt),
                });
            }
            let steps = if algorithm == Algorithm::Persistent {
                persistent_steps_shared(chain, budget, opts.slots.get())
            } else {
                persistent_steps(len, m)
            };
            dp_steps(algorithm, len, steps, PERSISTENT_MAX_STEPS, opts.slots.get(), true)
        }
        Algorithm::Floating => {
            if len > floating::MAX_STAGES {
                return Err(SolveError::TooLarge {
                    reason: format!(
                        "the floating DP handles at most {} stages (its tables grow as L^3 and its time as L^4); this \
                     chain has {len}",
                        floating::MAX_STAGES
                    ),
                    remedy: Remedy::Use(Algorithm::Persistent),
                });
            }
            let steps = floating::upper_estimate_shared(chain, Slots::new(budget, opts.slots.get())).work as f64;
            dp_steps(algorithm, len, steps, FLOATING_MAX_STEPS, opts.slots.get(), true)
        }
        Algorithm::Exhaustive => exhaustive_stages(chain, EXHAUSTIVE_SOLVE_STAGES, "a solve"),
        Algorithm::Auto => solve(chain, budget, crate::solve::auto_choice(chain, budget, opts).algorithm, opts),
        Algorithm::Sequential if opts.segments.is_some() => Ok(()),
        Algorithm::Sequential | Algorithm::ChenGreedy => candidate_search(algorithm, len),
        _ => Ok(()),
    }
}

/// Steps one cell of the min-peak pass counts for, against the DP table's
/// cells the limits are set in: it reads its table by columns. Measured on a
/// 2-core machine: `remat min-memory -a persistent` on a 1,000-stage chain
/// takes 35 s, about 41 passes of L^3 / 6 cells at 5 ns each.
pub const MIN_PEAK_CELL_STEPS: f64 = 4.0;

/// How many min-peak passes the slot-based smallest budget
/// ([`crate::slots::smallest_feasible_budget`]) runs at most with `slots`
/// slots: one exact probe, then, unless a slot is one byte throughout (the
/// probe answers), a doubling search and a bisection over bytes, together
/// about log2 of the largest budget it can reach (store-all's peak, at most
/// the sum of every size). O(L).
pub fn min_peak_passes(chain: &Chain, slots: usize) -> f64 {
    let total = size_sum(chain);
    if slots as u64 >= total {
        return 2.0;
    }
    2.0 + f64::from(u64::BITS - total.leading_zeros()) + 1.0
}

/// The sum of every size of `chain`, its loss included (at least store-all's
/// peak). O(L).
fn size_sum(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    (0..=n).fold(0u64, |t, l| {
        let stage = if l == 0 {
            0
        } else {
            chain.saved_size(l).saturating_add(chain.forward_overhead(l)).saturating_add(chain.backward_overhead(l))
        };
        t.saturating_add(chain.output_size(l)).saturating_add(chain.gradient_size(l)).saturating_add(stage)
    })
}

/// Steps the slot-based smallest budget (persistent, revolve, auto) takes
/// with `opts`: [`min_peak_passes`] passes at [`MIN_PEAK_CELL_STEPS`] steps
/// a cell, each pass over the split candidates of the distinct sub-chains
/// (issue 25: the min-peak pass fills each distinct one once; at most L^3 / 6,
/// every cell above [`crate::solve::distinct::ESTIMATE_MAX_STAGES`] stages).
/// O(L^2) up to that many stages, else O(L).
pub fn min_budget_steps(chain: &Chain, opts: &SolveOptions) -> f64 {
    let len = chain.len();
    let cells = if len + 1 > crate::solve::distinct::ESTIMATE_MAX_STAGES {
        cube(len) / 6.0
    } else {
        // Stages equal in bytes, at one byte a slot: the passes near the
        // smallest budget use small slots, where rounding merges nothing.
        let total = size_sum(chain).max(1);
        let sc = crate::slots::SlotChain::new(chain, Slots::new(total, usize::try_from(total).unwrap_or(usize::MAX)));
        (crate::solve::distinct::Distinct::new(&sc, true).splits() as f64).min(cube(len) / 6.0)
    };
    cells * MIN_PEAK_CELL_STEPS * min_peak_passes(chain, opts.slots.get())
}

/// Seconds `steps` take on the 2-core machine the limits were measured on
/// (about 1.25 ns a step): for a note before long work.
pub fn seconds_for(steps: f64) -> f64 {
    steps * 1.25e-9
}

/// Refuses, before any work, a [`crate::solve::min_budget`] of `chain` with
/// `algorithm` that would not finish. The slot-based minimum bisects over
/// budgets with the min-peak pass (L^3 / 6 cells at [`MIN_PEAK_CELL_STEPS`]
/// steps each) [`min_peak_passes`] times. O(L^2) at most.
pub fn min_budget(chain: &Chain, algorithm: Algorithm, opts: &SolveOptions) -> Result<(), SolveError> {
    exact_memory(opts)?;
    let len = chain.len();
    let rounds = f64::from(usize::BITS - opts.slots.get().leading_zeros()) + 1.0;
    match algorithm {
        Algorithm::Persistent | Algorithm::Revolve | Algorithm::Auto => {
            let steps = min_budget_steps(chain, opts);
            dp_steps(algorithm, len, steps, PERSISTENT_MAX_STEPS, opts.slots.get(), false)?;
            if algorithm == Algorithm::Auto
                && exhaustive::equivalent_stages(chain) <= crate::solve::AUTO_EXHAUSTIVE_STAGES
            {
                exhaustive_stages(chain, EXHAUSTIVE_MIN_BUDGET_STAGES, "the smallest budget")?;
            }
            Ok(())
        }
        Algorithm::Floating => {
            if len > floating::MAX_STAGES {
                return solve(chain, u64::MAX, algorithm, opts);
            }
            let steps = floating::upper_estimate(len, 0).work as f64 * rounds;
            dp_steps(algorithm, len, steps, FLOATING_MAX_STEPS, opts.slots.get(), false)
        }
        Algorithm::Exhaustive => exhaustive_stages(chain, EXHAUSTIVE_MIN_BUDGET_STAGES, "the smallest budget"),
        Algorithm::Sequential if opts.segments.is_some() => Ok(()),
        Algorithm::Sequential | Algorithm::ChenGreedy => candidate_search(algorithm, len),
        _ => Ok(()),
    }
}

/// Refuses, before any work, [`crate::solve::any_min_budget`] on `chain`
/// when it would not finish: its exact pass is the floating DP's min-peak
/// (L^4 / 24 cells) up to [`floating::MAX_STAGES`] stages, else the
/// persistent one (L^3 / 6), each cell [`MIN_PEAK_CELL_STEPS`] steps. O(1).
pub fn any_min_budget(chain: &Chain) -> Result<(), SolveError> {
    let len = chain.len();
    let cells = if len <= floating::MAX_STAGES { cube(len) * len as f64 / 24.0 } else { cube(len) / 6.0 };
    let steps = cells * MIN_PEAK_CELL_STEPS;
    if steps <= PERSISTENT_MAX_STEPS {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "the smallest budget of any schedule of a {len}-stage chain takes about {steps:.1e} steps to compute (the \
         limit is {PERSISTENT_MAX_STEPS:.0e}, about ten minutes)"
        ),
        remedy: Remedy::FewerStages,
    })
}

/// [`persistent_steps`] counting distinct sub-chains only (issue 25: the
/// persistent table and its min-peak pass fill each distinct one once, so
/// a stack of repeated blocks is not refused for cells it no longer fills):
/// the split candidates of the distinct cells at the solve's rounding, times
/// M + 2. O(L^2) up to [`crate::solve::distinct::ESTIMATE_MAX_STAGES`]
/// stages, above which every cell counts (O(1)).
fn persistent_steps_shared(chain: &Chain, budget: u64, slots: usize) -> f64 {
    let len = chain.len();
    let disc = Slots::new(budget, slots);
    if len + 1 > crate::solve::distinct::ESTIMATE_MAX_STAGES {
        return persistent_steps(len, disc.capacity);
    }
    let sc = crate::slots::SlotChain::new(chain, disc);
    let splits = crate::solve::distinct::Distinct::new(&sc, true).splits() as f64;
    splits.min(cube(len) / 6.0) * (disc.capacity as f64 + 2.0)
}

/// L^3 as a float (no overflow for any length).
fn cube(len: usize) -> f64 {
    (len as f64).powi(3)
}

/// Steps of the persistent DP at `m` budget slots: the min-peak pass and the
/// table, each about L^3 / 6 cells, the table's with a row of M + 1 budgets.
fn persistent_steps(len: usize, m: usize) -> f64 {
    cube(len) / 6.0 * (m as f64 + 2.0)
}

fn dp_steps(
    algorithm: Algorithm,
    len: usize,
    steps: f64,
    max: f64,
    slots: usize,
    slots_help: bool,
) -> Result<(), SolveError> {
    if steps <= max {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "the {algorithm} DP would take about {steps:.1e} steps for {len} stages at {slots} slots (the limit is \
         {max:.0e}, about ten minutes)"
        ),
        remedy: if slots_help { Remedy::FewerSlots } else { Remedy::FewerStages },
    })
}

/// Refuses exhaustive search for `what` on a chain over `max` stages,
/// counted by [`exhaustive::equivalent_stages`] (L without options). O(L).
fn exhaustive_stages(chain: &Chain, max: usize, what: &str) -> Result<(), SolveError> {
    let (len, equivalent) = (chain.len(), exhaustive::equivalent_stages(chain));
    if equivalent <= max {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "exhaustive search for {what} is limited to chains of at most {max} stages (its state space grows about \
         4x a stage: {equivalent} stages would take minutes); this chain has {len}{}",
            options_note(len, equivalent)
        ),
        remedy: Remedy::Use(Algorithm::Floating),
    })
}

/// What a stage count in a refusal of exhaustive search means for a chain
/// with options: empty when `equivalent` (its
/// [`exhaustive::equivalent_stages`]) is its length `len`.
pub(crate) fn options_note(len: usize, equivalent: usize) -> String {
    if equivalent == len {
        return String::new();
    }
    format!(
        ", whose recording options give it as many memory states as {equivalent} stages without options (each held \
         activation also remembers its option)"
    )
}

fn candidate_search(algorithm: Algorithm, len: usize) -> Result<(), SolveError> {
    if len <= CANDIDATE_SEARCH_MAX_STAGES {
        return Ok(());
    }
    let hint = if algorithm == Algorithm::Sequential { " (with a given number of segments it is O(L))" } else { "" };
    Err(SolveError::TooLarge {
        reason: format!(
            "{algorithm} searches over about {len} candidate schedules of {len} stages each (about {:.1e} steps and {} \
         of candidates); remat does this for at most {CANDIDATE_SEARCH_MAX_STAGES} stages{hint}",
            (len as f64).powi(2),
            format_size((len as u64).saturating_mul(len as u64).saturating_mul(4))
        ),
        remedy: Remedy::Use(Algorithm::ChenSqrt),
    })
}

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

/// Refuses a table of `needed` bytes above [`memory_limit`], naming both.
pub fn memory(algorithm: Algorithm, needed: u64) -> Result<(), SolveError> {
    let limit = memory_limit();
    if needed <= limit {
        return Ok(());
    }
    Err(SolveError::TooLarge {
        reason: format!(
            "the {algorithm} solver's tables would take about {} ({needed} bytes), over the {} ({limit} bytes) it may \
         use (half of this machine's memory, or of what the process's address-space limit leaves)",
            format_size(needed),
            format_size(limit)
        ),
        remedy: Remedy::FewerSlots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stage;

    fn chain(len: usize) -> Chain {
        Chain::new("c", 10, vec![Stage::simple(1.0, 2.0, 10, 20); len], Stage::zero_loss()).unwrap()
    }

    #[test]
    fn milp_estimate_refuses_a_2000_node_joint_graph_only() {
        assert!(milp(600).is_ok());
        let err = milp(2000).unwrap_err();
        assert!(err.contains("2000 joint nodes") && err.contains("14.90 GiB"), "{err}");
    }

    #[test]
    fn reads_the_address_space_limit() {
        let limited = "Limit                     Soft Limit           Hard Limit           Units\n\
                       Max cpu time              unlimited            unlimited            seconds\n\
                       Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(address_space_limit(limited), Some(4_294_967_296));
        let unlimited = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_limit(unlimited), None);
        assert_eq!(address_space_limit(""), None);
    }

    #[test]
    fn persistent_is_refused_on_3000_stages_at_500_slots_but_not_at_100() {
        // Every stage different: no sub-chain is shared.
        let stages = (0..3000).map(|l| Stage::simple(1.0 + l as f64, 2.0, 10, 20)).collect();
        let c = Chain::new("c", 10, stages, Stage::zero_loss()).unwrap();
        let at = |c: &Chain, slots: usize| {
            let slots = std::num::NonZeroUsize::new(slots).unwrap();
            solve(c, 1 << 30, Algorithm::Persistent, &SolveOptions { slots, ..SolveOptions::default() })
        };
        let err = at(&c, 500).unwrap_err().to_string();
        assert!(err.contains("3000 stages at 500 slots") && err.contains("fewer memory slots"), "{err}");
        assert!(at(&c, 100).is_ok());
        // 3,000 identical stages: about 3 L distinct sub-chains (issue 25),
        // so the table it would fill is small enough.
        assert!(at(&chain(3000), 500).is_ok());
    }

    #[test]
    fn exhaustive_min_budget_stops_at_12_stages() {
        let opts = SolveOptions::default();
        assert!(min_budget(&chain(12), Algorithm::Exhaustive, &opts).is_ok());
        let err = min_budget(&chain(14), Algorithm::Exhaustive, &opts).unwrap_err().to_string();
        assert!(err.contains("at most 12 stages") && err.contains("this chain has 14"), "{err}");
        assert!(solve(&chain(14), 1 << 30, Algorithm::Exhaustive, &opts).is_ok());
    }

    #[test]
    fn the_smallest_budget_of_a_10000_stage_chain_is_refused_and_of_2000_allowed() {
        // Issue 27: `min-memory` ran 318 s at 2,000 stages and past 300 s at
        // 10,000; the estimate counted a tenth of the min-peak passes.
        let opts = SolveOptions::default();
        for algorithm in [Algorithm::Auto, Algorithm::Persistent] {
            assert!(min_budget(&chain(2000), algorithm, &opts).is_ok());
            let err = min_budget(&chain(10_000), algorithm, &opts).unwrap_err().to_string();
            assert!(err.contains("10000 stages"), "{err}");
        }
        assert!(any_min_budget(&chain(2000)).is_ok());
        assert!(matches!(any_min_budget(&chain(10_000)), Err(SolveError::TooLarge { .. })));
        // One byte a slot: the exact probe answers, two passes.
        assert_eq!(min_peak_passes(&chain(10), usize::MAX), 2.0);
        assert!(min_peak_passes(&chain(100), 500) > 10.0);
    }

    #[test]
    fn a_100000_stage_chain_is_refused_by_every_dp_at_once() {
        let c = chain(100_000);
        let opts = SolveOptions::default();
        for a in [Algorithm::Auto, Algorithm::Persistent, Algorithm::Floating, Algorithm::Revolve] {
            assert!(matches!(solve(&c, 1 << 30, a, &opts), Err(SolveError::TooLarge { .. })), "{a}");
        }
        assert!(matches!(any_min_budget(&c), Err(SolveError::TooLarge { .. })));
        assert!(solve(&c, 1 << 30, Algorithm::ChenSqrt, &opts).is_ok());
    }
}
