//! The catalogue of chain algorithms: names, one-line descriptions, parsing.

use std::fmt;
use std::str::FromStr;

/// The solvers remat offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Rotor's persistent dynamic program (Alg. 3/4, corrected): exact in bytes
    /// where its fronts fit (`solve::exact`), else O(S L^3) over slots.
    Persistent,
    /// Shortest path over all memory states: exact in bytes, small chains only.
    Exhaustive,
    /// The floating-activation DP: fastest nested schedule, O(S L^4).
    Floating,
    /// On a chain, picks exhaustive, floating or persistent by cost (see
    /// [`crate::solve::auto_choice`]); on a graph, the chain solvers when it is a path, else
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
    /// Baseline: one selective-saving policy (a recording option of the same
    /// name) on every stage, as torchtitan and PyTorch's selective
    /// checkpointing apply it; the fastest policy that fits.
    Uniform,
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
        Algorithm::Uniform,
    ];

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
            Algorithm::Uniform => "uniform",
        }
    }

    /// One line on what the algorithm does.
    pub fn describe(self) -> &'static str {
        match self {
            Algorithm::Persistent => {
                "optimal persistent schedule (Rotor's DP, corrected), exact in bytes where its fronts fit, else over \
                 memory slots"
            }
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
            Algorithm::Uniform => {
                "baseline: one selective-saving policy (a stage option by name) on every stage, nothing else \
                 recomputed (torchtitan's and PyTorch's selective checkpointing); the fastest that fits"
            }
        }
    }

    /// True for the baselines (schedules other tools produce), false for
    /// remat's own solvers.
    pub fn is_baseline(self) -> bool {
        crate::solve::baselines::BASELINES.contains(&self)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses the names of the chain algorithms ([`Algorithm::name`]). A name
/// that is not one is an error listing them; front ends that take chain
/// algorithms only parse with `remat::problem::Method::chain_algorithm`,
/// which also tells a graph-only algorithm (`checkmate`) apart.
///
/// # Examples
///
/// ```
/// use remat::Algorithm;
///
/// let a: Algorithm = "floating".parse()?;
/// assert_eq!(a, Algorithm::Floating);
/// assert_eq!(a.to_string().parse::<Algorithm>()?, a);
/// let e = "fastest".parse::<Algorithm>().unwrap_err();
/// assert!(e.starts_with("unknown algorithm `fastest`; expected one of: persistent, "), "{e}");
/// # Ok::<(), String>(())
/// ```
impl FromStr for Algorithm {
    type Err = String;

    fn from_str(s: &str) -> Result<Algorithm, String> {
        let known = || Algorithm::ALL.iter().copied();
        known().find(|a| a.name() == s).ok_or_else(|| {
            let names: Vec<_> = known().map(|a| a.name()).collect();
            format!("unknown algorithm `{s}`; expected one of: {}", names.join(", "))
        })
    }
}
