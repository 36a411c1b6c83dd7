//! Every algorithm behind one entry point, [`solve`].
//!
//! Whatever an algorithm returns is replayed by the exact simulator before it
//! is handed out: the [`Solution`]'s makespan and peak are the simulator's, and
//! a schedule that is invalid or over budget is reported as a bug, never shown.

pub mod baselines;
pub mod exhaustive;
pub mod fit;
pub mod floating;
pub mod persistent;

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::chain::Chain;
use crate::schedule::{Op, Schedule};
use crate::simulate::{Replay, SimulateError, simulate_within};
use crate::size::format_size;
use crate::slots::{SlotChain, Slots};

/// The solvers remat offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Rotor's persistent dynamic program (Alg. 3/4, corrected), O(S L^3).
    Persistent,
    /// Shortest path over all memory states: exact in bytes, small chains only.
    Exhaustive,
    /// The floating-activation DP: fastest nested schedule, O(S L^4).
    Floating,
    /// On a chain, picks exhaustive, floating or persistent by cost (see
    /// [`auto_choice`]); on a graph, the chain solvers when it is a path, else
    /// the Checkmate MILP.
    Auto,
    /// Baseline: no rematerialization, every forward records (PyTorch's default).
    StoreAll,
    /// Baseline: PyTorch's `checkpoint_sequential` with K segments.
    Sequential,
    /// Baseline: the optimal AD-model (checkpoint-only) persistent schedule, with
    /// an F_all right before each backward.
    Revolve,
    /// Baseline: Chen et al.'s sqrt(L) segments.
    ChenSqrt,
    /// Baseline: Chen et al.'s greedy segments of bounded memory.
    ChenGreedy,
    /// The Checkmate MILP on a graph (`graph::milp`).
    Checkmate,
    /// Checkmate's LP relaxation with two-phase rounding (`graph::approx`).
    CheckmateApprox,
}

impl Algorithm {
    /// Every algorithm, in the order tables list them.
    pub const ALL: &'static [Algorithm] = &[
        Algorithm::Persistent,
        Algorithm::Exhaustive,
        Algorithm::Floating,
        Algorithm::Auto,
        Algorithm::StoreAll,
        Algorithm::Sequential,
        Algorithm::Revolve,
        Algorithm::ChenSqrt,
        Algorithm::ChenGreedy,
    ];

    /// Algorithms for graph files (also accepted on the command line); not in
    /// [`Algorithm::ALL`], which lists what solves a chain.
    pub const GRAPH: &'static [Algorithm] = &[Algorithm::Auto, Algorithm::Checkmate, Algorithm::CheckmateApprox];

    /// True for the algorithms that only solve graphs (`checkmate`, `checkmate-approx`).
    pub fn is_graph_only(self) -> bool {
        matches!(self, Algorithm::Checkmate | Algorithm::CheckmateApprox)
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Persistent => "persistent",
            Algorithm::Exhaustive => "exhaustive",
            Algorithm::Floating => "floating",
            Algorithm::Auto => "auto",
            Algorithm::StoreAll => "store-all",
            Algorithm::Sequential => "sequential",
            Algorithm::Revolve => "revolve",
            Algorithm::ChenSqrt => "chen-sqrt",
            Algorithm::ChenGreedy => "chen-greedy",
            Algorithm::Checkmate => "checkmate",
            Algorithm::CheckmateApprox => "checkmate-approx",
        }
    }

    /// One line on what the algorithm does.
    pub fn describe(self) -> &'static str {
        match self {
            Algorithm::Persistent => "optimal persistent schedule (Rotor's DP, corrected), over memory slots",
            Algorithm::Exhaustive => "exact optimum by search over every memory state; chains of up to 14 stages",
            Algorithm::Floating => {
                "fastest nested schedule (floating-activation DP; never slower than persistent), over memory slots"
            }
            Algorithm::Auto => {
                "chains: exhaustive when small, else floating when its table is modest, else persistent; \
                 graphs: the chain solvers for paths, else checkmate"
            }
            Algorithm::StoreAll => "baseline: no recomputation, every activation recorded (PyTorch's default)",
            Algorithm::Sequential => {
                "baseline: PyTorch's checkpoint_sequential, K segments (--segments K; default the fastest K that fits)"
            }
            Algorithm::Revolve => {
                "baseline: optimal schedule that checkpoints only plain activations (AD model), F_all before each B"
            }
            Algorithm::ChenSqrt => "baseline: Chen et al., sqrt(L) segments of sqrt(L) stages",
            Algorithm::ChenGreedy => "baseline: Chen et al., greedy segments of bounded memory, bound searched to fit",
            Algorithm::Checkmate => "optimal staged schedule of a graph by the Checkmate MILP",
            Algorithm::CheckmateApprox => "Checkmate's LP relaxation with two-phase rounding (fast, not optimal)",
        }
    }

    /// True for the baselines (schedules other tools produce), false for
    /// remat's own solvers.
    pub fn is_baseline(self) -> bool {
        baselines::BASELINES.contains(&self)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Algorithm, String> {
        let known = || Algorithm::ALL.iter().chain(Algorithm::GRAPH).copied();
        known().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<_> = known().map(|a| a.name()).collect();
            format!("unknown algorithm `{s}`; expected one of: {}", names.join(", "))
        })
    }
}

/// Progress callback: `(work done, total work)`, called from the solving thread.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Options shared by the solvers.
#[derive(Clone, Copy)]
pub struct SolveOptions<'a> {
    /// Number of memory slots S for the slot-based solvers (default 500).
    pub slots: usize,
    /// Called as work progresses, for long solves.
    pub progress: Option<Progress<'a>>,
    /// `sequential` only: the number of segments K (1..=L); `None` picks the
    /// fastest K that fits the budget. Other algorithms ignore it.
    pub segments: Option<usize>,
}

impl Default for SolveOptions<'_> {
    fn default() -> Self {
        SolveOptions { slots: DEFAULT_SLOTS, progress: None, segments: None }
    }
}

/// The number of memory slots used unless told otherwise (as in the paper).
pub const DEFAULT_SLOTS: usize = 500;

/// A schedule that the simulator has replayed within the budget.
#[derive(Clone, Debug)]
pub struct Solution {
    /// The schedule, with the simulator's makespan and peak.
    pub schedule: Schedule,
    /// The replay it was checked with (memory timeline included).
    pub replay: Replay,
    /// Bytes per memory slot the solver worked with (1 = exact).
    pub slot_size: u64,
    /// The makespan the solver itself predicted (checked equal to the replay's).
    pub solver_makespan: f64,
    /// The parameter a baseline settled on (`K = 4 segments`), or how `auto`
    /// fitted a DP to the budget, if any.
    pub detail: Option<String>,
    /// Why `auto` returned this schedule (`None` for the other algorithms).
    pub reason: Option<String>,
}

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
    /// The instance is too large for the algorithm or for memory.
    #[error("{0}")]
    TooLarge(String),
    /// Bad options (zero slots...).
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

fn infeasible_message(algorithm: Algorithm, budget: u64, min_budget: Option<u64>) -> String {
    let mut msg = format!("no {algorithm} schedule fits in {} ({budget} bytes)", format_size(budget));
    match min_budget {
        Some(m) => msg += &format!("; the smallest budget it can meet is {} ({m} bytes)", format_size(m)),
        None => msg += "; no budget works with these options",
    }
    msg
}

/// Solves `chain` under `budget` bytes with `algorithm`, replays the result
/// with the exact simulator and returns it.
///
/// Deterministic: the same input gives the same schedule. Complexity is the
/// algorithm's (see each module).
pub fn solve(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Result<Solution, SolveError> {
    if opts.slots == 0 {
        return Err(SolveError::Options("--slots must be at least 1".into()));
    }
    crate::guard::solve(chain, budget, algorithm, opts)?;
    let (ops, slot_size, predicted) = match algorithm {
        Algorithm::Checkmate | Algorithm::CheckmateApprox => return Err(graph_only(algorithm)),
        Algorithm::Persistent => {
            check_persistent_size(chain)?;
            let slots = Slots::new(budget, opts.slots);
            if persistent::min_peak_slots(&SlotChain::new(chain, slots)) > slots.budget {
                return Err(SolveError::Infeasible {
                    algorithm,
                    budget,
                    min_budget: persistent::min_budget(chain, opts.slots),
                });
            }
            let table = persistent_table(chain, budget, opts)?;
            let ops = table.sequence(slots.budget).expect("feasible by the min-peak check");
            (ops, slots.slot, table.makespan(slots.budget))
        }
        Algorithm::Floating => {
            check_floating_size(chain, opts.slots)?;
            let slots = Slots::new(budget, opts.slots);
            let plan = floating::Plan::new(SlotChain::new(chain, slots));
            if !plan.feasible() {
                return Err(SolveError::Infeasible {
                    algorithm,
                    budget,
                    min_budget: floating::min_budget(chain, opts.slots),
                });
            }
            let needed = plan.estimate().table_bytes;
            if needed > floating::memory_limit() {
                return Err(floating_too_large(chain, opts.slots, needed));
            }
            let table = plan.fill(opts.progress);
            let ops = table.sequence(slots.budget).expect("feasible by the plan");
            (ops, slots.slot, table.makespan(slots.budget))
        }
        Algorithm::Auto => return solve_auto(chain, budget, opts),
        Algorithm::Exhaustive => {
            check_exhaustive_size(chain)?;
            match exhaustive::fastest(chain, budget) {
                Some((time, ops)) => (ops, 1, time),
                None => {
                    return Err(SolveError::Infeasible {
                        algorithm,
                        budget,
                        min_budget: Some(exhaustive::min_peak(chain).0),
                    });
                }
            }
        }
        baseline => {
            let plan = baselines::plan(chain, budget, baseline, opts)?;
            let mut solution = checked(chain, budget, algorithm, plan.ops, plan.slot_size, plan.makespan)?;
            solution.detail = plan.detail;
            return Ok(solution);
        }
    };
    checked(chain, budget, algorithm, ops, slot_size, predicted)
}

fn check_persistent_size(chain: &Chain) -> Result<(), SolveError> {
    if chain.len() > persistent::MAX_STAGES {
        return Err(SolveError::TooLarge(format!(
            "the persistent DP handles at most {} stages; this chain has {}",
            persistent::MAX_STAGES,
            chain.len()
        )));
    }
    Ok(())
}

fn graph_only(algorithm: Algorithm) -> SolveError {
    SolveError::Options(format!(
        "{algorithm} solves graphs, not chains; `remat solve` runs it on a chain file through the chain's forward \
         graph (`remat::graph::ForwardGraph::from_chain`)"
    ))
}

fn check_exhaustive_size(chain: &Chain) -> Result<(), SolveError> {
    if chain.len() > exhaustive::MAX_STAGES {
        return Err(SolveError::TooLarge(format!(
            "exhaustive search is limited to chains of at most {} stages (its state space grows as 3^L); \
             this chain has {}. Use --algorithm persistent",
            exhaustive::MAX_STAGES,
            chain.len()
        )));
    }
    Ok(())
}

fn check_floating_size(chain: &Chain, slots: usize) -> Result<(), SolveError> {
    if chain.len() > floating::MAX_STAGES {
        return Err(SolveError::TooLarge(format!(
            "the floating DP handles at most {} stages (its tables grow as L^3 and its time as L^4); \
             this chain has {}. Use --algorithm persistent",
            floating::MAX_STAGES,
            chain.len()
        )));
    }
    let fixed = floating::upper_estimate(chain.len(), 0).table_bytes;
    if fixed > floating::memory_limit() {
        return Err(floating_too_large(chain, slots, fixed));
    }
    Ok(())
}

fn floating_too_large(chain: &Chain, slots: usize, bytes: u64) -> SolveError {
    let limit = floating::memory_limit();
    SolveError::TooLarge(format!(
        "the floating DP would need about {} ({bytes} bytes) of tables for {} stages at {slots} slots, over the \
         {} ({limit} bytes) it may use (half of this machine's memory). Use fewer --slots (the tables grow \
         linearly with them) or --algorithm persistent",
        format_size(bytes),
        chain.len(),
        format_size(limit)
    ))
}

/// Chains of at most this many stages are solved by exhaustive search under
/// `auto`: exact in bytes over every schedule, and about 0.2 s at worst on
/// random and network-like chains of 10 stages (it grows about 2.3x a stage).
pub const AUTO_EXHAUSTIVE_STAGES: usize = 10;
/// `auto` runs the floating DP when its tables need at most this many bytes...
pub const AUTO_FLOATING_BYTES: u64 = 2 << 30;
/// ...and at most this many slot-option steps (about 1 ns each per core).
pub const AUTO_FLOATING_WORK: u64 = 10_000_000_000;

/// The algorithm `auto` runs for a solve, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoChoice {
    /// Exhaustive, Floating or Persistent.
    pub algorithm: Algorithm,
    /// One line for the user.
    pub reason: String,
}

/// What `--algorithm auto` runs: exhaustive search for chains of at most
/// [`AUTO_EXHAUSTIVE_STAGES`] stages (exact in bytes, over every schedule),
/// the floating DP when an upper bound of its cost is modest
/// ([`AUTO_FLOATING_BYTES`], [`AUTO_FLOATING_WORK`], and the machine's
/// [`floating::memory_limit`]), otherwise the persistent DP. Depends only on
/// the chain's length, the budget and the slot count (and the machine's
/// memory), so the same input gets the same algorithm. O(L^2).
pub fn auto_choice(chain: &Chain, budget: u64, opts: &SolveOptions) -> AutoChoice {
    let len = chain.len();
    if len <= AUTO_EXHAUSTIVE_STAGES {
        return AutoChoice {
            algorithm: Algorithm::Exhaustive,
            reason: format!("{len} stages: exact search over every memory state is cheap"),
        };
    }
    if len > floating::MAX_STAGES {
        // Not even a plan: its estimate alone allocates O(L^2).
        return AutoChoice {
            algorithm: Algorithm::Persistent,
            reason: format!("{len} stages: over the floating DP's {}", floating::MAX_STAGES),
        };
    }
    let m = Slots::new(budget, opts.slots.max(1)).budget;
    let est = floating::upper_estimate(len, m);
    let limit = AUTO_FLOATING_BYTES.min(floating::memory_limit());
    if len <= floating::MAX_STAGES && est.table_bytes <= limit && est.work <= AUTO_FLOATING_WORK {
        return AutoChoice {
            algorithm: Algorithm::Floating,
            reason: format!(
                "{len} stages at {} slots: floating DP tables of at most {} and {:.1e} steps",
                opts.slots,
                format_size(est.table_bytes),
                est.work as f64
            ),
        };
    }
    AutoChoice {
        algorithm: Algorithm::Persistent,
        reason: format!(
            "{len} stages at {} slots: the floating DP could need {} of tables and {:.1e} steps \
             (auto allows {} and {:.0e}); force it with --algorithm floating or use fewer --slots",
            opts.slots,
            format_size(est.table_bytes),
            est.work as f64,
            format_size(limit),
            AUTO_FLOATING_WORK as f64
        ),
    }
}

/// The baselines `auto` runs beside a slot-based DP: cheap (no slots, at most
/// O(L^3)), and exact in bytes, so at a budget that is exactly one of their
/// peaks they can beat a DP that rounds sizes up to slots.
pub const AUTO_BASELINES: &[Algorithm] =
    &[Algorithm::StoreAll, Algorithm::Sequential, Algorithm::ChenGreedy, Algorithm::ChenSqrt];

/// `--algorithm auto` on a chain: exhaustive search when [`auto_choice`] says
/// so (exact). Otherwise the chosen DP fitted to the budget by replay
/// ([`fit::fitted`]: never slower than the DP's own answer), and the
/// [`AUTO_BASELINES`]; the fastest wins, ties going to the DP. So auto is
/// never slower than the DP it chose nor than any of those baselines at the
/// same budget. The solution's `reason` says what ran and why.
fn solve_auto(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<Solution, SolveError> {
    let choice = auto_choice(chain, budget, opts);
    let dp = choice.algorithm;
    if dp == Algorithm::Exhaustive {
        let mut solution = solve(chain, budget, dp, opts)?;
        solution.reason = Some(choice.reason);
        return Ok(solution);
    }
    if dp == Algorithm::Persistent {
        check_persistent_size(chain)?;
    }
    let mut best = match fit::fitted(chain, budget, opts.slots, dp, opts.progress)? {
        Some(f) => {
            let mut solution = checked(chain, budget, dp, f.ops, f.slot_size, f.replay.makespan)?;
            if f.slots_above > 0 {
                solution.detail = Some(format!(
                    "fitted by replay: the schedule the DP finds {} slot{} above the budget fits it in bytes",
                    f.slots_above,
                    if f.slots_above == 1 { "" } else { "s" }
                ));
            }
            solution.reason = Some(choice.reason.clone());
            Some(solution)
        }
        None => None,
    };
    for &baseline in AUTO_BASELINES {
        let candidate = match solve(chain, budget, baseline, opts) {
            Ok(solution) => solution,
            Err(SolveError::Infeasible { .. }) => continue,
            Err(e) => return Err(e),
        };
        let faster = match &best {
            None => true,
            Some(b) => {
                let (t, tb) = (candidate.schedule.makespan, b.schedule.makespan);
                t < tb - 1e-9 * tb.abs().max(1.0)
            }
        };
        if faster {
            let dp_time = best.as_ref().filter(|b| b.schedule.algorithm == dp.name()).map(|b| b.schedule.makespan);
            let mut solution = candidate;
            solution.reason = Some(match dp_time {
                Some(t) => format!(
                    "{baseline} is faster at this budget than the {dp} DP ({:.2} vs {t:.2}), whose rounding of \
                     sizes up to slots costs it here ({})",
                    solution.schedule.makespan, choice.reason
                ),
                None if best.is_none() => {
                    format!("{baseline} fits this budget and the {dp} DP does not with these slots ({})", choice.reason)
                }
                None => format!("{baseline} is the fastest of the baselines auto runs beside the {dp} DP"),
            });
            best = Some(solution);
        }
    }
    best.ok_or_else(|| SolveError::Infeasible {
        algorithm: Algorithm::Auto,
        budget,
        min_budget: min_budget(chain, Algorithm::Auto, opts).ok().flatten(),
    })
}

/// Replays `ops` within `budget`, checks the solver's `predicted` makespan
/// against the replay (to rounding of float sums) and wraps them as a
/// [`Solution`].
fn checked(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    ops: Vec<Op>,
    slot_size: u64,
    predicted: f64,
) -> Result<Solution, SolveError> {
    let replay = simulate_within(chain, &ops, budget).map_err(|source| SolveError::Rejected { algorithm, source })?;
    let tolerance = 1e-9 * replay.makespan.abs().max(1.0);
    if (predicted - replay.makespan).abs() > tolerance {
        return Err(SolveError::Mispredicted { algorithm, predicted, replayed: replay.makespan });
    }
    let schedule = Schedule {
        chain: Some(chain.id()),
        algorithm: algorithm.name().to_string(),
        budget,
        makespan: replay.makespan,
        peak_memory: replay.peak_memory,
        operations: ops,
    };
    Ok(Solution { schedule, replay, slot_size, solver_makespan: predicted, detail: None, reason: None })
}

/// The smallest budget, in bytes, at which `algorithm` finds a schedule with
/// these options. For `exhaustive` it is exact (and the smallest budget any
/// schedule can meet).
pub fn min_budget(chain: &Chain, algorithm: Algorithm, opts: &SolveOptions) -> Result<Option<u64>, SolveError> {
    if opts.slots == 0 {
        return Err(SolveError::Options("--slots must be at least 1".into()));
    }
    crate::guard::min_budget(chain, algorithm, opts)?;
    match algorithm {
        Algorithm::Checkmate | Algorithm::CheckmateApprox => Err(graph_only(algorithm)),
        Algorithm::Persistent => Ok(persistent::min_budget(chain, opts.slots)),
        Algorithm::Exhaustive => {
            check_exhaustive_size(chain)?;
            Ok(Some(exhaustive::min_peak(chain).0))
        }
        Algorithm::Floating => {
            check_floating_size(chain, opts.slots)?;
            Ok(floating::min_budget(chain, opts.slots))
        }
        Algorithm::Auto => {
            // The choice depends on the budget only through the slot count's
            // range of budgets; judge it at the smallest budget persistent meets.
            let probe = persistent::min_peak_exact(chain);
            let choice = auto_choice(chain, probe, opts).algorithm;
            let mut best = min_budget(chain, choice, opts)?;
            if choice != Algorithm::Exhaustive {
                // auto also runs the cheap baselines, which need no slot rounding.
                for &b in AUTO_BASELINES {
                    if let Some(m) = min_budget(chain, b, opts)? {
                        best = Some(best.map_or(m, |x| x.min(m)));
                    }
                }
            }
            Ok(best)
        }
        baseline => baselines::min_budget(chain, baseline, opts),
    }
}

/// The smallest budget any valid schedule can meet, when it can be computed
/// exactly: `Some((bytes, how))`. See [`any_min_budget`]; `None` when only
/// bounds are known.
pub fn min_budget_any(chain: &Chain) -> Option<(u64, &'static str)> {
    let any = any_min_budget(chain);
    (any.lower == any.upper).then_some((any.upper, any.method))
}

/// What is known of the smallest budget, in bytes, of any valid schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnyMinimum {
    /// No valid schedule fits below this.
    pub lower: u64,
    /// A schedule fits at this budget; equal to `lower` when exact.
    pub upper: u64,
    /// How it was established.
    pub method: &'static str,
}

/// The smallest budget of any valid schedule: exact when the nested minimum of
/// the floating DP meets [`floating::any_peak_lower_bound`] (any length up to
/// [`floating::MAX_STAGES`]; O(L^4)) or when the chain is small enough for
/// exhaustive search (up to [`exhaustive::MAX_STAGES`] stages); otherwise a
/// lower bound and the nested (or, over [`floating::MAX_STAGES`], persistent)
/// minimum. Not every optimum is nested (see `floating`), so the nested
/// minimum alone is only an upper bound.
pub fn any_min_budget(chain: &Chain) -> AnyMinimum {
    let lower = floating::any_peak_lower_bound(chain);
    let (upper, method) = if chain.len() <= floating::MAX_STAGES {
        (floating::min_peak_exact(chain), "floating DP, meeting a lower bound")
    } else {
        (persistent::min_peak_exact(chain), "persistent DP, meeting a lower bound")
    };
    if upper == lower {
        return AnyMinimum { lower, upper, method };
    }
    if chain.len() <= crate::guard::EXHAUSTIVE_MIN_BUDGET_STAGES {
        let exact = exhaustive::min_peak(chain).0;
        return AnyMinimum { lower: exact, upper: exact, method: "exhaustive search" };
    }
    let method = if chain.len() <= floating::MAX_STAGES {
        "lower bound to the floating DP's nested minimum"
    } else {
        "lower bound to the persistent DP's minimum"
    };
    AnyMinimum { lower, upper, method }
}

/// Memory, in bytes, that solving `chain` at `budget` with `algorithm` is
/// expected to take (its tables), computed before solving in O(L^2); `None`
/// for algorithms without such an estimate (floating checks its own tables,
/// see [`floating::memory_limit`]). [`solve`] refuses, with
/// [`SolveError::TooLarge`], a persistent solve whose estimate exceeds
/// [`floating::memory_limit`] (half of the machine's memory).
pub fn memory_estimate(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Option<u64> {
    match algorithm {
        Algorithm::Persistent => {
            Some(persistent::table_bytes_estimate(&SlotChain::new(chain, Slots::new(budget, opts.slots.max(1)))))
        }
        Algorithm::Auto => memory_estimate(chain, budget, auto_choice(chain, budget, opts).algorithm, opts),
        Algorithm::Revolve => Some(baselines::revolve::table_bytes_estimate(&SlotChain::new(
            chain,
            Slots::new(budget, opts.slots.max(1)),
        ))),
        _ => None,
    }
}

/// Refuses a solve whose tables (`needed` bytes) exceed the memory a solve
/// may use (the floating DP's rule, half of this machine's memory: a fixed
/// figure per machine, so the same input gets the same answer there), rather
/// than letting the system kill it midway.
fn check_memory(algorithm: Algorithm, needed: u64) -> Result<(), SolveError> {
    let limit = floating::memory_limit();
    if needed <= limit {
        return Ok(());
    }
    Err(SolveError::TooLarge(format!(
        "the {algorithm} solver's table would take about {} ({needed} bytes), over the {} it may use \
         (half of this machine's memory); use fewer --slots (its time and memory grow linearly with them)",
        format_size(needed),
        format_size(limit)
    )))
}

/// The smallest budget at which `solve(chain, budget, algorithm, opts)`
/// returns a schedule with a makespan of at most `max_makespan`, with that
/// schedule; `Ok(None)` when no budget up to store-all's peak does (below
/// the store-all time no schedule can).
///
/// It runs exactly what [`solve`] runs (same algorithm, options and slot
/// rounding at each budget), so the answer is one `remat solve` reproduces.
/// A bisection over bytes between the any-schedule lower bound and
/// store-all's peak keeps the invariant "meets at `hi`, not at `lo`", so the
/// returned budget b meets the limit and b - 1 bytes does not (or is below
/// what any schedule needs), even where the algorithm is not monotone in the
/// budget. O(log2(peak) solves).
pub fn min_budget_for_makespan(
    chain: &Chain,
    max_makespan: f64,
    algorithm: Algorithm,
    opts: &SolveOptions,
) -> Result<Option<Solution>, SolveError> {
    let meets = |budget: u64| -> Result<Option<Solution>, SolveError> {
        match solve(chain, budget, algorithm, opts) {
            Ok(s) if s.schedule.makespan <= max_makespan => Ok(Some(s)),
            Ok(_) | Err(SolveError::Infeasible { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let n = chain.len() + 1;
    let store_all: Vec<Op> = (1..=n).map(Op::FAll).chain((1..=n).rev().map(Op::B)).collect();
    let peak = crate::simulate::simulate(chain, &store_all)
        .map_err(|source| SolveError::Rejected { algorithm, source })?
        .peak_memory;
    let Some(mut best) = meets(peak)? else {
        return Ok(None);
    };
    let (mut lo, mut hi) = (floating::any_peak_lower_bound(chain).saturating_sub(1), peak);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match meets(mid)? {
            Some(s) => {
                hi = mid;
                best = s;
            }
            None => lo = mid,
        }
    }
    Ok(Some(best))
}

/// The persistent table for budgets up to `budget` bytes, after the checks
/// [`solve`] makes (chain length, memory).
fn persistent_table(chain: &Chain, budget: u64, opts: &SolveOptions) -> Result<persistent::Table, SolveError> {
    check_persistent_size(chain)?;
    let sc = SlotChain::new(chain, Slots::new(budget, opts.slots));
    check_memory(Algorithm::Persistent, persistent::table_bytes_estimate(&sc))?;
    Ok(persistent::Table::build(sc, opts.progress))
}
