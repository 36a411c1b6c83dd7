//! Repeated blocks (issue 25): sub-chains keyed by content against the
//! plain DPs, on stacks of GPT-2 XL blocks (an embedding, N copies of
//! `chains/gpt2-xl-s1024-b4-bf16.json`'s block, `ln_f` and the head) and on
//! ResNet-1001 (batch 8), at a third of store-all's peak, 1 and 2 threads:
//! - `exact-plain` / `exact-shared`: the exact fronts, each sub-chain on its
//!   own (as before issue 25) or once per distinct sub-chain, with the
//!   schedule read back;
//! - `slots-plain` / `slots-shared`: the 500-slot persistent table, the same
//!   two ways, with the schedule;
//! - `floating-plain` / `floating-shared`: the 500-slot floating table, the
//!   same two ways, with the schedule;
//! - `solve`: the default `solve` (auto), as the command line runs it.
//!
//! Only the variants that take seconds at most are run (criterion takes ten
//! samples of each): the plain 500-slot table at N = 1000 takes 15 to 50 s,
//! the exact fronts at N = 1000 two minutes (shared) or more than the
//! memory allowed (plain), the plain floating table at N = 200 40 s; `docs/repeated-blocks.md` has those timings from
//! the command line. `cargo bench --bench repeated_blocks -- N=200` runs a
//! part.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use rayon::ThreadPoolBuilder;
use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::Fronts;
use remat::solve::persistent::Table;
use remat::solve::{Algorithm, SolveOptions, solve};
use remat::synthetic::stack;
use remat::{Chain, Op};

const SLOTS: usize = 500;

fn store_all_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).chain((1..=n).rev().map(Op::B)).collect();
    remat::simulate(chain, &ops).expect("store-all is valid").peak_memory
}

fn chain_file(name: &str) -> Chain {
    let path = format!("{}/chains/{name}.json", env!("CARGO_MANIFEST_DIR"));
    Chain::from_json(&std::fs::read_to_string(path).expect("chain file")).expect("valid chain")
}

fn exact(chain: &Chain, budget: u64, share: bool) -> usize {
    let fronts = if share { Fronts::build(chain, budget) } else { Fronts::build_unshared(chain, budget) };
    fronts.sequence(budget).map_or(0, |ops| ops.len())
}

fn slots(chain: &Chain, budget: u64, share: bool) -> usize {
    let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
    let m = sc.slots.capacity;
    let table = if share { Table::build(sc, None) } else { Table::build_plain(sc) };
    table.sequence(m).map_or(0, |ops| ops.len())
}

fn floating(chain: &Chain, budget: u64, share: bool) -> usize {
    use remat::solve::floating::Thresholds;
    let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
    let m = sc.slots.capacity;
    let table = if share { Thresholds::new(sc) } else { Thresholds::new_plain(sc) }.fill(None);
    table.sequence(m).map_or(0, |ops| ops.len())
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("repeated");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_secs(1));
    group.measurement_time(std::time::Duration::from_secs(3));
    let gpt2 = chain_file("gpt2-xl-s1024-b4-bf16");
    // (name, chain, [exact-plain, exact-shared, slots-plain, slots-shared,
    // floating-plain, floating-shared])
    let chains = [
        ("N=48", stack(&gpt2, 1, 1, 2, 48), [true; 6]),
        ("N=200", stack(&gpt2, 1, 1, 2, 200), [true, true, true, true, false, true]),
        ("N=1000", stack(&gpt2, 1, 1, 2, 1000), [false, false, false, true, false, false]),
        ("resnet1001", chain_file("resnet1001-224-b8"), [false, false, true, true, false, false]),
    ];
    let opts = SolveOptions::default();
    for (name, chain, run) in &chains {
        let budget = store_all_peak(chain) / 3;
        for threads in [1, 2] {
            let pool = ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
            let id = |what: &str| BenchmarkId::new(format!("{name}/{what}"), format!("{threads}-thread"));
            let variants: [(&str, &(dyn Fn() -> usize + Sync)); 6] = [
                ("exact-plain", &|| exact(chain, budget, false)),
                ("exact-shared", &|| exact(chain, budget, true)),
                ("slots-plain", &|| slots(chain, budget, false)),
                ("slots-shared", &|| slots(chain, budget, true)),
                ("floating-plain", &|| floating(chain, budget, false)),
                ("floating-shared", &|| floating(chain, budget, true)),
            ];
            for ((what, f), &on) in variants.iter().zip(run) {
                if on {
                    group.bench_function(id(what), |b| b.iter(|| pool.install(f)));
                }
            }
            group.bench_function(id("solve"), |b| {
                b.iter(|| pool.install(|| solve(chain, budget, Algorithm::Auto, &opts).expect("feasible")))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
