//! The executor against the model: for random small networks and every
//! algorithm, schedules run on real ndarray stages must give store-all's
//! gradients bit for bit and the simulator's memory figures operation by
//! operation. Profiled times are medians of real runs, so schedules may differ
//! from run to run; nothing below depends on their values.

use std::sync::Mutex;

use ndarray::Array2;
use remat::exec::layers::{Gelu, LayerNorm, Linear, MeanSquaredError, Relu, Residual, Tanh};
use remat::exec::{Budget, Checkpointed, Trace};
use remat::exec::{
    ExecError, Ledger, ProfileOptions, Record, Sequential, Shape, ShapeError, Stage, StepResult, Tensor, execute,
    profile, store_all_operations,
};
use remat::schedule::parse_operations;
use remat::solve::{Algorithm, SolveError, SolveOptions, min_budget};
use remat::synthetic::Rng;
use remat::{Chain, Op, Replay, simulate};

/// Random small networks per run (each solved by every algorithm at 4 budgets).
const NETWORKS: u64 = 200;

fn uniform_matrix(rng: &mut Rng, shape: Shape) -> Array2<f32> {
    Array2::from_shape_simple_fn(shape, || (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
}

fn activation(rng: &mut Rng) -> Box<dyn Stage> {
    match rng.range(0, 2) {
        0 => Box::new(Relu),
        1 => Box::new(Tanh),
        _ => Box::new(Gelu),
    }
}

/// A random network of 1-6 stages on widths 1-6, with its input and target
/// batch; the same seed gives the same network, parameters included.
fn random_network(seed: u64) -> (Sequential, Array2<f32>, Array2<f32>) {
    let mut rng = Rng::new(seed);
    let rows = rng.range(1, 3) as usize;
    let input_width = rng.range(1, 5) as usize;
    let mut width = input_width;
    let mut net = Sequential::new();
    for _ in 0..rng.range(1, 6) {
        match rng.range(0, 5) {
            0 => {
                let next = rng.range(1, 6) as usize;
                net.push(Box::new(Linear::new(width, next, &mut rng)));
                width = next;
            }
            1 => net.push(activation(&mut rng)),
            2 => net.push(Box::new(LayerNorm::new(width))),
            3 => {
                let hidden = rng.range(1, 8) as usize;
                net.push(Box::new(Residual::mlp(width, hidden, &mut rng)));
            }
            _ => {
                let mut inner = Sequential::new();
                inner.push(Box::new(Linear::new(width, width, &mut rng)));
                inner.push(activation(&mut rng));
                net.push(Box::new(Residual::new(inner)));
            }
        }
    }
    let input = uniform_matrix(&mut rng, (rows, input_width));
    let target = uniform_matrix(&mut rng, (rows, width));
    (net, input, target)
}

fn bits(a: &Array2<f32>) -> Vec<u32> {
    a.iter().map(|v| v.to_bits()).collect()
}

fn assert_same_numbers(got: &StepResult, reference: &StepResult, context: &str) {
    assert_eq!(got.loss.to_bits(), reference.loss.to_bits(), "{context}: loss");
    assert_eq!(got.gradients.len(), reference.gradients.len(), "{context}: number of gradients");
    for (i, (g, r)) in got.gradients.iter().zip(&reference.gradients).enumerate() {
        assert_eq!(bits(g), bits(r), "{context}: gradient of parameter {i}");
    }
    assert_eq!(bits(&got.input_gradient), bits(&reference.input_gradient), "{context}: input gradient");
}

/// The trace equals the simulator's replay at every operation, kind by kind,
/// and the live bytes never exceed the accounted ones.
fn assert_trace_is_replay(trace: &Trace, replay: &Replay, context: &str) {
    assert_eq!(trace.initial, replay.initial, "{context}: initial memory");
    assert_eq!(trace.steps.len(), replay.steps.len(), "{context}: operations");
    for (i, (ours, theirs)) in trace.steps.iter().zip(&replay.steps).enumerate() {
        assert_eq!(ours.op, theirs.op, "{context}: operation {i}");
        assert_eq!(ours.during, theirs.during, "{context}: memory while {} (operation {i}) runs", ours.op);
        assert_eq!(ours.after, theirs.after, "{context}: memory after {} (operation {i})", ours.op);
        assert!(ours.live_peak <= ours.during.total(), "{context}: live bytes above the accounted figure");
        assert!(ours.workspace_used <= ours.during.transient, "{context}: workspace above its reservation");
    }
    assert_eq!(trace.peak, replay.peak_memory, "{context}: peak");
    assert!(trace.live_peak <= trace.peak, "{context}: live peak");
}

fn sizes(chain: &Chain) -> Vec<[u64; 5]> {
    (1..=chain.len() + 1)
        .map(|l| {
            let s = chain.stage(l);
            [s.output_size, s.saved_size, s.gradient_size, s.forward_overhead, s.backward_overhead]
        })
        .collect()
}

/// Up to 4 distinct budgets from `lo` to `hi`.
fn budgets(lo: u64, hi: u64) -> Vec<u64> {
    let mut b: Vec<u64> = (0..4).map(|i| lo + (hi - lo) * i / 3).collect();
    b.dedup();
    b
}

#[test]
fn every_algorithm_reproduces_store_all_gradients_and_the_predicted_memory() {
    let (mut runs, mut recomputing, mut infeasible) = (0, 0, 0);
    for seed in 0..NETWORKS {
        let (mut net, x, t) = random_network(seed);
        let chain = profile(&mut net, &MeanSquaredError, &x, &t, &ProfileOptions::default()).unwrap();
        let store_all = store_all_operations(net.len());
        let reference = execute(&mut net, &MeanSquaredError, &chain, &store_all, &x, &t).unwrap();
        let store_all_replay = simulate(&chain, &store_all).unwrap();
        assert_trace_is_replay(&reference.trace, &store_all_replay, &format!("network {seed}, store-all"));
        for &algorithm in Algorithm::ALL {
            let context = format!("network {seed} ({} stages), {algorithm}", net.len());
            let lowest = match min_budget(&chain, algorithm, &SolveOptions::default()) {
                Ok(Some(m)) => m,
                Ok(None) => store_all_replay.peak_memory,
                Err(SolveError::TooLarge { .. }) => continue,
                Err(e) => panic!("{context}: {e}"),
            };
            let mut solved = 0;
            for budget in budgets(lowest, lowest.max(store_all_replay.peak_memory)) {
                let context = format!("{context}, budget {budget}");
                let (net, _, _) = random_network(seed);
                let mut ck = match Checkpointed::new(net, MeanSquaredError, &x, &t, budget, algorithm) {
                    Ok(ck) => ck,
                    Err(ExecError::Solve(SolveError::Infeasible { .. })) => {
                        infeasible += 1;
                        continue;
                    }
                    Err(e) => panic!("{context}: {e}"),
                };
                solved += 1;
                // Memory depends on shapes only: every profile measures the same sizes.
                assert_eq!(sizes(ck.chain()), sizes(&chain), "{context}: profiled sizes");
                let ops = ck.solution().schedule.operations.clone();
                if ops.len() > store_all.len() {
                    recomputing += 1;
                }
                let replay = simulate(ck.chain(), &ops).unwrap();
                for step in 0..2 {
                    let context = format!("{context}, step {step}");
                    let outcome = ck.step(&x, &t).unwrap_or_else(|e| panic!("{context}: {e}"));
                    let reference = ck.run_schedule(&store_all, &x, &t).unwrap();
                    assert_same_numbers(&outcome, &reference, &context);
                    assert_trace_is_replay(&outcome.trace, &replay, &context);
                    assert!(outcome.trace.peak <= budget, "{context}: over budget");
                    ck.network_mut().sgd_step(0.1);
                }
                runs += 1;
            }
            assert!(solved > 0, "{context}: no budget from {lowest} up worked");
        }
    }
    eprintln!("runs {runs} recomputing {recomputing} infeasible {infeasible}");
    // The comparison is only worth something if schedules really recompute.
    assert!(recomputing * 3 >= runs, "only {recomputing} of {runs} schedules recompute");
}

#[test]
fn a_fraction_of_store_all_is_a_budget() {
    let mut rng = Rng::new(4);
    let mut net = Sequential::new().with(Linear::new(4, 4, &mut rng));
    for _ in 0..4 {
        net = net.with(Residual::mlp(4, 8, &mut rng));
    }
    let (x, t) = (uniform_matrix(&mut rng, (2, 4)), uniform_matrix(&mut rng, (2, 4)));
    let ck = Checkpointed::new(net, MeanSquaredError, &x, &t, Budget::StoreAllFraction(0.75), Algorithm::Exhaustive)
        .unwrap();
    let store_all = simulate(ck.chain(), &store_all_operations(ck.chain().len())).unwrap().peak_memory;
    assert_eq!(ck.store_all_peak(), store_all);
    assert_eq!(ck.budget(), store_all * 3 / 4);
    assert!(ck.solution().schedule.peak_memory <= ck.budget());
}

#[test]
fn store_all_execution_matches_the_network_run_as_one_stage() {
    for seed in 100..120 {
        let (mut net, x, t) = random_network(seed);
        let chain = profile(&mut net, &MeanSquaredError, &x, &t, &ProfileOptions { repeats: 1 }).unwrap();
        let ops = store_all_operations(net.len());
        let executed = execute(&mut net, &MeanSquaredError, &chain, &ops, &x, &t).unwrap();
        // The same computation without the executor: the Sequential is a Stage.
        use remat::exec::Loss;
        let ledger = Ledger::new();
        let input = ledger.track(x.clone());
        let record = net.forward_record(&input, &ledger);
        let loss = MeanSquaredError.forward(record.output(), &t, &ledger);
        let one = ledger.track(Array2::ones((1, 1)));
        let dy = MeanSquaredError.backward(&loss, record.output(), &t, &one, &ledger);
        net.zero_grad();
        let dx = net.backward(&record, &input, &dy, &ledger);
        assert_eq!(loss.output().array()[[0, 0]].to_bits(), executed.loss.to_bits(), "network {seed}: loss");
        for (i, (a, b)) in net.gradients().iter().zip(&executed.gradients).enumerate() {
            assert_eq!(bits(a), bits(b), "network {seed}: parameter {i}");
        }
        assert_eq!(bits(dx.array()), bits(&executed.input_gradient), "network {seed}: input gradient");
    }
}

#[test]
fn profile_measures_outputs_records_and_workspaces() {
    let mut rng = Rng::new(5);
    let mut net = Sequential::new()
        .with(Linear::new(3, 4, &mut rng))
        .with(Relu)
        .with(LayerNorm::new(4))
        .with(Residual::mlp(4, 8, &mut rng))
        .with(Linear::new(4, 1, &mut rng));
    let x = uniform_matrix(&mut rng, (2, 3));
    let t = uniform_matrix(&mut rng, (2, 1));
    let chain = profile(&mut net, &MeanSquaredError, &x, &t, &ProfileOptions::default()).unwrap();
    assert_eq!(chain.output_size(0), 2 * 3 * 4);
    // [output, saved, gradient, o_f, o_b] in bytes, batch of 2 rows of f32.
    let expected = [
        [32, 32, 32, 0, 0], // linear 3->4: records its output only
        [32, 32, 32, 0, 0], // relu
        [32, 48, 32, 0, 0], // layernorm: plus a mean and an rstd per row
        // residual mlp: layernorm 32+8+8, linear 4->8 64, gelu 64, linear 8->4 32, sum 32.
        // Without recording, the peak is the hidden 64 next to the layernorm's
        // 32 (or the second linear's 32): 96 over the input, 64 beyond the output.
        // Backward: the gelu's 64-byte gradient next to the linear's 64: 128,
        // 96 beyond the 32-byte result.
        [32, 240, 32, 64, 96],
        [8, 8, 8, 0, 0], // linear 4->1
        [4, 4, 4, 0, 0], // mse: the 1x1 loss
    ];
    assert_eq!(sizes(&chain), expected);
    for l in 1..=chain.len() + 1 {
        let s = chain.stage(l);
        assert!(s.forward_time.is_finite() && s.forward_time >= 0.0 && s.backward_time >= 0.0);
    }
    assert_eq!(chain.stage(4).name.as_deref(), Some("residual [layernorm 4, linear 4->8, gelu, linear 8->4]"));
    assert_eq!(chain.metadata().unwrap()["input_shape"], serde_json::json!([2, 3]));
    // Profiling leaves no gradient behind.
    assert!(net.gradients().iter().all(|g| g.iter().all(|&v| v == 0.0)));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let mut rng = Rng::new(9);
    let net = || Sequential::new().with(Linear::new(3, 4, &mut Rng::new(1))).with(Tanh);
    let x = uniform_matrix(&mut rng, (2, 3));
    let t = uniform_matrix(&mut rng, (2, 4));

    let e = profile(&mut net(), &MeanSquaredError, &x, &uniform_matrix(&mut rng, (2, 3)), &ProfileOptions::default())
        .unwrap_err();
    assert_eq!(e.to_string(), "the target has shape (2, 3), but the network's output has shape (2, 4)");
    let e = profile(&mut net(), &MeanSquaredError, &x, &t, &ProfileOptions { repeats: 0 }).unwrap_err();
    assert_eq!(e.to_string(), "profile repeats must be at least 1");
    let e = profile(&mut net(), &MeanSquaredError, &uniform_matrix(&mut rng, (2, 5)), &t, &ProfileOptions::default())
        .unwrap_err();
    assert_eq!(e.to_string(), "stage 1 (linear 3->4): expects 3 input features, got 5");

    // An infeasible budget names the smallest one that works.
    let e = Checkpointed::new(net(), MeanSquaredError, &x, &t, 10, Algorithm::Exhaustive).err().unwrap();
    assert!(matches!(e, ExecError::Solve(SolveError::Infeasible { min_budget: Some(_), .. })), "{e}");
    assert!(e.to_string().contains("the smallest budget it can meet is"), "{e}");

    let e =
        Checkpointed::new(net(), MeanSquaredError, &x, &t, Budget::StoreAllFraction(f64::NAN), Algorithm::Persistent)
            .err()
            .unwrap();
    assert_eq!(e.to_string(), "the budget fraction of store-all must be positive, got NaN");

    let mut ck = Checkpointed::new(net(), MeanSquaredError, &x, &t, 1 << 20, Algorithm::Persistent).unwrap();
    let e = ck.step(&uniform_matrix(&mut rng, (3, 3)), &t).unwrap_err().to_string();
    assert!(e.starts_with("the input has shape (3, 3), but the network was profiled and solved for (2, 3)"), "{e}");
    let e = ck.run_schedule(&parse_operations("F_all^1 B^1").unwrap(), &x, &t).unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid schedule: operation 2 (B^1) is invalid: backwards run from B^3 down to B^1; the next one is B^3"
    );

    let short = Chain::new("one", 24, vec![remat::Stage::simple(1.0, 1.0, 32, 32)], remat::Stage::zero_loss()).unwrap();
    let e = execute(&mut net(), &MeanSquaredError, &short, &store_all_operations(2), &x, &t).unwrap_err();
    assert_eq!(e.to_string(), "the chain does not match the network: the chain has 1 stages and the network 2");
}

/// Allocates a scratch tensor only when the first input value is positive: its
/// memory depends on the data, which the model cannot describe.
struct DataDependent;

impl Stage for DataDependent {
    fn name(&self) -> String {
        "data-dependent".into()
    }
    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        Ok(input)
    }
    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
        let _scratch = (input.array()[[0, 0]] > 0.0).then(|| ledger.zeros(10, 10));
        input.copy()
    }
    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        Record::leaf(self.forward(input, ledger), Vec::new())
    }
    fn backward(&mut self, _: &Record, _: &Tensor, grad_output: &Tensor, _: &Ledger) -> Tensor {
        grad_output.copy()
    }
}

/// Keeps the last tensor it made: it breaks the rule that a stage holds nothing.
#[derive(Default)]
struct Hoarder(Mutex<Option<Tensor>>);

impl Stage for Hoarder {
    fn name(&self) -> String {
        "hoarder".into()
    }
    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        Ok(input)
    }
    fn forward(&self, input: &Tensor, _: &Ledger) -> Tensor {
        *self.0.lock().unwrap() = Some(input.copy());
        input.copy()
    }
    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        Record::leaf(self.forward(input, ledger), Vec::new())
    }
    fn backward(&mut self, _: &Record, _: &Tensor, grad_output: &Tensor, _: &Ledger) -> Tensor {
        grad_output.copy()
    }
}

#[test]
fn stages_that_break_the_model_are_caught() {
    let t = Array2::zeros((2, 2));
    // Profiled on a negative input (no scratch), run on a positive one: the
    // scratch outgrows the reserved workspace and the step says where.
    let negative = Array2::from_elem((2, 2), -1.0);
    let positive = Array2::from_elem((2, 2), 1.0);
    let net = Sequential::new().with(DataDependent).with(Tanh);
    let mut ck = Checkpointed::new(net, MeanSquaredError, &negative, &t, 1 << 20, Algorithm::Exhaustive).unwrap();
    ck.step(&negative, &t).unwrap();
    let e = ck.step(&positive, &t).unwrap_err();
    assert!(matches!(e, ExecError::Mismatch { index: 0, op: Op::FAll(1, 0), .. }), "{e}");
    assert!(e.to_string().contains("operation 1 (F_all^1): the executor accounted"), "{e}");

    let e = profile(
        &mut Sequential::new().with(Hoarder::default()),
        &MeanSquaredError,
        &negative,
        &t,
        &ProfileOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "stage 1 (hoarder): 16 bytes it allocated outlived the operation");
}
