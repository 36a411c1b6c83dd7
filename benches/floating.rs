//! The floating DP on network-like chains of 30, 60 and 100 stages at 500
//! slots, with the budget halfway between the smallest feasible one and
//! store-all's peak (as `benches/persistent.rs`). Each size prints the table
//! memory of its fill (the plan's exact estimate) before it is measured. Each
//! runs on 1 and 2 threads (a rayon pool per setting).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::ThreadPoolBuilder;
use remat::Op;
use remat::slots::{SlotChain, Slots};
use remat::solve::dp;
use remat::solve::{Algorithm, DEFAULT_SLOTS, SolveOptions, floating, solve};
use remat::synthetic::network_like;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("floating");
    group.sample_size(10);
    for len in [30, 60, 100] {
        let chain = network_like(42, len);
        let n = len + 1;
        let store_all: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
        let peak = remat::simulate(&chain, &store_all).expect("valid").peak_memory;
        let min = dp::min_peak_exact::<dp::Floating>(&chain);
        let budget = min + (peak - min) / 2;
        let est = floating::Thresholds::new(SlotChain::new(&chain, Slots::new(budget, DEFAULT_SLOTS.get()))).estimate();
        eprintln!(
            "floating L = {len}: tables {:.1} MiB, {:.2e} slot-option steps",
            est.table_bytes as f64 / (1u64 << 20) as f64,
            est.work as f64
        );
        for threads in [1, 2] {
            let pool = ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
            let id = BenchmarkId::new(format!("500-slots/{threads}-thread"), len);
            group.bench_with_input(id, &budget, |b, &budget| {
                b.iter(|| {
                    pool.install(|| {
                        solve(&chain, budget, Algorithm::Floating, &SolveOptions::default()).expect("feasible")
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
