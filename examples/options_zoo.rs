//! Issue 24's acceptance on the zoo: GPT-2 chains with recording options
//! (`remat zoo NAME --options`: per block `matmuls`, `no-attention`, `input`),
//! at 1/2 and 1/3 of store-all's peak, remat's solvers (which choose an option
//! per block) against the best `checkpoint_sequential` (option 0 only: it has
//! none) and the best uniform policy (one option on every block).
//!
//! `cargo run --release --example options_zoo` prints a Markdown table: each
//! makespan (ms, the roofline's), the gain of the best remat solver over each
//! baseline, and the options remat chose. Every schedule is replayed by the
//! simulator within its budget.

use remat::report::sweep::store_all_peak;
use remat::solve::{Algorithm, SolveOptions, solve};
use remat::zoo::{Spec, generate};
use remat::{Chain, Op, simulate_within};

/// The replayed makespan and operations of `algorithm`, or why none.
fn run(chain: &Chain, budget: u64, algorithm: Algorithm) -> Result<(f64, Vec<Op>), String> {
    let s = solve(chain, budget, algorithm, &SolveOptions::default()).map_err(|e| match e {
        remat::solve::SolveError::Infeasible { .. } => "infeasible".to_string(),
        e => e.to_string(),
    })?;
    let replay = simulate_within(chain, &s.schedule.operations, budget).expect("solve's schedules replay");
    assert_eq!(replay.makespan, s.schedule.makespan);
    Ok((replay.makespan, s.schedule.operations))
}

/// How many stages each option recorded, `0:13 1:2`.
fn options_used(chain: &Chain, ops: &[Op]) -> String {
    let mut count = std::collections::BTreeMap::new();
    for op in ops {
        if let Op::FAll(l, o) = *op
            && l <= chain.len()
        {
            let name = if o == 0 {
                "all".to_string()
            } else {
                chain.stage(l).options[o - 1].name.clone().unwrap_or(format!("{o}"))
            };
            *count.entry(name).or_insert(0) += 1;
        }
    }
    count.iter().map(|(k, v)| format!("{k} x{v}")).collect::<Vec<_>>().join(", ")
}

fn main() {
    let specs = [
        Spec { batch: 8, options: true, ..Spec::new("gpt2-small") },
        Spec { batch: 4, dtype: remat::zoo::Dtype::Bf16, options: true, ..Spec::new("gpt2-xl") },
    ];
    println!(
        "| chain | budget | remat (best of auto, persistent, floating) | best sequential | best uniform | gain vs \
         sequential | gain vs uniform | options remat recorded |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for spec in specs {
        let chain = generate(&spec).expect("zoo chains generate").chain().expect("a chain").clone();
        let peak = store_all_peak(&chain);
        for (label, div) in [("1/2", 2), ("1/3", 3)] {
            let budget = peak / div;
            let mut best: Option<(f64, Vec<Op>, Algorithm)> = None;
            for a in [Algorithm::Auto, Algorithm::Persistent, Algorithm::Floating] {
                if let Ok((t, ops)) = run(&chain, budget, a)
                    && best.as_ref().is_none_or(|b| t < b.0)
                {
                    best = Some((t, ops, a));
                }
            }
            let seq = run(&chain, budget, Algorithm::Sequential).map(|r| r.0);
            let uni = run(&chain, budget, Algorithm::Uniform).map(|r| r.0);
            let show = |r: &Result<f64, String>| match r {
                Ok(t) => format!("{t:.2}"),
                Err(e) => e.clone(),
            };
            let gain = |r: &Result<f64, String>, t: f64| match r {
                Ok(b) => format!("{:.1}%", 100.0 * (1.0 - t / b)),
                Err(_) => "-".to_string(),
            };
            match best {
                Some((t, ops, a)) => println!(
                    "| {} | {label} ({:.2} GiB) | {t:.2} ({a}) | {} | {} | {} | {} | {} |",
                    chain.name(),
                    budget as f64 / (1u64 << 30) as f64,
                    show(&seq),
                    show(&uni),
                    gain(&seq, t),
                    gain(&uni, t),
                    options_used(&chain, &ops)
                ),
                None => println!("| {} | {label} | infeasible | {} | {} | | | |", chain.name(), show(&seq), show(&uni)),
            }
        }
    }
}
