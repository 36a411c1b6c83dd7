//! The Checkmate MILP and its LP rounding on the U-Net and ResNet-block graphs
//! of `chains/graphs/`, at three budgets each, with the best LP backend of the
//! build (HiGHS with `--features highs`, else microlp, which only closes the
//! loosest cases; see `examples/milp_timings.rs` for gaps and statuses).
//!
//! `cargo bench --features highs --bench graph_milp`

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use remat::graph::milp::{Backend, MilpOptions};
use remat::graph::{GraphFile, backward, solve_checkmate};

fn bench(c: &mut Criterion) {
    let backend = Backend::best_available();
    let opts = MilpOptions { backend, time_limit: Some(Duration::from_secs(120)), ticker: None };
    let mut group = c.benchmark_group(format!("graph-{backend}"));
    group.sample_size(10);
    for (name, budgets) in [("unet-tiny", [350u64, 300, 250]), ("resnet-blocks", [200, 175, 150])] {
        let path = format!("{}/chains/graphs/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let GraphFile::Forward(forward) = GraphFile::from_json(&std::fs::read_to_string(path).unwrap()).unwrap() else {
            panic!("{name} is a forward graph")
        };
        let graph = backward::derive(&forward).unwrap();
        for mib in budgets {
            for algorithm in [remat::graph::GraphAlgorithm::Checkmate, remat::graph::GraphAlgorithm::CheckmateApprox] {
                let id = BenchmarkId::new(format!("{name}/{algorithm}"), format!("{mib}MiB"));
                group.bench_function(id, |b| b.iter(|| solve_checkmate(&graph, mib << 20, algorithm, &opts)));
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
