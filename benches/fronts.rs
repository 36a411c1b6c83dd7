//! `solve --algorithm persistent` before and after it answered exactly in
//! bytes (issue 18), side by side, at the default 500 slots and a budget
//! halfway between the smallest feasible one and store-all's peak (as
//! `benches/persistent.rs`):
//! - `before`: the 500-slot DP as `solve` ran it before the fronts (its
//!   feasibility check, table, sequence and replay);
//! - `after`: `solve` itself (`solve::exact`): the exact fronts within the
//!   slot table's memory, or, when they give up, the same 500-slot DP;
//! - `exact`: the fronts with no limit, sequence and replay (only where they
//!   finish in seconds: network-like L = 100, DenseNet-121 batch 32).
//!
//! Chains: network-like L = 100, DenseNet-121 (batch 32, 74 stages),
//! ResNet-1001 (chains/resnet1001-224-b8.json, L = 339) and network-like
//! L = 1000, each on 1 and 2 threads. `cargo bench --bench fronts` runs
//! everything (L = 1000 takes most of it: about 20 s a solve); a filter such
//! as `cargo bench --bench fronts -- resnet1001` runs a part.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::ThreadPoolBuilder;
use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::Fronts;
use remat::solve::{Algorithm, SolveOptions, persistent, solve};
use remat::synthetic::network_like;
use remat::{Chain, Op, simulate_within};

const SLOTS: usize = 500;

fn store_all_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
    remat::simulate(chain, &ops).expect("store-all is valid").peak_memory
}

/// Halfway between the smallest budget the 500-slot DP meets and store-all's peak.
fn budget(chain: &Chain) -> u64 {
    let peak = store_all_peak(chain);
    let min = remat::solve::dp::min_budget::<remat::solve::dp::Persistent>(chain, SLOTS).expect("feasible");
    min + (peak - min) / 2
}

fn chain_file(name: &str) -> Chain {
    let path = format!("{}/chains/{name}.json", env!("CARGO_MANIFEST_DIR"));
    Chain::from_json(&std::fs::read_to_string(path).expect("chain file")).expect("valid chain")
}

/// The 500-slot DP's makespan, its schedule replayed: `solve` before issue 18.
fn slot_dp(chain: &Chain, budget: u64) -> f64 {
    let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
    let m = sc.slots.capacity;
    assert!(persistent::min_peak_slots(&sc) <= m, "feasible");
    let table = persistent::Table::build(sc, None);
    let ops = table.sequence(m).expect("feasible");
    simulate_within(chain, &ops, budget).expect("replays").makespan
}

/// The exact makespan from fronts with no limit, its schedule replayed.
fn exact(chain: &Chain, budget: u64) -> f64 {
    let table = Fronts::build(chain, budget);
    let ops = table.sequence(budget).expect("feasible");
    simulate_within(chain, &ops, budget).expect("replays").makespan
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("fronts");
    group.sample_size(10);
    let chains = [
        ("L=100", network_like(42, 100), true),
        ("densenet121-b32", chain_file("densenet121-224-b32"), true),
        ("resnet1001", chain_file("resnet1001-224-b8"), false),
        ("L=1000", network_like(42, 1000), false),
    ];
    let opts = SolveOptions { slots: std::num::NonZeroUsize::new(SLOTS).expect("slots > 0"), ..Default::default() };
    for (name, chain, unlimited) in &chains {
        let budget = budget(chain);
        for threads in [1, 2] {
            let pool = ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
            let id = |what: &str| BenchmarkId::new(format!("{name}/{what}"), format!("{threads}-thread"));
            group.bench_function(id("before"), |b| b.iter(|| pool.install(|| slot_dp(chain, budget))));
            group.bench_function(id("after"), |b| {
                b.iter(|| pool.install(|| solve(chain, budget, Algorithm::Persistent, &opts).expect("feasible")))
            });
            if *unlimited {
                group.bench_function(id("exact"), |b| b.iter(|| pool.install(|| exact(chain, budget))));
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
