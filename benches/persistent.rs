//! The persistent DP on network-like chains of 100 and 300 stages at 500 slots,
//! with the budget halfway between the smallest feasible one and store-all's peak.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use remat::solve::{Algorithm, SolveOptions, persistent, solve};
use remat::synthetic::network_like;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("persistent");
    group.sample_size(10);
    for len in [100, 300] {
        let chain = network_like(42, len);
        let store_all = solve(&chain, u64::MAX / 4, Algorithm::Persistent, &SolveOptions::default())
            .expect("ample memory")
            .schedule
            .peak_memory;
        let min = persistent::min_peak_exact(&chain);
        let budget = min + (store_all - min) / 2;
        group.bench_with_input(BenchmarkId::new("500-slots", len), &budget, |b, &budget| {
            b.iter(|| solve(&chain, budget, Algorithm::Persistent, &SolveOptions::default()).expect("feasible"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
