//! The gain of the optimal (persistent) schedule over PyTorch's
//! checkpoint_sequential at checkpoint_sequential's own peak memory, per chain
//! and on average (see `remat::report::gain` for the exact definition).
//!
//! cargo run --release --example sequential_gain -- chains/*.json
//! cargo run --release --example sequential_gain -- --slots 2000 --json chains/*.json

use remat::Chain;
use remat::report::sequential_gain;
use remat::size::format_size;
use remat::solve::DEFAULT_SLOTS;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    let (mut slots, mut json, mut files) = (DEFAULT_SLOTS, false, Vec::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--slots" => slots = args.next().ok_or_else(|| anyhow::anyhow!("--slots needs a number"))?.parse()?,
            "--json" => json = true,
            _ => files.push(arg),
        }
    }
    anyhow::ensure!(!files.is_empty(), "usage: sequential_gain [--slots N] [--json] CHAIN.json...");
    let pct = |v: Option<f64>| v.map(|v| format!("{v:+.1}%")).unwrap_or_else(|| "n/a".into());
    if !json {
        println!(
            "optimal = exhaustive search (exact) up to 12 stages, else the best of the persistent and (where auto \
             would run it) floating DPs with {slots} slots, fitted by replay;\nsequential = checkpoint_sequential, \
             K >= 2 on its Pareto front; +thr = T_seq / T_opt - 1 at the fastest K and averaged over the front"
        );
        println!(
            "{:<28} {:>4} {:>11} {:>6} {:>8} {:>11} {:>9} {:>9} {:>11} {:>11} {:>8}",
            "chain",
            "L",
            "optimal by",
            "front",
            "best K",
            "its peak",
            "seq time",
            "opt time",
            "best: +thr",
            "mean: +thr",
            "seconds"
        );
    }
    let (mut gains, mut best_gains, mut mean_gains) = (Vec::new(), Vec::new(), Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let chain = Chain::from_json(&text).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        let start = std::time::Instant::now();
        let g = sequential_gain(&chain, slots)?;
        let seconds = start.elapsed().as_secs_f64();
        let best = g.best.as_ref();
        best_gains.extend(best.and_then(|b| b.throughput_gain_percent));
        mean_gains.extend(g.mean_throughput_gain_percent);
        if !json {
            println!(
                "{:<28} {:>4} {:>11} {:>6} {:>8} {:>11} {:>9} {:>9} {:>11} {:>11} {:>8.1}",
                g.chain,
                g.stages,
                g.optimal_by,
                g.front.len(),
                best.map(|b| format!("K = {}", b.segments)).unwrap_or_else(|| "-".into()),
                best.map(|b| format_size(b.peak_memory)).unwrap_or_else(|| "-".into()),
                best.map(|b| format!("{:.2}", b.sequential_makespan)).unwrap_or_else(|| "-".into()),
                best.and_then(|b| b.optimal_makespan).map(|t| format!("{t:.2}")).unwrap_or_else(|| "n/a".into()),
                pct(best.and_then(|b| b.throughput_gain_percent)),
                pct(g.mean_throughput_gain_percent),
                seconds
            );
        }
        gains.push(g);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&gains)?);
        return Ok(());
    }
    let avg = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    println!(
        "mean over {} chains: best K {} more throughput; mean over each chain's front {}",
        gains.len(),
        pct(avg(&best_gains)),
        pct(avg(&mean_gains))
    );
    Ok(())
}
