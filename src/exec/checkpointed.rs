//! [`Checkpointed`]: a network trained under a memory budget with an optimal
//! schedule, the Rust counterpart of Rotor's `Checkpointable`.

use ndarray::Array2;

use super::layers::MeanSquaredError;
use super::{ExecError, Loss, ProfileOptions, Sequential, Shape, StepResult, execute, profile, store_all_operations};
use crate::chain::Chain;
use crate::schedule::Op;
use crate::simulate::{Replay, simulate};
use crate::solve::{Algorithm, Solution, SolveOptions, solve};

/// The memory budget of a [`Checkpointed`] network.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// This many bytes.
    Bytes(u64),
    /// This fraction of the peak of the store-all schedule on the profiled
    /// chain (rounded down to whole bytes): `0.5` is half of what training
    /// without recomputation needs.
    StoreAllFraction(f64),
}

impl From<u64> for Budget {
    fn from(bytes: u64) -> Budget {
        Budget::Bytes(bytes)
    }
}

impl Budget {
    /// The budget in bytes for `chain`, whose store-all peak is `store_all`.
    fn bytes(self, store_all: u64) -> Result<u64, ExecError> {
        match self {
            Budget::Bytes(bytes) => Ok(bytes),
            Budget::StoreAllFraction(f) if f.is_finite() && f > 0.0 => Ok((store_all as f64 * f) as u64),
            Budget::StoreAllFraction(f) => {
                Err(ExecError::Options(format!("the budget fraction of store-all must be positive, got {f}")))
            }
        }
    }
}

/// How [`Checkpointed`] profiles and solves.
#[derive(Clone, Copy, Default)]
pub struct Options<'a> {
    /// Profiling (repeats per measurement).
    pub profile: ProfileOptions,
    /// Solving (memory slots, progress callback).
    pub solve: SolveOptions<'a>,
}

/// A [`Sequential`] and its loss, trained under a memory budget: profiled once
/// on a sample batch, solved once, then every [`step`](Checkpointed::step)
/// runs the schedule and checks the memory it measured against the
/// simulator's prediction, operation by operation.
///
/// Batches must have the sample's shapes: the schedule is only valid for the
/// sizes it was computed for.
pub struct Checkpointed<L: Loss = MeanSquaredError> {
    net: Sequential,
    loss: L,
    input_shape: Shape,
    target_shape: Shape,
    chain: Chain,
    solution: Solution,
    store_all_peak: u64,
}

impl<L: Loss> Checkpointed<L> {
    /// Profiles `net` and `loss` on the sample batch and solves for `budget`
    /// (bytes, or a fraction of store-all's peak) with `algorithm`, with
    /// default options. Fails with the solver's
    /// error (which names the smallest feasible budget) if nothing fits.
    pub fn new(
        net: Sequential,
        loss: L,
        sample_input: &Array2<f32>,
        sample_target: &Array2<f32>,
        budget: impl Into<Budget>,
        algorithm: Algorithm,
    ) -> Result<Checkpointed<L>, ExecError> {
        Checkpointed::with_options(net, loss, sample_input, sample_target, budget, algorithm, &Options::default())
    }

    /// [`new`](Checkpointed::new) with explicit options.
    pub fn with_options(
        mut net: Sequential,
        loss: L,
        sample_input: &Array2<f32>,
        sample_target: &Array2<f32>,
        budget: impl Into<Budget>,
        algorithm: Algorithm,
        options: &Options,
    ) -> Result<Checkpointed<L>, ExecError> {
        let chain = profile(&mut net, &loss, sample_input, sample_target, &options.profile)?;
        let store_all_peak = simulate(&chain, &store_all_operations(chain.len()))?.peak_memory;
        let solution = solve(&chain, budget.into().bytes(store_all_peak)?, algorithm, &options.solve)?;
        Ok(Checkpointed {
            net,
            loss,
            input_shape: sample_input.dim(),
            target_shape: sample_target.dim(),
            chain,
            solution,
            store_all_peak,
        })
    }

    /// One training step on a batch with the schedule: forward, loss,
    /// backward. Returns the loss, the parameter gradients (zeroed first) and
    /// the measured memory trace, which has been checked equal to the
    /// simulator's prediction (an error names the first operation that differs).
    /// The parameters are not updated (see [`Sequential::sgd_step`]).
    pub fn step(&mut self, input: &Array2<f32>, target: &Array2<f32>) -> Result<StepResult, ExecError> {
        self.check_batch(input, target)?;
        run(
            &mut self.net,
            &self.loss,
            &self.chain,
            &self.solution.schedule.operations,
            &self.solution.replay,
            input,
            target,
        )
    }

    /// Like [`step`](Checkpointed::step) with another schedule for the same
    /// chain, e.g. [`store_all_operations`](super::store_all_operations) as a
    /// reference (no budget is enforced here; the memory check still is).
    pub fn run_schedule(
        &mut self,
        ops: &[Op],
        input: &Array2<f32>,
        target: &Array2<f32>,
    ) -> Result<StepResult, ExecError> {
        self.check_batch(input, target)?;
        let replay = simulate(&self.chain, ops)?;
        run(&mut self.net, &self.loss, &self.chain, ops, &replay, input, target)
    }

    fn check_batch(&self, input: &Array2<f32>, target: &Array2<f32>) -> Result<(), ExecError> {
        for (what, got, expected) in
            [("input", input.dim(), self.input_shape), ("target", target.dim(), self.target_shape)]
        {
            if got != expected {
                return Err(ExecError::Batch {
                    what,
                    got,
                    expected: format!(
                        "the network was profiled and solved for {expected:?} (memory sizes depend on the shape; \
                         make a new Checkpointed for another batch size)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The profiled chain.
    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// The schedule, checked by the simulator, and its predicted memory timeline.
    pub fn solution(&self) -> &Solution {
        &self.solution
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.solution.schedule.budget
    }

    /// The peak memory of the store-all schedule on the profiled chain: what
    /// training without recomputation needs.
    pub fn store_all_peak(&self) -> u64 {
        self.store_all_peak
    }

    /// The network.
    pub fn network(&self) -> &Sequential {
        &self.net
    }

    /// The network, e.g. to update its parameters between steps.
    pub fn network_mut(&mut self) -> &mut Sequential {
        &mut self.net
    }

    /// The loss.
    pub fn loss(&self) -> &L {
        &self.loss
    }

    /// Gives the network and the loss back.
    pub fn into_parts(self) -> (Sequential, L) {
        (self.net, self.loss)
    }
}

fn run(
    net: &mut Sequential,
    loss: &dyn Loss,
    chain: &Chain,
    ops: &[Op],
    replay: &Replay,
    input: &Array2<f32>,
    target: &Array2<f32>,
) -> Result<StepResult, ExecError> {
    let outcome = execute(net, loss, chain, ops, input, target)?;
    outcome.trace.check(replay)?;
    Ok(outcome)
}
