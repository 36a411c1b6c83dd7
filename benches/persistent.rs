//! The persistent DP at 500 slots, with the budget halfway between the
//! smallest feasible one and store-all's peak:
//! - `persistent-500-slots`: whole solves (table, sequence, replay) of
//!   network-like chains of 100, 300, 339 and 1000 stages and of ResNet-1001
//!   (chains/resnet1001-224-b8.json, 339 stages), each on 1 and 2 threads;
//! - `persistent-vs-triple-loop`: the table alone against the straightforward
//!   triple loop it replaced (`tests/suite/reference/mod.rs`), on one thread, for
//!   the speed ratio.
//!
//! - `persistent-options`: recording options (issue 24) on a 200-stage
//!   network-like chain at half of store-all's peak, 500 slots, one thread:
//!   the chain as it is (`plain`) and with up to 3 options per stage from
//!   `synthetic::with_options` (`options`), the slot table alone (`table`)
//!   and the whole `solve` (exact fronts tried first, then the table).
//!
//! `cargo bench --bench persistent` runs everything (about 10 minutes, most of
//! it L = 1000 and the triple loop at L = 339); a filter such as
//! `cargo bench --bench persistent -- L=339` runs a part.

#[path = "../tests/suite/reference/mod.rs"]
mod reference;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::ThreadPoolBuilder;
use remat::Chain;
use remat::slots::{SlotChain, Slots};
use remat::solve::dp;
use remat::solve::{Algorithm, SolveOptions, persistent, solve};
use remat::synthetic::{Rng, network_like, with_options};

const SLOTS: usize = 500;

/// Halfway between the smallest budget the DP meets and store-all's peak.
fn budget(chain: &Chain) -> u64 {
    let peak = reference::store_all_peak(chain);
    let min = dp::min_budget::<dp::Persistent>(chain, SLOTS).expect("feasible");
    min + (peak - min) / 2
}

fn resnet1001() -> Chain {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/chains/resnet1001-224-b8.json");
    Chain::from_json(&std::fs::read_to_string(path).expect("chain file")).expect("valid chain")
}

fn solves(c: &mut Criterion) {
    let mut group = c.benchmark_group("persistent-500-slots");
    group.sample_size(10);
    let chains = [
        ("L=100", network_like(42, 100)),
        ("L=300", network_like(42, 300)),
        ("L=339", network_like(42, 339)),
        ("resnet1001", resnet1001()),
        ("L=1000", network_like(42, 1000)),
    ];
    for (name, chain) in &chains {
        let budget = budget(chain);
        let opts =
            SolveOptions { slots: std::num::NonZeroUsize::new(SLOTS).expect("slots > 0"), ..SolveOptions::default() };
        for threads in [1, 2] {
            let pool = ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
            let id = BenchmarkId::new(*name, format!("{threads}-thread"));
            group.bench_function(id, |b| {
                b.iter(|| pool.install(|| solve(chain, budget, Algorithm::Persistent, &opts).expect("feasible")))
            });
        }
    }
    group.finish();
}

fn against_triple_loop(c: &mut Criterion) {
    let mut group = c.benchmark_group("persistent-vs-triple-loop");
    group.sample_size(10);
    let pool = ThreadPoolBuilder::new().num_threads(1).build().expect("thread pool");
    for len in [100, 339] {
        let chain = network_like(42, len);
        let sc = SlotChain::new(&chain, Slots::new(budget(&chain), SLOTS));
        group.bench_with_input(BenchmarkId::new("table", format!("L={len}")), &sc, |b, sc| {
            b.iter(|| pool.install(|| persistent::Table::build(sc.clone(), None)))
        });
        group.bench_with_input(BenchmarkId::new("triple-loop", format!("L={len}")), &sc, |b, sc| {
            b.iter(|| reference::Reference::<f64>::build(sc.clone()))
        });
    }
    group.finish();
}

/// The 200-stage chain of the options benchmark, with up to 3 options per
/// stage (1 to 3, drawn by `with_options`; recompute times up to 1, about a
/// third of a backward).
fn optioned(chain: &Chain) -> Chain {
    with_options(&mut Rng::new(24), chain, 3, 1)
}

fn options(c: &mut Criterion) {
    let mut group = c.benchmark_group("persistent-options");
    group.sample_size(10);
    let pool = ThreadPoolBuilder::new().num_threads(1).build().expect("thread pool");
    let plain = network_like(42, 200);
    let budget = reference::store_all_peak(&plain) / 2;
    let with = optioned(&plain);
    let opts =
        SolveOptions { slots: std::num::NonZeroUsize::new(SLOTS).expect("slots > 0"), ..SolveOptions::default() };
    let count: usize = (1..=with.len()).map(|l| with.option_count(l)).sum();
    for (name, chain) in [("plain", &plain), ("options", &with)] {
        let sol = solve(chain, budget, Algorithm::Persistent, &opts).expect("feasible");
        eprintln!(
            "L=200/{name}: budget {budget} bytes, {count} options in all on the optioned chain, makespan {} ({})",
            sol.schedule.makespan,
            sol.detail.as_deref().unwrap_or("")
        );
    }
    for (name, chain) in [("plain", &plain), ("options", &with)] {
        let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
        group.bench_with_input(BenchmarkId::new("table", format!("L=200/{name}")), &sc, |b, sc| {
            b.iter(|| pool.install(|| persistent::Table::build(sc.clone(), None)))
        });
        group.bench_function(BenchmarkId::new("solve", format!("L=200/{name}")), |b| {
            b.iter(|| pool.install(|| solve(chain, budget, Algorithm::Persistent, &opts).expect("feasible")))
        });
    }
    group.finish();
}

/// Micro-batches in flight (issue 28): `solve` with 1 and with 4 in flight,
/// persistent (exact fronts where they fit, as `solve` decides) and floating,
/// at half of store-all's rank peak for 4 in flight.
fn in_flight(c: &mut Criterion) {
    let mut group = c.benchmark_group("in-flight");
    group.sample_size(10);
    let pool = ThreadPoolBuilder::new().num_threads(1).build().expect("thread pool");
    let gpt2 = concat!(env!("CARGO_MANIFEST_DIR"), "/chains/gpt2-small-s1024-b8.json");
    let gpt2 = Chain::from_json(&std::fs::read_to_string(gpt2).expect("chain file")).expect("valid chain");
    let store_all = |chain: &Chain| {
        solve(chain, u64::MAX / 8, Algorithm::StoreAll, &SolveOptions::default()).expect("store-all fits")
    };
    for (name, chain) in [("gpt2-small", gpt2), ("L=30", network_like(42, 30)), ("L=100", network_like(42, 100))] {
        let budget = store_all(&chain).replay.rank_peak(4).unwrap() / 2;
        let algorithms: &[Algorithm] =
            if chain.len() <= 30 { &[Algorithm::Persistent, Algorithm::Floating] } else { &[Algorithm::Persistent] };
        for &algorithm in algorithms {
            for k in [1usize, 4] {
                let opts = SolveOptions {
                    in_flight: std::num::NonZeroUsize::new(k).expect("k > 0"),
                    ..SolveOptions::default()
                };
                let id = BenchmarkId::new(format!("{name}/{algorithm}"), format!("{k}-in-flight"));
                group.bench_function(id, |b| {
                    b.iter(|| pool.install(|| solve(&chain, budget, algorithm, &opts).expect("feasible")))
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, solves, against_triple_loop, options, in_flight);
criterion_main!(benches);
