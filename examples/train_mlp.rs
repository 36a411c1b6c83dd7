//! Trains a deep MLP a few steps under a memory budget with an optimal
//! rematerialization schedule, and checks it against store-all.
//!
//! ```text
//! cargo run --release --example train_mlp [-- --memory SIZE] [--algorithm NAME] [--steps N]
//! ```
//!
//! The network is profiled on the first batch, solved once, then every step
//! runs the schedule: the example prints the simulator's predicted peak, the
//! peak the executor's ledger measured, and the largest difference between the
//! gradients and those of store-all (no recomputation) on the same batch.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use ndarray::Array2;
use remat::Op;
use remat::exec::layers::{LayerNorm, Linear, MeanSquaredError, Residual, Tanh};
use remat::exec::{Budget, Checkpointed, ExecError, Sequential, Stage as _, StepResult, store_all_operations};
use remat::size::{format_size, parse_size};
use remat::solve::{Algorithm, SolveError};
use remat::synthetic::Rng;

/// Train a deep MLP under a memory budget with a remat schedule.
#[derive(Parser)]
struct Args {
    /// Memory budget for activations, records, gradients and workspace (e.g.
    /// `6MiB`); parameters are outside it. Default: half of what store-all needs.
    #[arg(long, value_parser = |s: &str| parse_size(s).map_err(|e| e.to_string()))]
    memory: Option<u64>,
    /// Solver.
    #[arg(long, default_value = "persistent", value_parser = |s: &str| s.parse::<Algorithm>())]
    algorithm: Algorithm,
    /// Training steps.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    steps: u32,
    /// Rows per batch.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    width: u32,
    /// Residual MLP blocks (each LayerNorm, Linear to 4x width, GELU, Linear back).
    #[arg(long, default_value_t = 16)]
    blocks: u32,
    /// Learning rate of plain gradient descent.
    #[arg(long, default_value_t = 0.05)]
    lr: f32,
    /// Seed of the parameters and the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the profiled chain to this JSON file (readable by `remat solve`).
    #[arg(long, value_name = "PATH")]
    chain_out: Option<std::path::PathBuf>,
}

const OUTPUTS: usize = 16;

fn uniform(rng: &mut Rng, shape: (usize, usize), bound: f32) -> Array2<f32> {
    Array2::from_shape_simple_fn(shape, || ((rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * bound)
}

/// A regression task: targets are a fixed smooth function of the inputs.
struct Task {
    rng: Rng,
    projection: Array2<f32>,
    shape: (usize, usize),
}

impl Task {
    fn batch(&mut self) -> (Array2<f32>, Array2<f32>) {
        let x = uniform(&mut self.rng, self.shape, 1.0);
        let t = x.dot(&self.projection).mapv(f32::tanh);
        (x, t)
    }
}

fn network(args: &Args, rng: &mut Rng) -> Sequential {
    let width = args.width as usize;
    let mut net = Sequential::new().with(Linear::new(width, width, rng)).with(Tanh);
    for _ in 0..args.blocks {
        net = net.with(Residual::mlp(width, 4 * width, rng));
    }
    net.with(LayerNorm::new(width)).with(Linear::new(width, OUTPUTS, rng))
}

fn max_difference(a: &StepResult, b: &StepResult) -> f32 {
    let pairs = a.gradients.iter().zip(&b.gradients).chain([(&a.input_gradient, &b.input_gradient)]);
    pairs.flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max)
}

fn run(args: &Args) -> Result<(), ExecError> {
    let mut rng = Rng::new(args.seed);
    let net = network(args, &mut rng);
    let (batch, width) = (args.batch as usize, args.width as usize);
    let mut task = Task { projection: uniform(&mut rng, (width, OUTPUTS), 0.2), rng, shape: (batch, width) };
    let parameters: usize = net.params().iter().map(|p| p.value.len()).sum();
    println!(
        "network: {} stages (linear, tanh, {} residual MLP blocks {width}->{}->{width}, layernorm, linear \
         {width}->{OUTPUTS}), batch {batch}x{width}, MSE loss",
        net.len(),
        args.blocks,
        4 * width
    );
    println!("parameters: {} (outside the budget)", format_size(parameters as u64 * 4));

    let (x, t) = task.batch();
    let budget = args.memory.map_or(Budget::StoreAllFraction(0.5), Budget::Bytes);
    let start = Instant::now();
    let mut ck = Checkpointed::new(net, MeanSquaredError, &x, &t, budget, args.algorithm)?;
    if let Some(path) = &args.chain_out {
        std::fs::write(path, ck.chain().to_json())
            .map_err(|e| ExecError::Options(format!("cannot write `{}`: {e}", path.display())))?;
        println!("profiled chain written to {}", path.display());
    }
    let solution = ck.solution();
    let ops = &solution.schedule.operations;
    let recomputed = ops.iter().filter(|op| op.is_forward()).count() - (ck.chain().len() + 1);
    let store_all_time = ck.chain().store_all_time();
    println!("profiled and solved in {:.2} s (times: median of 5 runs per operation)", start.elapsed().as_secs_f64());
    println!(
        "store-all needs {}; budget {}{}",
        format_size(ck.store_all_peak()),
        format_size(ck.budget()),
        if args.memory.is_none() { " (half of store-all)" } else { "" }
    );
    println!(
        "{} schedule: {} operations, {recomputed} recomputed forwards ({} F_all, {} F_ck, {} F_none); predicted \
         makespan {:.2} ms vs {:.2} ms for store-all (+{:.0}%)",
        args.algorithm,
        ops.len(),
        ops.iter().filter(|op| matches!(op, Op::FAll(..))).count(),
        ops.iter().filter(|op| matches!(op, Op::FCk(_))).count(),
        ops.iter().filter(|op| matches!(op, Op::FNone(_))).count(),
        solution.schedule.makespan,
        store_all_time,
        100.0 * (solution.schedule.makespan / store_all_time - 1.0)
    );
    let predicted = solution.schedule.peak_memory;
    let store_all = store_all_operations(ck.chain().len());
    println!();
    println!(
        "{:>4}  {:>9}  {:>14}  {:>13}  {:>11}  {:>22}  {:>9}  {:>14}",
        "step",
        "loss",
        "predicted peak",
        "measured peak",
        "live peak",
        "max |grad - store-all|",
        "time (ms)",
        "store-all (ms)"
    );
    let mut all_within = true;
    let mut largest_difference = 0.0f32;
    for step in 1..=args.steps {
        let (x, t) = if step == 1 { (x.clone(), t.clone()) } else { task.batch() };
        let start = Instant::now();
        let outcome = ck.step(&x, &t)?;
        let time = start.elapsed().as_secs_f64() * 1e3;
        let start = Instant::now();
        let reference = ck.run_schedule(&store_all, &x, &t)?;
        let reference_time = start.elapsed().as_secs_f64() * 1e3;
        let difference = max_difference(&outcome, &reference);
        largest_difference = largest_difference.max(difference);
        all_within &= outcome.trace.peak <= ck.budget();
        println!(
            "{step:>4}  {:>9.5}  {:>14}  {:>13}  {:>11}  {:>22}  {time:>9.1}  {reference_time:>14.1}",
            outcome.loss,
            format_size(predicted),
            format_size(outcome.trace.peak),
            format_size(outcome.trace.live_peak),
            difference,
        );
        ck.network_mut().sgd_step(args.lr);
    }
    println!();
    println!(
        "measured peak {} the budget at every step; measured = predicted at every operation (checked); \
         largest gradient difference from store-all: {largest_difference}",
        if all_within { "within" } else { "OVER" }
    );
    println!("(live peak: the most tensor bytes alive at once; the measured peak counts each operation's workspace");
    println!(" at its profiled reservation, as the simulator does)");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                ExecError::Solve(SolveError::Infeasible { .. }) => ExitCode::from(1),
                _ => ExitCode::from(2),
            }
        }
    }
}
