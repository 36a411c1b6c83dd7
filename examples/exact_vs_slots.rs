//! What `solve` answers by default (`auto`) and with `-a persistent`, now
//! exact in bytes where the persistent fronts fit (`solve::exact`), against
//! the persistent slot DP at 500 and 8,000 slots, on every chain in
//! `chains/` at budgets of 1/2, 1/3 and 1/5 of store-all's peak.
//!
//! `cargo run --release --example exact_vs_slots [CHAIN_NAME_FILTER]` prints
//! a Markdown table: each answer's makespan and wall time, what `solve` ran
//! (`exact` when the fronts fit, `rounded` when they gave up and the slot DP
//! answered), and the default's makespan against the 8,000-slot DP's (a
//! negative figure: faster). Where the fronts gave up (`-a persistent`
//! rounded), `auto` runs again with 2 GiB for them (`--exact-memory 2GiB`).
//! Every schedule is replayed by the simulator.

use std::path::Path;
use std::time::Instant;

use remat::report::sweep::store_all_peak;
use remat::slots::{SlotChain, Slots};
use remat::solve::{Algorithm, SolveOptions, persistent, solve};
use remat::{Chain, simulate_within};

/// Makespan (replayed) and seconds of the slot DP itself, or why none.
fn slot_dp(chain: &Chain, budget: u64, slots: usize) -> (Result<f64, String>, f64) {
    let sc = SlotChain::new(chain, Slots::new(budget, slots));
    let start = Instant::now();
    let m = sc.slots.capacity;
    let result = if persistent::min_peak_slots(&sc) > m {
        Err("infeasible".to_string())
    } else {
        let table = persistent::Table::build(sc, None);
        let ops = table.sequence(m).expect("feasible by the min-peak check");
        Ok(simulate_within(chain, &ops, budget).expect("the slot schedule replays").makespan)
    };
    (result, start.elapsed().as_secs_f64())
}

/// `solve` with the default options: makespan, seconds, and what ran.
fn solved(
    chain: &Chain,
    budget: u64,
    algorithm: Algorithm,
    exact_memory: Option<u64>,
) -> (Result<f64, String>, f64, String) {
    let start = Instant::now();
    let result = solve(chain, budget, algorithm, &SolveOptions { exact_memory, ..SolveOptions::default() });
    let secs = start.elapsed().as_secs_f64();
    match result {
        Ok(s) => {
            let how = if s.slot_size == 1 { "exact" } else { "rounded" };
            (Ok(s.schedule.makespan), secs, format!("{} ({how})", s.schedule.algorithm))
        }
        Err(remat::solve::SolveError::Infeasible { .. }) => (Err("infeasible".to_string()), secs, String::new()),
        Err(e) => (Err(e.to_string()), secs, String::new()),
    }
}

fn cell(r: &Result<f64, String>) -> String {
    match r {
        Ok(t) => format!("{t:.2}"),
        Err(e) => e.clone(),
    }
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("chains");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("chains/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| p.to_string_lossy().contains(&filter))
        .collect();
    files.sort();
    println!(
        "| chain | L | budget | default | s | ran | persistent | s | ran | 8000 slots | s | 500 slots | s | \
         default vs 8000 | exact memory 2 GiB | s | vs 8000 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for path in files {
        let chain = Chain::from_json(&std::fs::read_to_string(&path).expect("readable")).expect("valid chain");
        let peak = store_all_peak(&chain);
        for (name, div) in [("1/2", 2), ("1/3", 3), ("1/5", 5)] {
            let budget = peak / div;
            let (auto, s_auto, ran_auto) = solved(&chain, budget, Algorithm::Auto, None);
            let (pers, s_pers, ran_pers) = solved(&chain, budget, Algorithm::Persistent, None);
            let (r500, s500) = slot_dp(&chain, budget, 500);
            let (r8000, s8000) = slot_dp(&chain, budget, 8000);
            let versus = |answer: &Result<f64, String>| match (answer, &r8000) {
                (Ok(e), Ok(s)) => format!("{:+.3}%", 100.0 * (e - s) / s),
                (Ok(_), Err(_)) => "only this fits".to_string(),
                _ => String::new(),
            };
            let gain = versus(&auto);
            // Where the fronts gave up, the default again with room for them.
            let (roomy, s_roomy) = if ran_pers.contains("rounded") {
                let (r, s, _) = solved(&chain, budget, Algorithm::Auto, Some(2 << 30));
                (r, format!("{s:.3}"))
            } else {
                (Err("(as default)".to_string()), String::new())
            };
            let roomy_gain = if roomy.is_ok() { versus(&roomy) } else { String::new() };
            println!(
                "| {} | {} | {name} | {} | {s_auto:.3} | {ran_auto} | {} | {s_pers:.3} | {ran_pers} | {} | \
                 {s8000:.3} | {} | {s500:.3} | {gain} | {} | {s_roomy} | {roomy_gain} |",
                chain.name(),
                chain.len(),
                cell(&auto),
                cell(&pers),
                cell(&r8000),
                cell(&r500),
                cell(&roomy),
            );
        }
    }
}
