//! The baselines and a full sweep on network-like chains, at budgets halfway
//! between the smallest persistent budget and store-all's peak.
//!
//! cargo bench --bench baselines

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use remat::report::reported;
use remat::report::sweep::{budgets, store_all_peak, sweep};
use remat::solve::dp;
use remat::solve::{Algorithm, SolveOptions, solve};
use remat::synthetic::network_like;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("baselines");
    group.sample_size(10);
    for len in [100, 300] {
        let chain = network_like(42, len);
        let min = dp::min_peak_exact::<dp::Persistent>(&chain);
        let budget = min + (store_all_peak(&chain) - min) / 2;
        for algorithm in [Algorithm::Sequential, Algorithm::Revolve, Algorithm::ChenGreedy] {
            group.bench_with_input(BenchmarkId::new(algorithm.name(), len), &budget, |b, &budget| {
                b.iter(|| solve(&chain, budget, algorithm, &SolveOptions::default()))
            });
        }
    }
    group.finish();
    let mut group = c.benchmark_group("sweep");
    group.sample_size(10);
    let chain = network_like(42, 40);
    let opts = SolveOptions::default();
    let b = budgets(&chain, &reported(), &opts, None, None, 10).expect("valid range");
    group.bench_function("network-like-40/10-budgets/all-algorithms", |bench| {
        bench.iter(|| sweep(&chain, &b, &reported(), &opts, None).expect("sweep"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
