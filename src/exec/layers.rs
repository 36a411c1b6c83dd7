//! Stages implemented with ndarray: [`Linear`], [`Relu`], [`Tanh`], [`Gelu`],
//! [`LayerNorm`], the composite [`Residual`] block, and the
//! [`MeanSquaredError`] loss.
//!
//! Each allocates exactly the tensors named in its doc comment, all through
//! the ledger (parameter-gradient updates accumulate in place, with no
//! temporary). Matrix products go through ndarray's `dot`/`general_mat_mul`;
//! the packing buffers matrixmultiply uses internally (bounded by its block
//! sizes, not by the batch) are not tensors and are not counted.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, Zip};

use super::{Ledger, Loss, Param, Record, Sequential, Shape, ShapeError, Stage, Tensor};
use crate::synthetic::Rng;

/// Uniform in `[-bound, bound]` from 24 random bits.
fn uniform(rng: &mut Rng, bound: f32) -> f32 {
    let unit = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
    (2.0 * unit - 1.0) * bound
}

fn same_shape(input: Shape) -> Result<Shape, ShapeError> {
    Ok(input)
}

/// `y = x W + b`, W of shape `(inputs, outputs)`, b of shape `(1, outputs)`.
///
/// Forward: allocates y. Record: y only (the backward needs x, which is
/// a^{l-1}, and W). Backward: allocates dx.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Param,
    bias: Param,
}

impl Linear {
    /// A layer with weights and bias drawn uniformly in +-1/sqrt(inputs)
    /// (PyTorch's default), deterministically from `rng`.
    pub fn new(inputs: usize, outputs: usize, rng: &mut Rng) -> Linear {
        let bound = 1.0 / (inputs.max(1) as f32).sqrt();
        let weight = Array2::from_shape_simple_fn((inputs, outputs), || uniform(rng, bound));
        let bias = Array2::from_shape_simple_fn((1, outputs), || uniform(rng, bound));
        Linear { weight: Param::new(weight), bias: Param::new(bias) }
    }

    /// `(inputs, outputs)`.
    pub fn dims(&self) -> (usize, usize) {
        self.weight.value.dim()
    }
}

impl Stage for Linear {
    fn name(&self) -> String {
        let (i, o) = self.dims();
        format!("linear {i}->{o}")
    }

    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        let (i, o) = self.dims();
        if input.1 != i {
            return Err(ShapeError(format!("expects {i} input features, got {}", input.1)));
        }
        Ok((input.0, o))
    }

    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
        let mut y = ledger.track(input.array().dot(&self.weight.value));
        y.view_mut().zip_mut_with(&self.bias.value, |v, &b| *v += b);
        y
    }

    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        Record::leaf(self.forward(input, ledger), Vec::new())
    }

    fn backward(&mut self, _record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor {
        let dy = grad_output.array();
        general_mat_mul(1.0, &input.array().t(), dy, 1.0, &mut self.weight.grad);
        for row in dy.rows() {
            self.bias.grad.row_mut(0).zip_mut_with(&row, |g, &d| *g += d);
        }
        ledger.track(dy.dot(&self.weight.value.t()))
    }

    fn params(&self) -> Vec<&Param> {
        vec![&self.weight, &self.bias]
    }

    fn params_mut(&mut self) -> Vec<&mut Param> {
        vec![&mut self.weight, &mut self.bias]
    }
}

/// An elementwise activation: `y = f(x)`, with `f'` computed from x or y.
trait Elementwise: Send {
    const NAME: &'static str;
    fn apply(x: f32) -> f32;
    /// The derivative at this point, given the input and the output.
    fn derivative(x: f32, y: f32) -> f32;
}

/// Stage for an [`Elementwise`] function. Forward: allocates y (or reuses the
/// input in [`Stage::forward_owned`]). Record: y only. Backward: allocates dx.
macro_rules! elementwise_stage {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl Stage for $name {
            fn name(&self) -> String {
                <$name as Elementwise>::NAME.to_string()
            }

            fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
                same_shape(input)
            }

            fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
                ledger.track(input.array().mapv(<$name as Elementwise>::apply))
            }

            fn forward_owned(&self, mut input: Tensor, _ledger: &Ledger) -> Tensor {
                input.view_mut().mapv_inplace(<$name as Elementwise>::apply);
                input
            }

            fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
                Record::leaf(self.forward(input, ledger), Vec::new())
            }

            fn backward(&mut self, record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor {
                let mut dx = ledger.track(grad_output.array().clone());
                Zip::from(dx.view_mut()).and(input.array()).and(record.output().array()).for_each(|d, &x, &y| {
                    *d *= <$name as Elementwise>::derivative(x, y)
                });
                dx
            }
        }
    };
}

elementwise_stage!(
    /// `max(x, 0)`.
    Relu
);
elementwise_stage!(
    /// `tanh(x)`.
    Tanh
);
elementwise_stage!(
    /// GELU, tanh approximation: `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu
);

impl Elementwise for Relu {
    const NAME: &'static str = "relu";
    fn apply(x: f32) -> f32 {
        x.max(0.0)
    }
    fn derivative(_x: f32, y: f32) -> f32 {
        if y > 0.0 { 1.0 } else { 0.0 }
    }
}

impl Elementwise for Tanh {
    const NAME: &'static str = "tanh";
    fn apply(x: f32) -> f32 {
        x.tanh()
    }
    fn derivative(_x: f32, y: f32) -> f32 {
        1.0 - y * y
    }
}

const GELU_C: f32 = 0.797_884_6; // sqrt(2/pi)
const GELU_A: f32 = 0.044_715;

impl Elementwise for Gelu {
    const NAME: &'static str = "gelu";
    fn apply(x: f32) -> f32 {
        0.5 * x * (1.0 + (GELU_C * (x + GELU_A * x * x * x)).tanh())
    }
    fn derivative(x: f32, _y: f32) -> f32 {
        let t = (GELU_C * (x + GELU_A * x * x * x)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * x * x)
    }
}

/// Layer normalization over the features of each row, with a learned scale
/// (gamma, initially 1) and shift (beta, initially 0); epsilon 1e-5.
///
/// Works row by row with scalar temporaries. Forward: allocates y. Record: y
/// plus each row's mean and reciprocal standard deviation (two `(rows, 1)`
/// tensors), so `saved_size` exceeds `output_size`. Backward: allocates dx.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    gamma: Param,
    beta: Param,
}

const LAYER_NORM_EPS: f32 = 1e-5;

impl LayerNorm {
    /// Normalization over `features` features.
    pub fn new(features: usize) -> LayerNorm {
        LayerNorm { gamma: Param::new(Array2::ones((1, features))), beta: Param::new(Array2::zeros((1, features))) }
    }

    fn features(&self) -> usize {
        self.gamma.value.ncols()
    }

    /// The forward, writing each row's statistics into `stats` if given.
    fn run(&self, input: &Tensor, ledger: &Ledger, mut stats: Option<(&mut Tensor, &mut Tensor)>) -> Tensor {
        let x = input.array();
        let n = self.features() as f32;
        let mut y = ledger.zeros(x.nrows(), x.ncols());
        let gamma = self.gamma.value.row(0);
        let beta = self.beta.value.row(0);
        for (i, (x_row, mut y_row)) in x.rows().into_iter().zip(y.view_mut().rows_mut()).enumerate() {
            let mean = x_row.sum() / n;
            let var = x_row.fold(0.0, |acc, &v| acc + (v - mean) * (v - mean)) / n;
            let rstd = 1.0 / (var + LAYER_NORM_EPS).sqrt();
            Zip::from(&mut y_row).and(&x_row).and(&gamma).and(&beta).for_each(|y, &x, &g, &b| {
                *y = (x - mean) * rstd * g + b;
            });
            if let Some((means, rstds)) = stats.as_mut() {
                means.view_mut()[[i, 0]] = mean;
                rstds.view_mut()[[i, 0]] = rstd;
            }
        }
        y
    }
}

impl Stage for LayerNorm {
    fn name(&self) -> String {
        format!("layernorm {}", self.features())
    }

    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        if input.1 != self.features() {
            return Err(ShapeError(format!("normalizes {} features, got {}", self.features(), input.1)));
        }
        Ok(input)
    }

    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
        self.run(input, ledger, None)
    }

    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        let rows = input.dim().0;
        let mut means = ledger.zeros(rows, 1);
        let mut rstds = ledger.zeros(rows, 1);
        let y = self.run(input, ledger, Some((&mut means, &mut rstds)));
        Record::leaf(y, vec![means, rstds])
    }

    fn backward(&mut self, record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor {
        let (x, dy) = (input.array(), grad_output.array());
        let [means, rstds] = record.saved() else { panic!("a layernorm record holds its means and rstds") };
        let n = self.features() as f32;
        let mut dx = ledger.zeros(x.nrows(), x.ncols());
        let gamma = self.gamma.value.row(0);
        let mut dgamma = self.gamma.grad.row_mut(0);
        let mut dbeta = self.beta.grad.row_mut(0);
        for (i, ((x_row, dy_row), mut dx_row)) in
            x.rows().into_iter().zip(dy.rows()).zip(dx.view_mut().rows_mut()).enumerate()
        {
            let (mean, rstd) = (means.array()[[i, 0]], rstds.array()[[i, 0]]);
            // dxhat = dy * gamma; dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
            let (mut sum, mut dot) = (0.0f32, 0.0f32);
            Zip::from(&x_row).and(&dy_row).and(&gamma).for_each(|&x, &d, &g| {
                let xhat = (x - mean) * rstd;
                sum += d * g;
                dot += d * g * xhat;
            });
            Zip::from(&mut dx_row).and(&x_row).and(&dy_row).and(&gamma).for_each(|dx, &x, &d, &g| {
                let xhat = (x - mean) * rstd;
                *dx = rstd * (d * g - sum / n - xhat * dot / n);
            });
            Zip::from(&mut dgamma).and(&mut dbeta).and(&x_row).and(&dy_row).for_each(|dg, db, &x, &d| {
                *dg += d * (x - mean) * rstd;
                *db += d;
            });
        }
        dx
    }

    fn params(&self) -> Vec<&Param> {
        vec![&self.gamma, &self.beta]
    }

    fn params_mut(&mut self) -> Vec<&mut Param> {
        vec![&mut self.gamma, &mut self.beta]
    }
}

/// A residual block `y = x + f(x)` around a [`Sequential`] `f` whose output
/// has the input's shape: a composite stage with internal intermediates.
///
/// Forward without recording: f's stages run one after the other, each
/// intermediate freed (or overwritten in place) as soon as the next exists,
/// and the sum is taken in place. Record: the records of f's stages (their
/// outputs included) plus y. Backward: f's backward, then dx = df + dy in place.
pub struct Residual {
    inner: Sequential,
}

impl Residual {
    /// The block `x + inner(x)`.
    pub fn new(inner: Sequential) -> Residual {
        Residual { inner }
    }

    /// The pre-norm MLP block of transformers: `x + W2 gelu(W1 layernorm(x))`,
    /// hidden width `hidden`.
    pub fn mlp(features: usize, hidden: usize, rng: &mut Rng) -> Residual {
        Residual::new(
            Sequential::new()
                .with(LayerNorm::new(features))
                .with(Linear::new(features, hidden, rng))
                .with(Gelu)
                .with(Linear::new(hidden, features, rng)),
        )
    }
}

impl Stage for Residual {
    fn name(&self) -> String {
        format!("residual {}", self.inner.name())
    }

    fn output_shape(&self, input: Shape) -> Result<Shape, ShapeError> {
        let output = self.inner.output_shape(input)?;
        if output != input {
            return Err(ShapeError(format!(
                "the residual branch maps {input:?} to {output:?}; it must keep the shape"
            )));
        }
        Ok(output)
    }

    fn forward(&self, input: &Tensor, ledger: &Ledger) -> Tensor {
        let mut y = self.inner.forward(input, ledger);
        y.view_mut().zip_mut_with(input.array(), |y, &x| *y += x);
        y
    }

    fn forward_record(&self, input: &Tensor, ledger: &Ledger) -> Record {
        let inner = self.inner.forward_record(input, ledger);
        let mut y = inner.output().copy();
        y.view_mut().zip_mut_with(input.array(), |y, &x| *y += x);
        Record::composite_with_output(inner.into_parts(), y)
    }

    fn backward(&mut self, record: &Record, input: &Tensor, grad_output: &Tensor, ledger: &Ledger) -> Tensor {
        // The inner backward reads only the parts, which are the inner record's.
        let mut dx = self.inner.backward(record, input, grad_output, ledger);
        dx.view_mut().zip_mut_with(grad_output.array(), |d, &g| *d += g);
        dx
    }

    fn params(&self) -> Vec<&Param> {
        self.inner.params()
    }

    fn params_mut(&mut self) -> Vec<&mut Param> {
        self.inner.params_mut()
    }
}

/// Mean squared error over every element: `sum((y - t)^2) / n`.
///
/// Forward: allocates the 1x1 loss (its whole record: `saved_size` 4 bytes).
/// Backward: allocates delta^L = 2 (y - t) / n * delta^{L+1}.
#[derive(Clone, Copy, Debug, Default)]
pub struct MeanSquaredError;

impl Loss for MeanSquaredError {
    fn name(&self) -> String {
        "mse".to_string()
    }

    fn check_target(&self, prediction: Shape, target: Shape) -> Result<(), ShapeError> {
        if prediction != target {
            return Err(ShapeError(format!("the network's output has shape {prediction:?}")));
        }
        Ok(())
    }

    fn forward(&self, prediction: &Tensor, target: &Array2<f32>, ledger: &Ledger) -> Record {
        let y = prediction.array();
        let mut sum = 0.0f32;
        Zip::from(y).and(target).for_each(|&y, &t| sum += (y - t) * (y - t));
        let mut loss = ledger.zeros(1, 1);
        loss.view_mut()[[0, 0]] = sum / y.len().max(1) as f32;
        Record::leaf(loss, Vec::new())
    }

    fn backward(
        &self,
        _record: &Record,
        prediction: &Tensor,
        target: &Array2<f32>,
        grad_loss: &Tensor,
        ledger: &Ledger,
    ) -> Tensor {
        let y = prediction.array();
        let scale = 2.0 / y.len().max(1) as f32 * grad_loss.array()[[0, 0]];
        let mut dy = ledger.track(y.clone());
        dy.view_mut().zip_mut_with(target, |d, &t| *d = (*d - t) * scale);
        dy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Axis;

    fn column_sums(a: &Array2<f32>) -> Array2<f32> {
        a.sum_axis(Axis(0)).insert_axis(Axis(0))
    }

    /// Gradient of `loss(net(x), t)` with respect to every parameter and the
    /// input, by store-all backpropagation.
    fn backprop(stage: &mut dyn Stage, x: &Array2<f32>, t: &Array2<f32>) -> (f32, Vec<Array2<f32>>, Array2<f32>) {
        let ledger = Ledger::new();
        let input = ledger.track(x.clone());
        let record = stage.forward_record(&input, &ledger);
        let loss_record = MeanSquaredError.forward(record.output(), t, &ledger);
        let one = ledger.track(Array2::ones((1, 1)));
        let dy = MeanSquaredError.backward(&loss_record, record.output(), t, &one, &ledger);
        for p in stage.params_mut() {
            p.grad.fill(0.0);
        }
        let dx = stage.backward(&record, &input, &dy, &ledger);
        let grads = stage.params().iter().map(|p| p.grad.clone()).collect();
        (loss_record.output().array()[[0, 0]], grads, dx.array().clone())
    }

    fn loss_at(stage: &dyn Stage, x: &Array2<f32>, t: &Array2<f32>) -> f64 {
        let ledger = Ledger::new();
        let y = stage.forward(&ledger.track(x.clone()), &ledger);
        y.array().iter().zip(t).map(|(&y, &t)| ((y - t) as f64).powi(2)).sum::<f64>() / t.len() as f64
    }

    /// Compares backprop with central differences on every parameter and input
    /// entry (f32, so a loose relative tolerance).
    fn check_gradients(mut stage: Box<dyn Stage>, rows: usize, cols: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let x = Array2::from_shape_simple_fn((rows, cols), || uniform(&mut rng, 1.5));
        let out = stage.output_shape((rows, cols)).unwrap();
        let t = Array2::from_shape_simple_fn(out, || uniform(&mut rng, 1.0));
        let (_, grads, dx) = backprop(stage.as_mut(), &x, &t);
        let eps = 1e-2f32;
        let name = stage.name();
        let close = |numeric: f64, analytic: f32, what: &str| {
            let tol = 2e-2 * numeric.abs().max(analytic.abs() as f64).max(1e-2);
            assert!(
                (numeric - analytic as f64).abs() <= tol,
                "{}: {what}: numeric {numeric} analytic {analytic}",
                name
            );
        };
        for ((i, j), &g) in dx.indexed_iter() {
            let (mut plus, mut minus) = (x.clone(), x.clone());
            plus[[i, j]] += eps;
            minus[[i, j]] -= eps;
            let numeric =
                (loss_at(stage.as_ref(), &plus, &t) - loss_at(stage.as_ref(), &minus, &t)) / (2.0 * eps as f64);
            close(numeric, g, &format!("input [{i}, {j}]"));
        }
        for (p, grad) in grads.iter().enumerate() {
            for ((i, j), &g) in grad.indexed_iter() {
                let original = stage.params()[p].value[[i, j]];
                stage.params_mut()[p].value[[i, j]] = original + eps;
                let plus = loss_at(stage.as_ref(), &x, &t);
                stage.params_mut()[p].value[[i, j]] = original - eps;
                let minus = loss_at(stage.as_ref(), &x, &t);
                stage.params_mut()[p].value[[i, j]] = original;
                close((plus - minus) / (2.0 * eps as f64), g, &format!("parameter {p} [{i}, {j}]"));
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = Rng::new(7);
        check_gradients(Box::new(Linear::new(4, 3, &mut rng)), 3, 4, 1);
        check_gradients(Box::new(Relu), 3, 4, 2);
        check_gradients(Box::new(Tanh), 3, 4, 3);
        check_gradients(Box::new(Gelu), 3, 4, 4);
        let mut norm = LayerNorm::new(5);
        // Non-trivial scale and shift, so their gradients matter.
        norm.gamma.value = Array2::from_shape_simple_fn((1, 5), || 1.0 + uniform(&mut rng, 0.5));
        norm.beta.value = Array2::from_shape_simple_fn((1, 5), || uniform(&mut rng, 0.5));
        check_gradients(Box::new(norm), 3, 5, 5);
        check_gradients(Box::new(Residual::mlp(4, 6, &mut rng)), 2, 4, 6);
        check_gradients(
            Box::new(Sequential::new().with(Linear::new(3, 5, &mut rng)).with(Tanh).with(Linear::new(5, 2, &mut rng))),
            4,
            3,
            7,
        );
    }

    #[test]
    fn linear_gradients_by_hand() {
        let mut rng = Rng::new(1);
        let mut layer = Linear::new(2, 2, &mut rng);
        let x = Array2::from_shape_vec((2, 2), vec![1.0, 2.0, 3.0, 4.0]).unwrap();
        let ledger = Ledger::new();
        let input = ledger.track(x.clone());
        let record = layer.forward_record(&input, &ledger);
        let dy = ledger.track(Array2::from_shape_vec((2, 2), vec![1.0, 0.0, 0.5, -1.0]).unwrap());
        let dx = layer.backward(&record, &input, &dy, &ledger);
        assert_eq!(layer.weight.grad, x.t().dot(dy.array()));
        assert_eq!(layer.bias.grad, column_sums(dy.array()));
        assert_eq!(dx.array(), &dy.array().dot(&layer.weight.value.t()));
    }

    #[test]
    fn forward_owned_and_forward_agree_bit_for_bit() {
        let ledger = Ledger::new();
        let mut rng = Rng::new(3);
        let x = Array2::from_shape_simple_fn((3, 4), || uniform(&mut rng, 3.0));
        for stage in [Box::new(Relu) as Box<dyn Stage>, Box::new(Tanh), Box::new(Gelu)] {
            let a = stage.forward(&ledger.track(x.clone()), &ledger);
            let b = stage.forward_owned(ledger.track(x.clone()), &ledger);
            assert_eq!(a.array(), b.array(), "{}", stage.name());
        }
    }

    #[test]
    fn shape_errors_name_the_problem() {
        let mut rng = Rng::new(1);
        let net = Sequential::new().with(Linear::new(4, 8, &mut rng)).with(Linear::new(5, 2, &mut rng));
        let e = net.shapes((2, 4)).unwrap_err().to_string();
        assert_eq!(e, "stage 2 (linear 5->2): expects 5 input features, got 8");
        let e = LayerNorm::new(3).output_shape((2, 4)).unwrap_err().to_string();
        assert_eq!(e, "normalizes 3 features, got 4");
        let block = Residual::new(Sequential::new().with(Linear::new(4, 3, &mut rng)));
        assert!(block.output_shape((2, 4)).unwrap_err().0.contains("must keep the shape"));
        assert!(Sequential::new().shapes((1, 1)).unwrap_err().to_string().contains("no stage"));
    }
}
