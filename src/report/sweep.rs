//! Trade-off curves: every algorithm over a range of budgets, and
//! checkpoint_sequential's discrete points, as CSV or JSON (and SVG through
//! [`super::plot`]).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde::Serialize;

use super::compare::{Verdict, skip_reason, verdict};
use crate::chain::Chain;
use crate::simulate::simulate;
use crate::solve::baselines::segmented;
use crate::solve::{Algorithm, SolveError, SolveOptions, min_budget, solve};

/// One budget of a curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// The budget asked, in bytes.
    pub budget: u64,
    /// What the algorithm gave there.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// One algorithm over every budget of the sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Curve {
    /// The algorithm's name.
    pub algorithm: String,
    /// One point per budget, in the sweep's order.
    pub points: Vec<Point>,
}

/// checkpoint_sequential with K segments: one schedule, one point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SequentialPoint {
    /// K.
    pub segments: usize,
    /// The replay's makespan.
    pub makespan: f64,
    /// The replay's peak memory in bytes.
    pub peak_memory: u64,
}

/// The result of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sweep {
    /// The chain's name.
    pub chain: String,
    /// L.
    pub stages: usize,
    /// Memory slots given to the slot-based solvers.
    pub slots: usize,
    /// Makespan without recomputation.
    pub store_all_makespan: f64,
    /// Peak memory of store-all, in bytes.
    pub store_all_peak: u64,
    /// The budgets, increasing.
    pub budgets: Vec<u64>,
    /// One curve per algorithm.
    pub curves: Vec<Curve>,
    /// checkpoint_sequential for every K in 1..=L.
    pub sequential_points: Vec<SequentialPoint>,
}

/// Peak memory of store-all (every forward recorded, no recomputation): the
/// budget above which no algorithm has anything to gain. O(L).
pub fn store_all_peak(chain: &Chain) -> u64 {
    simulate(chain, &segmented(chain, &[])).expect("store-all is always valid").peak_memory
}

/// The budgets of a sweep: `steps` budgets evenly spaced from `from` to `to`
/// (both included, duplicates dropped). By default `from` is the smallest
/// budget at which one of `algorithms` finds a schedule (those the sweep
/// skips on this chain left out) and `to` is store-all's peak.
pub fn budgets(
    chain: &Chain,
    algorithms: &[Algorithm],
    opts: &SolveOptions,
    from: Option<u64>,
    to: Option<u64>,
    steps: usize,
) -> Result<Vec<u64>, SolveError> {
    if steps == 0 {
        return Err(SolveError::Options("0 steps asked; a sweep needs at least 1 budget".into()));
    }
    let to = to.unwrap_or_else(|| store_all_peak(chain));
    let from = match from {
        Some(f) => f,
        None => {
            let mut lowest = None;
            for &a in algorithms {
                if skip_reason(chain, to, a, opts, SWEEP_EXHAUSTIVE_MAX_STAGES, "sweep").is_some() {
                    continue; // the sweep skips it
                }
                match min_budget(chain, a, opts) {
                    Ok(Some(m)) => lowest = Some(lowest.map_or(m, |l: u64| l.min(m))),
                    Ok(None) | Err(SolveError::TooLarge { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            lowest.unwrap_or(to).min(to)
        }
    };
    if from > to {
        return Err(SolveError::Options(format!("the lowest budget ({from} bytes) is above the highest ({to} bytes)")));
    }
    let mut out: Vec<u64> = if steps == 1 {
        vec![to]
    } else {
        (0..steps).map(|i| from + ((to - from) as u128 * i as u128 / (steps - 1) as u128) as u64).collect()
    };
    out.dedup();
    Ok(out)
}

/// The curve of `algorithm` over `budgets` (in parallel over budgets): at
/// each budget exactly what [`solve`] returns there, so a point of a sweep is
/// the answer `remat solve` gives at that budget. `done()` is called after
/// each budget. O(budgets * the algorithm's cost).
pub fn curve_by_budget(
    chain: &Chain,
    budgets: &[u64],
    algorithm: Algorithm,
    opts: &SolveOptions,
    done: &(dyn Fn() + Sync),
) -> Result<Vec<Point>, SolveError> {
    let opts = SolveOptions { progress: None, ..*opts };
    budgets
        .par_iter()
        .map(|&budget| {
            let point = verdict(chain, budget, algorithm, &opts).map(|verdict| Point { budget, verdict });
            done();
            point
        })
        .collect()
}

/// At most this many checkpoint_sequential points per sweep: each is a
/// replay of O(L), so all L of them would be O(L^2) (minutes from about
/// 20,000 stages); more points than this do not show on a chart anyway.
pub const SEQUENTIAL_MAX_POINTS: usize = 50;

/// checkpoint_sequential's schedule for every K in 1..=L, replayed; on chains
/// of more than [`SEQUENTIAL_MAX_POINTS`] stages, for that many K evenly
/// spaced from 1 to L (both included). O(L min(L, SEQUENTIAL_MAX_POINTS)).
pub fn sequential_points(chain: &Chain) -> Result<Vec<SequentialPoint>, SolveError> {
    let len = chain.len();
    let ks: Vec<usize> = if len <= SEQUENTIAL_MAX_POINTS {
        (1..=len).collect()
    } else {
        let last = SEQUENTIAL_MAX_POINTS - 1;
        (0..SEQUENTIAL_MAX_POINTS).map(|i| 1 + i * (len - 1) / last).collect()
    };
    ks.into_par_iter()
        .map(|k| {
            let opts = SolveOptions { segments: Some(k), ..SolveOptions::default() };
            let sol = solve(chain, u64::MAX, Algorithm::Sequential, &opts)?;
            Ok(SequentialPoint { segments: k, makespan: sol.schedule.makespan, peak_memory: sol.schedule.peak_memory })
        })
        .collect()
}

/// Longest chain on which `sweep` runs exhaustive search (once per budget):
/// about 0.1 s a budget at 10 stages, ten times that at 12.
pub const SWEEP_EXHAUSTIVE_MAX_STAGES: usize = 10;

/// Runs every algorithm of `algorithms` at every budget of `budgets` (in
/// parallel over budgets) and checkpoint_sequential at every K.
/// `progress(done, total)` counts (algorithm, budget) pairs. An algorithm too
/// costly for the chain (exhaustive over [`SWEEP_EXHAUSTIVE_MAX_STAGES`],
/// floating where `auto` would not run it) gets `Skipped` points; bad options or a rejected schedule (a bug) are errors.
pub fn sweep(
    chain: &Chain,
    budgets: &[u64],
    algorithms: &[Algorithm],
    opts: &SolveOptions,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<Sweep, SolveError> {
    let total = (budgets.len() * algorithms.len()) as u64;
    let count = AtomicU64::new(0);
    let done = || {
        let n = count.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(p) = progress {
            p(n, total);
        }
    };
    let mut curves = Vec::with_capacity(algorithms.len());
    for &algorithm in algorithms {
        // Judged at the largest budget, the costliest for the slot-based solvers.
        let top = budgets.iter().copied().max().unwrap_or(0);
        let skip = skip_reason(chain, top, algorithm, opts, SWEEP_EXHAUSTIVE_MAX_STAGES, "sweep");
        let points = if let Some(reason) = skip {
            budgets
                .iter()
                .map(|&budget| Point { budget, verdict: Verdict::Skipped { reason: reason.clone() } })
                .collect()
        } else {
            curve_by_budget(chain, budgets, algorithm, opts, &done)?
        };
        curves.push(Curve { algorithm: algorithm.name().to_string(), points });
    }
    Ok(Sweep {
        chain: chain.name().to_string(),
        stages: chain.len(),
        slots: opts.slots.get(),
        store_all_makespan: chain.store_all_time(),
        store_all_peak: store_all_peak(chain),
        budgets: budgets.to_vec(),
        curves,
        sequential_points: sequential_points(chain)?,
    })
}

/// A time for CSV: 9 decimals at most, trailing zeros dropped, so float sums
/// print as people wrote them (`37.38`, not `37.379999999999995`).
fn csv_time(t: f64) -> String {
    super::svg::tick_label_precision(t, 9)
}

/// A CSV field, quoted when it holds a comma, a quote or a newline.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

impl Sweep {
    /// The sweep as CSV, one row per (algorithm, budget) and one per
    /// checkpoint_sequential K (with an empty budget and the `segments`
    /// column set). Status is `solved`, `infeasible` or `skipped`.
    pub fn csv(&self) -> String {
        let mut out =
            String::from("algorithm,budget,segments,status,makespan,peak_memory,overhead_percent,min_budget,detail\n");
        let opt = |v: Option<String>| v.unwrap_or_default();
        for curve in &self.curves {
            for p in &curve.points {
                let (status, makespan, peak, overhead, min, detail) = match &p.verdict {
                    Verdict::Solved { makespan, overhead_percent, peak_memory, detail, .. } => (
                        "solved",
                        csv_time(*makespan),
                        peak_memory.to_string(),
                        opt(overhead_percent.map(|o| format!("{o:.4}"))),
                        String::new(),
                        opt(detail.clone()),
                    ),
                    Verdict::Infeasible { min_budget } => (
                        "infeasible",
                        String::new(),
                        String::new(),
                        String::new(),
                        opt(min_budget.map(|m| m.to_string())),
                        String::new(),
                    ),
                    Verdict::Skipped { reason } => {
                        ("skipped", String::new(), String::new(), String::new(), String::new(), reason.clone())
                    }
                };
                let _ = writeln!(
                    out,
                    "{},{},,{status},{makespan},{peak},{overhead},{min},{}",
                    curve.algorithm,
                    p.budget,
                    csv_field(&detail)
                );
            }
        }
        for p in &self.sequential_points {
            let overhead =
                opt(super::compare::overhead_percent(p.makespan, self.store_all_makespan).map(|o| format!("{o:.4}")));
            let time = csv_time(p.makespan);
            let _ = writeln!(out, "sequential,,{},solved,{time},{},{overhead},,", p.segments, p.peak_memory);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::network_like;

    #[test]
    fn sweep_curves_fit_their_budgets() {
        let c = network_like(5, 12);
        let algorithms = [Algorithm::Persistent, Algorithm::StoreAll, Algorithm::Sequential, Algorithm::Revolve];
        let opts = SolveOptions::default();
        let budgets = budgets(&c, &algorithms, &opts, None, None, 9).unwrap();
        assert_eq!(budgets.len(), 9);
        assert_eq!(*budgets.last().unwrap(), store_all_peak(&c));
        assert_eq!(budgets[0], min_budget(&c, Algorithm::Persistent, &opts).unwrap().unwrap());
        let s = sweep(&c, &budgets, &algorithms, &opts, None).unwrap();
        assert_eq!(s.sequential_points.len(), 12);
        let persistent = &s.curves[0];
        assert!(matches!(persistent.points[0].verdict, Verdict::Solved { .. }));
        // Store-all fits only at its own peak, the last budget.
        let store_all: Vec<bool> =
            s.curves[1].points.iter().map(|p| matches!(p.verdict, Verdict::Solved { .. })).collect();
        assert_eq!(store_all, [false, false, false, false, false, false, false, false, true]);
        for curve in &s.curves {
            for p in &curve.points {
                if let Verdict::Solved { peak_memory, .. } = p.verdict {
                    assert!(peak_memory <= p.budget);
                }
            }
        }
        let csv = s.csv();
        assert_eq!(csv.lines().count(), 1 + 4 * 9 + 12);
        assert!(csv.lines().any(|l| l.starts_with("sequential,,1,solved,")));
        assert!(csv.lines().any(|l| l.starts_with("sequential,") && l.ends_with(",K = 1 segment")), "{csv}");
        assert_eq!(csv_field("b = 1 MiB, 3 segments"), "\"b = 1 MiB, 3 segments\"");
        assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    }

    #[test]
    fn points_are_what_solve_returns_and_floating_is_never_slower() {
        // Default slots (500): a point is the separate solve at its budget,
        // slot rounding included, and the floating DP (a superset of the
        // persistent schedules over the same slots) is never above persistent.
        let c = network_like(7, 14);
        let opts = SolveOptions::default();
        let algorithms = [Algorithm::Persistent, Algorithm::Floating, Algorithm::Auto];
        let b = budgets(&c, &algorithms, &opts, None, None, 12).unwrap();
        let s = sweep(&c, &b, &algorithms, &opts, None).unwrap();
        for curve in &s.curves {
            let algorithm: Algorithm = curve.algorithm.parse().unwrap();
            for point in &curve.points {
                let separate = verdict(&c, point.budget, algorithm, &opts).unwrap();
                assert_eq!(point.verdict, separate, "{algorithm} at {}", point.budget);
            }
        }
        for (p, f) in s.curves[0].points.iter().zip(&s.curves[1].points) {
            if let (Verdict::Solved { makespan: tp, .. }, Verdict::Solved { makespan: tf, .. }) =
                (&p.verdict, &f.verdict)
            {
                assert!(tf <= &(tp + 1e-9 * tp), "floating {tf} > persistent {tp} at {}", p.budget);
            }
            assert!(
                !matches!(f.verdict, Verdict::Infeasible { .. }) || matches!(p.verdict, Verdict::Infeasible { .. }),
                "floating infeasible where persistent is not at {}",
                p.budget
            );
        }
    }

    #[test]
    fn bad_ranges_are_named() {
        let c = network_like(5, 4);
        let e = budgets(&c, &[Algorithm::Persistent], &SolveOptions::default(), Some(10), Some(5), 3).unwrap_err();
        assert_eq!(e.to_string(), "the lowest budget (10 bytes) is above the highest (5 bytes)");
        let e = budgets(&c, &[Algorithm::Persistent], &SolveOptions::default(), None, None, 0).unwrap_err();
        assert!(e.to_string().contains("0 steps asked"));
        assert_eq!(budgets(&c, &[], &SolveOptions::default(), Some(3), Some(3), 5).unwrap(), vec![3]);
    }
}
