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
}

impl Default for SolveOptions<'_> {
    fn default() -> Self {
        SolveOptions { slots: DEFAULT_SLOTS, progress: None, segments: None }
    }
}

/// The number of memory slots used unless told otherwise (as in the paper).
pub const DEFAULT_SLOTS: NonZeroUsize = NonZeroUsize::new(500).unwrap();
