//! Executors: run a schedule on a real network (ndarray, on the CPU) and
//! check that the model holds.
//!
//! A network is a [`Sequential`] of boxed [`Stage`]s (stages 1..=L of
//! [the model](crate::model)) followed by a [`Loss`] (stage L+1). [`profile`] measures it the
//! way Rotor does (paper section 5.1) and produces a [`Chain`](crate::Chain);
//! [`execute`] interprets a schedule's operations with exactly the simulator's
//! semantics while a [`Ledger`] counts every tensor it holds; [`Checkpointed`]
//! ties the three together: profile once, solve once, then train step by step.
//!
//! # What is counted, and how it maps to the model
//! - a^l (plain activation): the output tensor of a forward that did not record.
//! - abar^l: a stage's [`Record`]: every tensor its recording forward keeps,
//!   its output a^l included.
//! - delta^l: the gradient tensor with the shape of a^l; delta^{L+1} is the
//!   1x1 tensor `[[1.0]]` held from the start.
//! - Transient workspace: every tensor an operation makes that is not one of
//!   its results. Its size is measured by the ledger (the peak of live bytes
//!   minus what is stored when the operation ends), never declared.
//!
//! [the model](crate::model) has one forward overhead o_f per stage for `F_all`, `F_ck` and
//! `F_none`, but a stage with internal intermediates uses more workspace in a
//! forward that does not record (its intermediates are temporaries there) than
//! in one that does (they are results there). The profile therefore takes o_f
//! as the larger of the two, and the executor reserves each operation's
//! profiled overhead as its workspace, like a static memory planner: the
//! accounted figure of an operation is stored + created + max(reservation,
//! workspace really used). It equals the simulator's prediction exactly as long
//! as no operation outgrows its reservation, and [`Trace::check`] catches one
//! that does. The instantaneous live bytes ([`MeasuredStep::live_peak`]) never
//! exceed the accounted figure.
//!
//! Parameters, their gradients and the loss target are held outside the ledger:
//! the budget of [the model](crate::model) leaves them out.
//!
//! Numerical reproducibility: every stage computes the same operations in the
//! same order whether it records or not, and backwards always run B^{L+1} ...
//! B^1, so any valid schedule gives gradients bit for bit equal to store-all's
//! (the profile checks the first half of that for every stage).

mod checkpointed;
mod execute;
pub mod layers;
mod ledger;
mod profile;

pub use checkpointed::{Budget, Checkpointed, Options};
pub use execute::{MeasuredStep, StepResult, Trace, execute, store_all_operations};
pub use ledger::{ELEMENT_BYTES, Kind, Ledger, OpMemory, Tensor};
pub use profile::{ProfileOptions, profile};

use ndarray::Array2;
use thiserror::Error;

use crate::chain::ChainError;
use crate::schedule::Op;
use crate::simulate::SimulateError;
use crate::solve::SolveError;

/// A batch shape: `(rows, features)`.
pub type Shape = (usize, usize);

/// A trainable array and its accumulated gradient (same shape). Held outside
/// the memory budget.
#[derive(Clone, Debug)]
pub struct Param {
    /// The values.
    pub value: Array2<f32>,
    /// dLoss/dvalue, accumulated by backwards until zeroed.
    pub grad: Array2<f32>,
}

impl Param {
    /// A parameter with these values and a zero gradient.
    pub fn new(value: Array2<f32>) -> Param {
        let grad = Array2::zeros(value.raw_dim());
        Param { value, grad }
    }
}

/// Everything a recording forward keeps for its backward: abar^l.
///
/// A leaf stage keeps its output and a list of extra tensors; a composite
/// stage keeps the records of its parts, and either its own output or (by
/// default) the last part's output as its output.
#[derive(Debug)]
pub struct Record {
    output: Option<Tensor>,
    saved: Vec<Tensor>,
    parts: Vec<Record>,
}

impl Record {
    /// The record of a leaf stage: its output and the extra tensors its
    /// backward needs, in an order the stage chooses.
    pub fn leaf(output: Tensor, saved: Vec<Tensor>) -> Record {
        Record { output: Some(output), saved, parts: Vec::new() }
    }

    /// The record of a composite whose output is the last part's output.
    /// `parts` must not be empty.
    pub fn composite(parts: Vec<Record>) -> Record {
        assert!(!parts.is_empty(), "a composite record needs at least one part");
        Record { output: None, saved: Vec::new(), parts }
    }

    /// The record of a composite with an output of its own (e.g. a residual
    /// sum computed after its parts).
    pub fn composite_with_output(parts: Vec<Record>, output: Tensor) -> Record {
        Record { output: Some(output), saved: Vec::new(), parts }
    }

    /// The output a^l contained in the record.
    pub fn output(&self) -> &Tensor {
        match &self.output {
            Some(output) => output,
            None => self.parts.last().expect("a composite record has parts").output(),
        }
    }

    /// The extra tensors of a leaf record.
    pub fn saved(&self) -> &[Tensor] {
        &self.saved
    }

    /// The records of a composite's parts.
    pub fn parts(&self) -> &[Record] {
        &self.parts
    }

    /// Takes the parts out (to rebuild them into an enclosing record).
    pub fn into_parts(self) -> Vec<Record> {
        self.parts
    }

    /// Bytes of every tensor in the record: w_abar.
    pub fn bytes(&self) -> u64 {
        self.output.iter().chain(&self.saved).map(Tensor::bytes).sum::<u64>()
            + self.parts.iter().map(Record::bytes).sum::<u64>()
    }

    /// Counts every tensor of the record as `kind`.
    pub fn set_kind(&mut self, kind: Kind) {
        for tensor in self.output.iter_mut().chain(&mut self.saved) {
            tensor.set_kind(kind);
        }
        for part in &mut self.parts {
            part.set_kind(kind);
        }
    }
}

/// A batch shape a stage cannot take.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct ShapeError(pub String);

/// One stage of a sequential network: a layer or a block of layers taking a
/// `(batch, features)` matrix to another.
///
/// Every tensor a stage makes must come from the [`Ledger`] it is given (that
/// is how its workspace is measured), and its memory use must depend on shapes
/// only, never on values (the profile assumes it and checks it on its sample).
/// [`forward`](Stage::forward) and [`forward_record`](Stage::forward_record)
/// must compute their output with the same operations in the same order, so
/// that recomputation reproduces it bit for bit.
pub trait Stage: Send {
    /// A short name for chain files and messages (`linear 64->256`).
    fn name(&self) -> String;

    /// The output shape for an input of shape `input`, or why the stage
    /// cannot take it. Lets a network be checked before anything runs.
    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError>;

    /// Forward without recording (F_ck, F_none): returns a^l only.
    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor;

    /// Forward that may reuse the input's storage because the caller gives it
    /// up (used inside composite stages). Must return the same values as
    /// [`forward`](Stage::forward).
    fn forward_owned(&self, input: Tensor, ledger: &Ledger) -> Tensor {
        self.forward(&input, ledger)
    }

    /// Forward recording everything the backward needs (F_all): abar^l.
    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record;

    /// Backward: from the record, the input a^{l-1} and delta^l, returns
    /// delta^{l-1} and adds the parameter gradients to [`Param::grad`]. It
    /// must not keep any tensor it makes, other than the one it returns.
    fn backward(&mut self, record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor;

    /// The stage's parameters (none by default).
    fn params(&self) -> Vec<&Param> {
        Vec::new()
    }

    /// The stage's parameters, for updating them.
    fn params_mut(&mut self) -> Vec<&mut Param> {
        Vec::new()
    }
}

/// The loss: stage L+1 of the chain. It compares the network's output with a
/// target (held by the caller, outside the budget) and gives a scalar.
pub trait Loss: Send {
    /// A short name.
    fn name(&self) -> String;

    /// Why `target` cannot be compared with a prediction of shape `prediction`.
    fn check_target(&self, prediction: Shape, target: Shape) -> Result<(), ShapeError>;

    /// Forward (always recording: the loss's backward follows it): a record
    /// whose output is the 1x1 loss value.
    fn forward(&self, prediction: &Tensor, target: &Array2<f32>, ledger: &Ledger) -> Record;

    /// Backward: delta^L from the record, the prediction a^L, the target and
    /// the 1x1 delta^{L+1}.
    fn backward(
        &self,
        record: &Record,
        prediction: &Tensor,
        target: &Array2<f32>,
        grad_loss: &Tensor,
        ledger: &Ledger,
    ) -> Tensor;
}

/// A chain of boxed stages, run in order. It is itself a [`Stage`], so a
/// block of layers can be one stage of a larger chain.
#[derive(Default)]
pub struct Sequential {
    stages: Vec<Box<dyn Stage>>,
}

impl Sequential {
    /// An empty network.
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends a stage (builder style).
    pub fn with(mut self, stage: impl Stage + 'static) -> Sequential {
        self.stages.push(Box::new(stage));
        self
    }

    /// Appends a boxed stage.
    pub fn push(&mut self, stage: Box<dyn Stage>) {
        self.stages.push(stage);
    }

    /// Number of stages L.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// True if there is no stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The stages, in order (stage l is at index l-1).
    pub fn stages(&self) -> &[Box<dyn Stage>] {
        &self.stages
    }

    /// The stages, for running backwards and updating parameters.
    pub fn stages_mut(&mut self) -> &mut [Box<dyn Stage>] {
        &mut self.stages
    }

    /// The shape of every activation a^0..a^L for an input of shape `input`,
    /// or the first stage that cannot take its input, named.
    pub fn shapes(&self, input: Shape) -> Result<Vec<Shape>, ExecError> {
        if self.stages.is_empty() {
            return Err(ExecError::EmptyNetwork);
        }
        let mut shapes = vec![input];
        for (i, stage) in self.stages.iter().enumerate() {
            let next = stage.output_shape(*shapes.last().expect("starts non-empty")).map_err(|e| ExecError::Shape {
                stage: i + 1,
                name: stage.name(),
                message: e.0,
            })?;
            shapes.push(next);
        }
        Ok(shapes)
    }

    /// Sets every parameter gradient to zero.
    pub fn zero_grad(&mut self) {
        for param in self.params_mut() {
            param.grad.fill(0.0);
        }
    }

    /// Copies of every parameter gradient, in parameter order.
    pub fn gradients(&self) -> Vec<Array2<f32>> {
        self.params().into_iter().map(|p| p.grad.clone()).collect()
    }

    /// Plain gradient descent: value -= rate * grad for every parameter.
    pub fn sgd_step(&mut self, rate: f32) {
        for param in self.params_mut() {
            param.value.scaled_add(-rate, &param.grad);
        }
    }
}

impl Stage for Sequential {
    fn name(&self) -> String {
        let names: Vec<String> = self.stages.iter().map(|s| s.name()).collect();
        format!("[{}]", names.join(", "))
    }

    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        let shapes = self.shapes(input).map_err(|e| ShapeError(e.to_string()))?;
        Ok(*shapes.last().expect("one shape per stage and the input"))
    }

    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
        let (first, rest) = self.stages.split_first().expect("checked non-empty by output_shape");
        let mut h = first.forward(input, ledger);
        for stage in rest {
            h = stage.forward_owned(h, ledger);
        }
        h
    }

    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        let mut parts: Vec<Record> = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            let record = stage.forward_record(parts.last().map_or(input, Record::output), ledger);
            parts.push(record);
        }
        Record::composite(parts)
    }

    fn backward(&mut self, record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor {
        let parts = record.parts();
        let mut grad: Option<Tensor> = None;
        for i in (0..self.stages.len()).rev() {
            let stage_input = if i == 0 { input } else { parts[i - 1].output() };
            let g = self.stages[i].backward(&parts[i], stage_input, grad.as_ref().unwrap_or(grad_output), ledger);
            grad = Some(g);
        }
        grad.expect("checked non-empty by output_shape")
    }

    fn params(&self) -> Vec<&Param> {
        self.stages.iter().flat_map(|s| s.params()).collect()
    }

    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.stages.iter_mut().flat_map(|s| s.params_mut()).collect()
    }
}

/// The shapes of a^0..a^L for a batch, after checking that every stage takes
/// its input and that the loss takes the target.
fn check_batch(net: &Sequential, loss: &dyn Loss, input: Shape, target: Shape) -> Result<Vec<Shape>, ExecError> {
    let shapes = net.shapes(input)?;
    let prediction = *shapes.last().expect("one shape per stage and the input");
    loss.check_target(prediction, target).map_err(|e| ExecError::Batch {
        what: "target",
        got: target,
        expected: e.0,
    })?;
    Ok(shapes)
}

/// Why a network could not be profiled, solved or run.
#[derive(Debug, Error)]
pub enum ExecError {
    /// Bad options.
    #[error("{0}")]
    Options(String),
    /// The network has no stage.
    #[error("the network has no stage: a chain needs at least one")]
    EmptyNetwork,
    /// A stage cannot take the shape it is given.
    #[error("stage {stage} ({name}): {message}")]
    Shape {
        /// The stage, 1-based.
        stage: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A batch (input or target) of the wrong shape.
    #[error("the {what} has shape {got:?}, but {expected}")]
    Batch {
        /// `input` or `target`.
        what: &'static str,
        /// Its shape.
        got: Shape,
        /// What was expected, in words.
        expected: String,
    },
    /// A stage's memory use differs between two runs of the same operation on
    /// the same shapes: the model cannot describe it.
    #[error(
        "profiling stage {stage} ({name}): {what} was {first} bytes, then {then} bytes on the same input; \
         remat needs memory use that depends on shapes only"
    )]
    Unstable {
        /// The stage, 1-based (L+1 is the loss).
        stage: usize,
        /// Its name.
        name: String,
        /// The figure that changed.
        what: &'static str,
        /// First value.
        first: u64,
        /// A later value.
        then: u64,
    },
    /// A stage that breaks a rule of the [`Stage`] contract.
    #[error("stage {stage} ({name}): {message}")]
    Contract {
        /// The stage, 1-based (L+1 is the loss).
        stage: usize,
        /// Its name.
        name: String,
        /// The rule broken.
        message: String,
    },
    /// The chain does not describe this network.
    #[error("the chain does not match the network: {0}")]
    ChainMismatch(String),
    /// The schedule is not valid for the chain.
    #[error("invalid schedule: {0}")]
    Schedule(#[from] SimulateError),
    /// The measured memory of an operation differs from the simulator's.
    #[error(
        "operation {} ({op}): the executor accounted {measured} bytes but the simulator predicts {predicted} bytes \
         ({what})",
        index + 1
    )]
    Mismatch {
        /// 0-based index of the operation.
        index: usize,
        /// The operation.
        op: Op,
        /// When (`while it runs` or `after it`), with the figures by kind.
        what: String,
        /// The executor's figure.
        measured: u64,
        /// The simulator's figure.
        predicted: u64,
    },
    /// The profiled chain was rejected (should not happen: sizes are measured).
    #[error("the profiled chain is invalid: {0}")]
    Chain(#[from] ChainError),
    /// No schedule (infeasible budget, too large...).
    #[error(transparent)]
    Solve(#[from] SolveError),
}
