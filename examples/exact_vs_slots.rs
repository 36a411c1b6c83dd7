//! The exact persistent optimum (`solve::fronts`) against the persistent slot
//! DP at 500 and 8,000 slots, on every chain in `chains/` at budgets of 1/2,
//! 1/3 and 1/5 of store-all's peak.
//!
//! `cargo run --release --example exact_vs_slots [MAX_FRONT_MIB]` prints a
//! Markdown table: each solver's makespan, wall time and table size, and how
//! much faster the exact schedule is than the 8,000-slot one. The exact DP
//! gives up on a chain whose fronts would exceed MAX_FRONT_MIB (default the
//! memory of the 500-slot table, the "no larger than today's", but at
//! least 64 MiB); a giving up is printed as such, never as a result.

use std::path::Path;
use std::time::Instant;

use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::Fronts;
use remat::solve::persistent;
use remat::{Chain, Op, simulate_within};

const MIB: f64 = (1u64 << 20) as f64;

fn store_all_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<Op> = (1..=n).map(Op::FAll).chain((1..=n).rev().map(Op::B)).collect();
    remat::simulate(chain, &ops).expect("store-all is valid").peak_memory
}

/// Makespan (replayed), seconds and table MiB of the slot DP itself (not
/// `solve`, which answers exactly where the fronts fit), or why none.
fn slot_dp(chain: &Chain, budget: u64, slots: usize) -> (Result<f64, String>, f64, f64) {
    let sc = SlotChain::new(chain, Slots::new(budget, slots));
    let mib = persistent::table_bytes_estimate(&sc) as f64 / MIB;
    let start = Instant::now();
    let m = sc.slots.capacity;
    let result = if persistent::min_peak_slots(&sc) > m {
        Err("infeasible".to_string())
    } else {
        let table = persistent::Table::build(sc, None);
        let ops = table.sequence(m).expect("feasible by the min-peak check");
        Ok(simulate_within(chain, &ops, budget).expect("the slot schedule replays").makespan)
    };
    (result, start.elapsed().as_secs_f64(), mib)
}

fn cell(r: &Result<f64, String>) -> String {
    match r {
        Ok(t) => format!("{t:.2}"),
        Err(e) => e.clone(),
    }
}

fn main() {
    let limit_mib: Option<f64> = std::env::args().nth(1).map(|a| a.parse().expect("MAX_FRONT_MIB is a number"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("chains");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("chains/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    println!(
        "| chain | L | budget | exact | s | MiB | 8000 slots | s | MiB | 500 slots | s | MiB | exact vs 8000 |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for path in files {
        let chain = Chain::from_json(&std::fs::read_to_string(&path).expect("readable")).expect("valid chain");
        let peak = store_all_peak(&chain);
        for (name, div) in [("1/2", 2), ("1/3", 3), ("1/5", 5)] {
            let budget = peak / div;
            let (r500, s500, m500) = slot_dp(&chain, budget, 500);
            let limit = limit_mib.unwrap_or(m500.max(64.0));
            let start = Instant::now();
            let built = Fronts::build_within(&chain, budget, (limit * MIB) as u64);
            let secs = start.elapsed().as_secs_f64();
            let (exact, mib) = match built {
                Ok(table) => {
                    let time = table.makespan(budget);
                    let result = match table.sequence(budget) {
                        Some(ops) => {
                            let replay = simulate_within(&chain, &ops, budget).expect("the exact schedule replays");
                            assert!((replay.makespan - time).abs() <= 1e-9 * time.max(1.0));
                            // The simulator's sum, as `solve` reports for the slot DP.
                            Ok(replay.makespan)
                        }
                        None => Err("infeasible".to_string()),
                    };
                    (result, table.bytes() as f64 / MIB)
                }
                Err(e) => (Err(format!("gave up: {}", if e.projected { "projected" } else { "over" })), 0.0),
            };
            let (r8000, s8000, m8000) = slot_dp(&chain, budget, 8000);
            let gain = match (&exact, &r8000) {
                (Ok(e), Ok(s)) => format!("{:+.3}%", 100.0 * (e - s) / s),
                (Ok(_), Err(_)) => "only exact fits".to_string(),
                _ => String::new(),
            };
            println!(
                "| {} | {} | {name} | {} | {secs:.3} | {mib:.1} | {} | {s8000:.3} | {m8000:.1} | {} | {s500:.3} | \
                 {m500:.1} | {gain} |",
                chain.name(),
                chain.len(),
                cell(&exact),
                cell(&r8000),
                cell(&r500),
            );
        }
    }
}
