//! Every algorithm on one chain at one budget, as a table or JSON.

use std::fmt::Write;
use std::time::Instant;

use serde::Serialize;

use crate::chain::Chain;
use crate::size::format_size;
use crate::solve::{Algorithm, Solution, SolveError, SolveOptions, solve};

/// What one algorithm gave.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Verdict {
    /// A schedule, replayed by the simulator within the budget.
    Solved {
        /// The replay's makespan.
        makespan: f64,
        /// Makespan over store-all's (no recomputation), in percent; `None`
        /// when store-all's makespan is 0.
        overhead_percent: Option<f64>,
        /// The replay's peak memory in bytes.
        peak_memory: u64,
        /// Bytes per memory slot the solver used (1 = exact).
        slot_size: u64,
        /// The parameter a baseline settled on.
        detail: Option<String>,
    },
    /// No schedule of this algorithm fits the budget.
    Infeasible {
        /// The smallest budget it can meet, in bytes, when known.
        min_budget: Option<u64>,
    },
    /// Not run: the chain is too large for it.
    Skipped {
        /// Why.
        reason: String,
    },
}

/// One row of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm's name.
    pub algorithm: String,
    /// Its result.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Wall-clock time of the solve, replay included, in seconds (this figure
    /// alone varies from run to run).
    pub solve_seconds: f64,
}

/// Every algorithm at one budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The chain's name.
    pub chain: String,
    /// L, the number of stages.
    pub stages: usize,
    /// The budget in bytes.
    pub budget: u64,
    /// Memory slots given to the slot-based solvers.
    pub slots: usize,
    /// Makespan without recomputation (every forward and backward once).
    pub store_all_makespan: f64,
    /// One row per algorithm, in the order asked.
    pub rows: Vec<Row>,
    /// How much faster the fastest row is than the best
    /// `checkpoint_sequential` within the same budget (the `sequential`
    /// row), when the comparison has that row; see [`GainOverSequential`].
    pub gain_over_sequential: Option<GainOverSequential>,
}

/// The fastest schedule of a comparison against the best PyTorch
/// `checkpoint_sequential` within the same budget (the `sequential` row: the
/// fastest number of segments K that fits), the question the Rotor paper
/// answers with "12.8% more throughput".
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum GainOverSequential {
    /// Both fit: the gain in throughput.
    Gain {
        /// checkpoint_sequential's makespan at its best K.
        sequential_makespan: f64,
        /// Its K, as the row's detail says (`K = 2 segments`).
        sequential_detail: Option<String>,
        /// The fastest row's algorithm (the first of equal makespans).
        best_algorithm: String,
        /// Its makespan.
        best_makespan: f64,
        /// T_sequential / T_best - 1, in percent: the extra throughput of
        /// training with the best schedule (0 when checkpoint_sequential is
        /// already the fastest; the definition of [`crate::report::gain`]).
        throughput_gain_percent: f64,
    },
    /// No K of checkpoint_sequential fits the budget (or it was skipped),
    /// and this algorithm does.
    SequentialDoesNotFit {
        /// The fastest row's algorithm.
        best_algorithm: String,
        /// Its makespan.
        best_makespan: f64,
    },
}

/// [`GainOverSequential`] of `rows`; `None` when there is no `sequential`
/// row or no row fits.
fn gain_over_sequential(rows: &[Row]) -> Option<GainOverSequential> {
    let sequential = rows.iter().find(|r| r.algorithm == Algorithm::Sequential.name())?;
    let mut best: Option<(&Row, f64)> = None;
    for row in rows {
        if let Verdict::Solved { makespan, .. } = row.verdict
            && best.is_none_or(|(_, m)| makespan < m)
        {
            best = Some((row, makespan));
        }
    }
    let (best, best_makespan) = best?;
    let best_algorithm = best.algorithm.clone();
    Some(match &sequential.verdict {
        Verdict::Solved { makespan, detail, .. } => GainOverSequential::Gain {
            sequential_makespan: *makespan,
            sequential_detail: detail.clone(),
            best_algorithm,
            best_makespan,
            throughput_gain_percent: overhead_percent(*makespan, best_makespan).unwrap_or(0.0),
        },
        Verdict::Infeasible { .. } | Verdict::Skipped { .. } => {
            GainOverSequential::SequentialDoesNotFit { best_algorithm, best_makespan }
        }
    })
}

/// Overhead of `makespan` over `base` in percent, `None` when `base` is 0.
/// Differences within float rounding of the two sums (1e-9) count as 0.
pub fn overhead_percent(makespan: f64, base: f64) -> Option<f64> {
    let ratio = makespan / base - 1.0;
    (base > 0.0).then(|| if ratio.abs() < 1e-9 { 0.0 } else { 100.0 * ratio })
}

/// The algorithms reports compare: every one of [`Algorithm::ALL`], `auto`
/// included, so the best row of a comparison is never slower than what
/// `remat solve` returns with its default algorithm.
pub fn reported() -> Vec<Algorithm> {
    Algorithm::ALL.to_vec()
}

/// Longest chain on which `compare` runs exhaustive search: its time grows
/// about 10x per 2 stages (0.1 s at 10 stages, 1 s at 12, over 10 s at 14 on
/// a shared 2-core machine).
pub const COMPARE_EXHAUSTIVE_MAX_STAGES: usize = 12;

/// `Some(reason)` when a report should not run `algorithm` on `chain` at
/// `budget` because it would take too long: exhaustive search on chains over
/// `exhaustive_limit` stages, and the floating DP where `auto` would not run
/// it (tables or work over [`crate::solve::AUTO_FLOATING_BYTES`] or
/// [`crate::solve::AUTO_FLOATING_WORK`]). `report` names the command.
pub fn skip_reason(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    opts: &SolveOptions,
    exhaustive_limit: usize,
    report: &str,
) -> Option<String> {
    let len = chain.len();
    let equivalent = crate::solve::exhaustive::equivalent_stages(chain);
    match algorithm {
        Algorithm::Exhaustive if equivalent > exhaustive_limit => Some(format!(
            "{report} runs exhaustive search on chains of at most {exhaustive_limit} stages (its state space grows \
             about 4x a stage); this chain has {len}{}{}",
            crate::solve::limits::options_note(len, equivalent),
            if equivalent <= crate::solve::exhaustive::MAX_STAGES {
                "; `remat solve --algorithm exhaustive` still handles it"
            } else {
                ""
            }
        )),
        Algorithm::Floating if len > crate::solve::AUTO_EXHAUSTIVE_STAGES => {
            let choice = crate::solve::auto_choice(chain, budget, opts);
            (choice.algorithm != Algorithm::Floating)
                .then(|| format!("{report} runs the floating DP only where `auto` would: {}", choice.reason))
        }
        _ => None,
    }
}

/// Runs `algorithm` and turns the answer into an [`Verdict`]: infeasible and
/// too-large answers are verdicts; any other error (bad options, or a
/// schedule the simulator rejected, which is a bug) is returned.
pub fn verdict(chain: &Chain, budget: u64, algorithm: Algorithm, opts: &SolveOptions) -> Result<Verdict, SolveError> {
    verdict_of(chain, solve(chain, budget, algorithm, opts))
}

/// The [`Verdict`] of a solve's result: its figures, infeasible with the
/// smallest budget, or skipped when too large; other errors pass through.
pub fn verdict_of(chain: &Chain, result: Result<Solution, SolveError>) -> Result<Verdict, SolveError> {
    match result {
        Ok(sol) => Ok(Verdict::Solved {
            makespan: sol.schedule.makespan,
            overhead_percent: overhead_percent(sol.schedule.makespan, chain.store_all_time()),
            peak_memory: sol.schedule.peak_memory,
            slot_size: sol.slot_size,
            detail: sol.detail,
        }),
        Err(SolveError::Infeasible { min_budget, .. }) => Ok(Verdict::Infeasible { min_budget }),
        Err(e @ SolveError::TooLarge { .. }) => Ok(Verdict::Skipped { reason: e.to_string() }),
        Err(e) => Err(e),
    }
}

/// Runs every algorithm of `algorithms` on `chain` at `budget` bytes, one
/// after the other (so their solve times do not compete). Each algorithm's
/// complexity is its own; those too costly for the chain are skipped with a
/// reason (see [`skip_reason`]).
pub fn compare(
    chain: &Chain,
    budget: u64,
    algorithms: &[Algorithm],
    opts: &SolveOptions,
) -> Result<Comparison, SolveError> {
    let mut rows = Vec::with_capacity(algorithms.len());
    for &algorithm in algorithms {
        let start = Instant::now();
        let skip = skip_reason(chain, budget, algorithm, opts, COMPARE_EXHAUSTIVE_MAX_STAGES, "compare");
        let verdict = match skip {
            Some(reason) => Verdict::Skipped { reason },
            None => verdict(chain, budget, algorithm, opts)?,
        };
        let solve_seconds = start.elapsed().as_secs_f64();
        rows.push(Row { algorithm: algorithm.name().to_string(), verdict, solve_seconds });
    }
    Ok(Comparison {
        chain: chain.name().to_string(),
        stages: chain.len(),
        budget,
        slots: opts.slots.get(),
        store_all_makespan: chain.store_all_time(),
        gain_over_sequential: gain_over_sequential(&rows),
        rows,
    })
}

/// A solve time for people: `850 us`, `12.3 ms`, `4.21 s`.
pub fn format_seconds(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.0} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

impl Comparison {
    /// The table as text: one line per algorithm, with the makespan, the
    /// overhead over store-all, the peak memory, the solve time and a note.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "chain {} ({} stages + loss), budget {} ({} bytes)",
            self.chain,
            self.stages,
            format_size(self.budget),
            self.budget
        );
        let _ = writeln!(out, "store-all makespan (no recomputation): {:.2}\n", self.store_all_makespan);
        let header = ["algorithm", "makespan", "overhead", "peak memory", "solve time", "notes"];
        let mut lines = vec![header.map(String::from).to_vec()];
        for row in &self.rows {
            let time = format_seconds(row.solve_seconds);
            let line = match &row.verdict {
                Verdict::Solved { makespan, overhead_percent, peak_memory, slot_size, detail } => {
                    let mut notes: Vec<String> = detail.iter().cloned().collect();
                    if *slot_size > 1 {
                        notes.push(format!("{} slots of {slot_size} B", self.slots));
                    }
                    vec![
                        row.algorithm.clone(),
                        format!("{makespan:.2}"),
                        overhead_percent.map(|p| format!("{p:+.1}%")).unwrap_or_else(|| "-".into()),
                        format_size(*peak_memory),
                        time,
                        notes.join("; "),
                    ]
                }
                Verdict::Infeasible { min_budget } => {
                    let note = match min_budget {
                        Some(m) => format!("infeasible: needs at least {} ({m} bytes)", format_size(*m)),
                        None => "infeasible at any budget with these options".to_string(),
                    };
                    vec![row.algorithm.clone(), "-".into(), "-".into(), "-".into(), time, note]
                }
                Verdict::Skipped { reason } => {
                    vec![
                        row.algorithm.clone(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        format!("skipped: {reason}"),
                    ]
                }
            };
            lines.push(line);
        }
        let widths: Vec<usize> =
            (0..header.len()).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
        for line in &lines {
            let mut text = String::new();
            for (c, cell) in line.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c == 0 || c == header.len() - 1 {
                    text += cell;
                    text.extend(std::iter::repeat_n(' ', if c == 0 { pad } else { 0 }));
                } else {
                    text.extend(std::iter::repeat_n(' ', pad));
                    text += cell;
                }
                text += "  ";
            }
            let _ = writeln!(out, "{}", text.trim_end());
        }
        match &self.gain_over_sequential {
            Some(GainOverSequential::Gain {
                sequential_makespan,
                sequential_detail,
                best_algorithm,
                best_makespan,
                throughput_gain_percent,
            }) => {
                let k = sequential_detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "\ngain over the best checkpoint_sequential{k}: {throughput_gain_percent:+.1}% throughput \
                     ({sequential_makespan:.2} -> {best_makespan:.2}, {best_algorithm})"
                );
            }
            Some(GainOverSequential::SequentialDoesNotFit { best_algorithm, best_makespan }) => {
                let _ = writeln!(
                    out,
                    "\ngain over checkpoint_sequential: none of its K fits this budget; {best_algorithm} does \
                     ({best_makespan:.2})"
                );
            }
            None => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Stage;

    fn chain() -> Chain {
        let s = [(1.0, 2.0, 4, 6), (2.0, 3.0, 5, 9), (3.0, 4.0, 2, 3), (4.0, 5.0, 7, 8), (5.0, 6.0, 1, 5)];
        let stages = s.iter().map(|&(f, b, a, abar)| Stage::simple(f, b, a, abar)).collect();
        Chain::new("hand", 3, stages, Stage::zero_loss()).unwrap()
    }

    #[test]
    fn every_algorithm_in_one_table() {
        let c = chain();
        let cmp = compare(&c, 32, &reported(), &SolveOptions::default()).unwrap();
        assert_eq!(cmp.rows.len(), Algorithm::ALL.len(), "every algorithm, auto included");
        let row = |name: &str| cmp.rows.iter().find(|r| r.algorithm == name).unwrap().verdict.clone();
        // Store-all needs 42 bytes (sequential's unit test traces it by hand).
        assert_eq!(row("store-all"), Verdict::Infeasible { min_budget: Some(42) });
        match row("sequential") {
            Verdict::Solved { makespan, overhead_percent, peak_memory, detail, .. } => {
                assert_eq!((makespan, peak_memory), (38.0, 32));
                assert!((overhead_percent.unwrap() - 100.0 * 3.0 / 35.0).abs() < 1e-9);
                assert_eq!(detail.as_deref(), Some("K = 2 segments"));
            }
            other => panic!("{other:?}"),
        }
        let table = cmp.table();
        assert!(table.contains("infeasible: needs at least 42 B (42 bytes)"), "{table}");
        assert!(table.lines().any(|l| l.starts_with("sequential") && l.contains("38.00") && l.contains("+8.6%")));
        let json = serde_json::to_value(&cmp).unwrap();
        let rows = json["rows"].as_array().unwrap();
        let json_row = |name: &str| rows.iter().find(|r| r["algorithm"] == name).unwrap();
        assert_eq!(json_row("store-all")["status"], "infeasible");
        assert_eq!(json_row("store-all")["min_budget"], 42);
        assert_eq!(json_row("sequential")["makespan"], 38.0);
    }

    #[test]
    fn the_gain_over_the_best_checkpoint_sequential_is_stated() {
        let c = chain();
        let cmp = compare(&c, 32, &reported(), &SolveOptions::default()).unwrap();
        let fastest = cmp
            .rows
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::Solved { makespan, .. } => Some(makespan),
                _ => None,
            })
            .fold(f64::INFINITY, f64::min);
        let Some(GainOverSequential::Gain { sequential_makespan, best_makespan, throughput_gain_percent, .. }) =
            cmp.gain_over_sequential.clone()
        else {
            panic!("{cmp:?}")
        };
        assert_eq!((sequential_makespan, best_makespan), (38.0, fastest));
        assert!((throughput_gain_percent - 100.0 * (38.0 / fastest - 1.0)).abs() < 1e-9);
        let table = cmp.table();
        assert!(table.contains("gain over the best checkpoint_sequential (K = 2 segments): "), "{table}");
        let json = serde_json::to_value(&cmp).unwrap();
        assert_eq!(json["gain_over_sequential"]["status"], "gain");
        assert_eq!(json["gain_over_sequential"]["sequential_makespan"], 38.0);
        // Below every K of checkpoint_sequential but above the optimum's
        // smallest budget: the table says so.
        let seq_min = match verdict(&c, 1, Algorithm::Sequential, &SolveOptions::default()).unwrap() {
            Verdict::Infeasible { min_budget: Some(m) } => m,
            other => panic!("{other:?}"),
        };
        let opt_min = crate::solve::min_budget(&c, Algorithm::Exhaustive, &SolveOptions::default()).unwrap().unwrap();
        assert!(opt_min < seq_min, "{opt_min} {seq_min}");
        let cmp = compare(&c, opt_min, &reported(), &SolveOptions::default()).unwrap();
        assert!(matches!(cmp.gain_over_sequential, Some(GainOverSequential::SequentialDoesNotFit { .. })), "{cmp:?}");
        assert!(cmp.table().contains("none of its K fits this budget"), "{}", cmp.table());
        // Without a sequential row, nothing is claimed.
        let cmp = compare(&c, 32, &[Algorithm::Persistent], &SolveOptions::default()).unwrap();
        assert_eq!(cmp.gain_over_sequential, None);
    }

    #[test]
    fn exhaustive_is_skipped_on_long_chains() {
        let c = crate::synthetic::network_like(1, 20);
        let o = verdict(&c, u64::MAX / 4, Algorithm::Exhaustive, &SolveOptions::default()).unwrap();
        assert!(matches!(o, Verdict::Skipped { reason } if reason.contains("at most 14 stages")));
        let c = crate::synthetic::network_like(1, 13);
        let cmp = compare(&c, u64::MAX / 4, &[Algorithm::Exhaustive], &SolveOptions::default()).unwrap();
        let Verdict::Skipped { reason } = &cmp.rows[0].verdict else { panic!("{cmp:?}") };
        assert!(reason.contains("at most 12 stages") && reason.contains("this chain has 13"), "{reason}");
        assert!(reason.contains("remat solve --algorithm exhaustive"), "{reason}");
    }
}
