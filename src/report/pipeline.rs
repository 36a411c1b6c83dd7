//! The pipeline planner (issue 28): a chain split into P stages, one per
//! rank, each rank's schedule planned for the micro-batches it holds in
//! flight, against checkpointing every block on every rank.
//!
//! Rank k of P (0-based) holds, between their forward and backward passes,
//! all M micro-batches under GPipe and min(P - k, M) under 1F1B (the first
//! rank warms up with P forwards, the last runs each backward right after
//! its forward). Each rank's chain is its stages, with the previous rank's
//! output as input and, except on the last rank, a loss of zero size (the
//! gradient arriving from the next rank is delta of its output, which B of
//! that zero loss produces); each is solved by
//! [`crate::solve::solve`] with [`SolveOptions::in_flight`], so what is shown
//! is replayed.
//!
//! The step time is the usual bubble model, (M + P - 1) x the slowest rank's
//! time per micro-batch (forward, recomputation and backward), for both
//! schedules; it leaves out communication, as the memory model leaves out
//! communication buffers and the optimizer.

use std::ops::RangeInclusive;

use crate::chain::{Chain, ChainError, Stage};
use crate::solve::{Algorithm, Solution, SolveError, SolveOptions, solve};

/// A pipeline schedule: which micro-batches a rank holds at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineSchedule {
    /// Every forward, then every backward (`ScheduleGPipe`): a rank holds all
    /// M micro-batches.
    GPipe,
    /// One forward, one backward after a warm-up (`Schedule1F1B`): rank k of
    /// P holds min(P - k, M).
    OneFOneB,
}

impl PipelineSchedule {
    /// The name on the command line: `gpipe` or `1f1b`.
    pub fn name(self) -> &'static str {
        match self {
            PipelineSchedule::GPipe => "gpipe",
            PipelineSchedule::OneFOneB => "1f1b",
        }
    }

    /// Micro-batches rank `rank` (0-based) of `ranks` holds at once with
    /// `micro_batches` per step: at least 1. O(1).
    ///
    /// # Example
    /// ```
    /// use remat::report::pipeline::PipelineSchedule;
    /// let held: Vec<usize> = (0..4).map(|k| PipelineSchedule::OneFOneB.in_flight(k, 4, 8)).collect();
    /// assert_eq!(held, [4, 3, 2, 1]);
    /// assert_eq!(PipelineSchedule::GPipe.in_flight(0, 4, 8), 8);
    /// ```
    pub fn in_flight(self, rank: usize, ranks: usize, micro_batches: usize) -> usize {
        let held = match self {
            PipelineSchedule::GPipe => micro_batches,
            PipelineSchedule::OneFOneB => ranks.saturating_sub(rank).min(micro_batches),
        };
        held.max(1)
    }
}

impl std::str::FromStr for PipelineSchedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "gpipe" => Ok(PipelineSchedule::GPipe),
            "1f1b" => Ok(PipelineSchedule::OneFOneB),
            other => Err(format!("unknown pipeline schedule `{other}` (expected gpipe or 1f1b)")),
        }
    }
}

impl std::fmt::Display for PipelineSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a chain cannot be split as asked.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SplitError {
    /// More ranks than stages, or none.
    #[error("cannot split {stages} stages into {ranks} ranks: ranks must be from 1 to the number of stages")]
    Ranks {
        /// Stages of the chain.
        stages: usize,
        /// Ranks asked for.
        ranks: usize,
    },
    /// A rank's chain is not a valid chain.
    #[error("rank {rank}'s chain: {source}")]
    Chain {
        /// The rank, 0-based.
        rank: usize,
        /// Why.
        source: ChainError,
    },
    /// The ranks' stage ranges do not split the chain: each must be
    /// non-empty, the first start at stage 1, each start where the one
    /// before ends, the last end at stage L.
    #[error("the split {ranges} does not cover stages 1 to {stages} in order, each rank with at least one stage")]
    Ranges {
        /// The ranges given (or the one at fault).
        ranges: String,
        /// L, the chain's stages.
        stages: usize,
    },
    /// The micro-batches per step are out of range
    /// ([`crate::solve::check_in_flight`]'s message).
    #[error("{0}")]
    MicroBatches(String),
    /// Checkpointing every block (the baseline, at any budget) has no
    /// schedule on a rank: the solver's message.
    #[error("rank {rank}: checkpointing every block: {message}")]
    EveryBlock {
        /// The rank, 0-based.
        rank: usize,
        /// Why.
        message: String,
    },
}

/// Splits stages 1..=L into `ranks` contiguous ranges minimising the largest
/// rank's time (u_f + u_b summed), the first such split in lexicographic
/// order of its cut points. O(P L^2).
///
/// # Example
/// ```
/// use remat::report::pipeline::balanced_split;
/// use remat::{Chain, Stage};
/// let stages = (0..6).map(|_| Stage::simple(1.0, 2.0, 10, 20)).collect();
/// let chain = Chain::new("six", 10, stages, Stage::zero_loss()).unwrap();
/// assert_eq!(balanced_split(&chain, 3).unwrap(), vec![1..=2, 3..=4, 5..=6]);
/// ```
pub fn balanced_split(chain: &Chain, ranks: usize) -> Result<Vec<RangeInclusive<usize>>, SplitError> {
    let n = chain.len();
    if ranks == 0 || ranks > n {
        return Err(SplitError::Ranks { stages: n, ranks });
    }
    let mut prefix = vec![0.0f64; n + 1];
    for l in 1..=n {
        prefix[l] = prefix[l - 1] + chain.forward_time(l) + chain.backward_time(l);
    }
    // best[p][j]: the smallest largest time splitting stages 1..=j into p ranks.
    let mut best = vec![vec![f64::INFINITY; n + 1]; ranks + 1];
    let mut cut = vec![vec![0usize; n + 1]; ranks + 1];
    best[0][0] = 0.0;
    for p in 1..=ranks {
        for j in p..=n {
            for i in p - 1..j {
                let v = best[p - 1][i].max(prefix[j] - prefix[i]);
                if v < best[p][j] {
                    best[p][j] = v;
                    cut[p][j] = i;
                }
            }
        }
    }
    Ok(ranges(&cut, ranks, n))
}

/// The stage ranges of a split DP's cuts: `cut[p][j]` is where the first p
/// ranks end when the p-th ends at stage j. O(P).
fn ranges(cut: &[Vec<usize>], ranks: usize, n: usize) -> Vec<RangeInclusive<usize>> {
    let mut out = Vec::with_capacity(ranks);
    let mut j = n;
    for p in (1..=ranks).rev() {
        let i = cut[p][j];
        out.push(i + 1..=j);
        j = i;
    }
    out.reverse();
    out
}

/// Splits stages 1..=L into `ranks` contiguous ranges for remat: the split
/// whose slowest rank is fastest when each rank k runs the persistent
/// optimum at its budget (`budgets[k]`, or `budgets[0]` for every rank) for
/// the micro-batches it holds
/// (`schedule.in_flight(k, ..)`); ranks that hold more micro-batches can so
/// take fewer stages. `None` when no split fits. O(P L^2) persistent solves of
/// rank chains (each memoised).
pub fn memory_aware_split(
    chain: &Chain,
    ranks: usize,
    schedule: PipelineSchedule,
    micro_batches: usize,
    budgets: &[u64],
    opts: &SolveOptions,
) -> Result<Option<Vec<RangeInclusive<usize>>>, SplitError> {
    let n = chain.len();
    if ranks == 0 || ranks > n {
        return Err(SplitError::Ranks { stages: n, ranks });
    }
    crate::solve::check_in_flight(micro_batches, "micro_batches").map_err(SplitError::MicroBatches)?;
    // time(k, i, j): rank k on stages i+1..=j, infinite when nothing fits.
    let time = |k: usize, i: usize, j: usize| -> Result<f64, SplitError> {
        let c = rank_chain(chain, &(i + 1..=j), k)?;
        let in_flight = std::num::NonZeroUsize::new(schedule.in_flight(k, ranks, micro_batches)).expect(">= 1");
        let opts = SolveOptions { in_flight, progress: None, ..*opts };
        let budget = rank_budget(budgets, k);
        Ok(solve(&c, budget, Algorithm::Persistent, &opts).map_or(f64::INFINITY, |s| s.schedule.makespan))
    };
    let mut best = vec![vec![f64::INFINITY; n + 1]; ranks + 1];
    let mut cut = vec![vec![0usize; n + 1]; ranks + 1];
    best[0][0] = 0.0;
    for p in 1..=ranks {
        // Rank p - 1 ends at j and leaves at least one stage to each rank after it.
        for j in p..=n - (ranks - p) {
            for i in p - 1..j {
                if best[p - 1][i] >= best[p][j] {
                    continue;
                }
                let v = best[p - 1][i].max(time(p - 1, i, j)?);
                if v < best[p][j] {
                    best[p][j] = v;
                    cut[p][j] = i;
                }
            }
        }
    }
    if !best[ranks][n].is_finite() {
        return Ok(None);
    }
    Ok(Some(ranges(&cut, ranks, n)))
}

/// The chain one rank runs: stages `range` of `chain`, the output of the
/// stage before as its input and that stage's gradient as its input's
/// gradient (its last backward makes it: issue 36, it was sized as the
/// output), and the chain's loss on the last rank only (a zero loss
/// elsewhere). A range that is empty or outside the chain's stages is a
/// [`SplitError::Ranges`]. O(L).
pub fn rank_chain(chain: &Chain, range: &RangeInclusive<usize>, rank: usize) -> Result<Chain, SplitError> {
    if range.is_empty() || *range.start() == 0 || *range.end() > chain.len() {
        return Err(SplitError::Ranges {
            ranges: format!("rank {rank}: {}-{}", range.start(), range.end()),
            stages: chain.len(),
        });
    }
    let stages: Vec<Stage> = chain.stages()[range.start() - 1..*range.end()].to_vec();
    let last = *range.end() == chain.len();
    let loss = if last { chain.loss().clone() } else { Stage::zero_loss() };
    let name = format!("{} [rank {rank}: stages {}-{}]", chain.name(), range.start(), range.end());
    let input = range.start() - 1;
    Chain::new(name, chain.output_size(input), stages, loss)
        .and_then(|c| c.with_input_gradient_size(chain.gradient_size(input)))
        .map_err(|source| SplitError::Chain { rank, source })
}

/// One rank of a [`PipelinePlan`].
#[derive(Debug)]
pub struct RankPlan {
    /// Its stages in the whole chain.
    pub stages: RangeInclusive<usize>,
    /// Micro-batches it holds at once.
    pub in_flight: usize,
    /// remat's schedule for one micro-batch, planned for `in_flight`.
    pub remat: Result<Solution, SolveError>,
    /// Checkpointing every block (one segment a stage), with its rank peak.
    pub every_block: Solution,
}

/// Checks that `split` covers stages 1..=L of `chain` in order, each range
/// non-empty ([`SplitError::Ranges`] otherwise). O(P).
fn check_split(chain: &Chain, split: &[RangeInclusive<usize>]) -> Result<(), SplitError> {
    let mut next = 1;
    let in_order = split.iter().all(|r| {
        let fits = !r.is_empty() && *r.start() == next;
        next = r.end().saturating_add(1);
        fits
    });
    if !split.is_empty() && in_order && next == chain.len() + 1 {
        return Ok(());
    }
    let ranges: Vec<String> = split.iter().map(|r| format!("{}-{}", r.start(), r.end())).collect();
    Err(SplitError::Ranges { ranges: format!("[{}]", ranges.join(", ")), stages: chain.len() })
}

/// Rank k's budget: `budgets[k]`, or `budgets[0]` when one is given for
/// every rank (0 when none).
fn rank_budget(budgets: &[u64], k: usize) -> u64 {
    budgets.get(k).or(budgets.first()).copied().unwrap_or(0)
}

/// Every rank's plan at one budget per rank.
#[derive(Debug)]
pub struct PipelinePlan {
    /// The schedule kind.
    pub schedule: PipelineSchedule,
    /// Micro-batches per step.
    pub micro_batches: usize,
    /// The budget of each rank, in bytes.
    pub budgets: Vec<u64>,
    /// One entry per rank.
    pub ranks: Vec<RankPlan>,
}

impl PipelinePlan {
    /// The bubble-model step time, (M + P - 1) x the slowest rank's time per
    /// micro-batch, of remat's plans (`None` if a rank has none).
    pub fn step_time(&self) -> Option<f64> {
        let slowest = self.ranks.iter().map(|r| r.remat.as_ref().ok().map(|s| s.schedule.makespan));
        let slowest = slowest.collect::<Option<Vec<f64>>>()?.into_iter().fold(0.0, f64::max);
        Some(self.bubble(slowest))
    }

    /// The same for checkpointing every block.
    pub fn every_block_step_time(&self) -> f64 {
        self.bubble(self.ranks.iter().map(|r| r.every_block.schedule.makespan).fold(0.0, f64::max))
    }

    fn bubble(&self, slowest: f64) -> f64 {
        (self.micro_batches + self.ranks.len() - 1) as f64 * slowest
    }
}

/// Plans every rank of `chain` split by `split` at `budgets` bytes (one for
/// every rank, or one per rank; `None`: the largest rank peak of
/// checkpointing every block for every rank, so that the two are compared at
/// the same memory), with `opts` (its `in_flight` is set per rank). Time:
/// one solve per rank, plus one of the every-block baseline.
pub fn plan(
    chain: &Chain,
    split: &[RangeInclusive<usize>],
    schedule: PipelineSchedule,
    micro_batches: usize,
    budgets: Option<&[u64]>,
    opts: &SolveOptions,
) -> Result<PipelinePlan, SplitError> {
    crate::solve::check_in_flight(micro_batches, "micro_batches").map_err(SplitError::MicroBatches)?;
    check_split(chain, split)?;
    let ranks = split.len();
    let chains: Vec<Chain> =
        split.iter().enumerate().map(|(k, r)| rank_chain(chain, r, k)).collect::<Result<_, _>>()?;
    let in_flight: Vec<usize> = (0..ranks).map(|k| schedule.in_flight(k, ranks, micro_batches)).collect();
    let every_block: Vec<Solution> = chains
        .iter()
        .enumerate()
        .map(|(rank, c)| {
            let opts = SolveOptions { segments: Some(c.len()), in_flight: std::num::NonZeroUsize::MIN, ..*opts };
            // Every valid chain's sizes add up within a u64, so this fits;
            // an answer that does not is reported, never a panic (issue 36).
            solve(c, u64::MAX, Algorithm::Sequential, &opts)
                .map_err(|e| SplitError::EveryBlock { rank, message: e.to_string() })
        })
        .collect::<Result<_, _>>()?;
    let budgets: Vec<u64> = match budgets {
        Some(b) => (0..ranks).map(|k| rank_budget(b, k)).collect(),
        None => {
            // A rank peak past u64::MAX bytes fits no budget: the largest
            // budget there is, which it is then shown to be over.
            let peaks = every_block.iter().zip(&in_flight).map(|(s, &n)| s.replay.rank_peak(n).unwrap_or(u64::MAX));
            vec![peaks.max().unwrap_or(0); ranks]
        }
    };
    let ranks = chains
        .iter()
        .zip(&budgets)
        .zip(split)
        .zip(in_flight)
        .zip(every_block)
        .map(|((((c, &budget), range), n), every_block)| {
            let opts = SolveOptions { in_flight: std::num::NonZeroUsize::new(n).expect("at least 1"), ..*opts };
            RankPlan {
                stages: range.clone(),
                in_flight: n,
                remat: solve(c, budget, Algorithm::Auto, &opts),
                every_block,
            }
        })
        .collect();
    Ok(PipelinePlan { schedule, micro_batches, budgets, ranks })
}
