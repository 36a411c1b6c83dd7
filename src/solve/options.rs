//! Options shared by the chain solvers.

use std::num::NonZeroUsize;

/// Progress callback: `(work done, total work)`, called from the solving thread.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Options shared by the solvers.
#[derive(Clone, Copy)]
pub struct SolveOptions<'a> {
    /// Number of memory slots S for the slot-based solvers (default 500):
    /// never 0, by its type.
    pub slots: NonZeroUsize,
    /// Called as work progresses, for long solves.
    pub progress: Option<Progress<'a>>,
    /// `sequential` only: the number of segments K (1..=L); `None` picks the
    /// fastest K that fits the budget. Other algorithms ignore it.
    pub segments: Option<usize>,
    /// The most memory, in bytes, that the persistent optimum exact in bytes
    /// ([`crate::solve::fronts`]) may take in `persistent`, `floating` and
    /// `auto` (and their smallest budgets); past it they answer with the
    /// slot DP, rounded, and say so. `None` (the default): the memory of the
    /// slot table these options would build, or 256 MiB if that is more.
    /// `Some(0)`: always rounded (the slot DP's speed). Larger: exact on
    /// longer chains, in more time (ResNet-1001's 339 stages at half of
    /// store-all: about 750 MB and 25 s, against 1 s rounded).
    pub exact_memory: Option<u64>,
    /// Micro-batches a pipeline rank holds at once (issue 28, default 1):
    /// the schedule is planned so that its peak plus `in_flight - 1` times
    /// its residue fits the budget ([`crate::solve::in_flight`]), by every
    /// algorithm. At most [`crate::schedule::MAX_IN_FLIGHT`].
    pub in_flight: NonZeroUsize,
}

impl Default for SolveOptions<'_> {
    fn default() -> Self {
        SolveOptions {
            slots: DEFAULT_SLOTS,
            progress: None,
            segments: None,
            exact_memory: None,
            in_flight: NonZeroUsize::MIN,
        }
    }
}

impl SolveOptions<'_> {
    /// Checks the options before any chain is seen: an
    /// [`exact_memory`](SolveOptions::exact_memory) more than this machine
    /// can give a solve is refused ([`crate::solve::SolveError::TooLarge`],
    /// naming the most it allows), and an
    /// [`in_flight`](SolveOptions::in_flight) above [`crate::schedule::MAX_IN_FLIGHT`]
    /// ([`crate::solve::SolveError::Options`]). Every solve and smallest
    /// budget checks this itself; a front end that runs several solves (a
    /// comparison, a sweep) calls it first, so that the refusal is not taken
    /// for one algorithm's. O(1).
    pub fn check(&self) -> Result<(), crate::solve::SolveError> {
        crate::solve::limits::exact_memory(self)?;
        crate::schedule::check_in_flight(self.in_flight.get(), "in_flight").map_err(crate::solve::SolveError::Options)
    }
}

/// The number of memory slots used unless told otherwise (as in the paper).
pub const DEFAULT_SLOTS: NonZeroUsize = NonZeroUsize::new(500).unwrap();
