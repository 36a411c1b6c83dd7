//! Parameter estimation (Rotor, section 5.1): run every stage on a sample
//! batch and measure the chain's figures.

use std::time::Instant;

use ndarray::{Array2, Zip};

use super::ledger::{Kind, Ledger};
use super::{ExecError, Loss, Sequential, Tensor, check_batch};
use crate::chain::{Chain, Stage as ChainStage};

/// How to profile.
#[derive(Clone, Copy, Debug)]
pub struct ProfileOptions {
    /// Runs of each operation; times are their median (Rotor uses 3). At least 1.
    pub repeats: usize,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions { repeats: 5 }
    }
}

/// The memory figures of one stage, which must be the same on every run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sizes {
    output: u64,
    saved: u64,
    /// Workspace of the forward that does not record (F_ck, F_none).
    plain_workspace: u64,
    /// Workspace of the recording forward (F_all).
    record_workspace: u64,
    backward_workspace: u64,
}

impl Sizes {
    const NAMES: [&'static str; 5] = [
        "the output",
        "the record",
        "the workspace of the forward without recording",
        "the workspace of the recording forward",
        "the workspace of the backward",
    ];

    fn figures(&self) -> [u64; 5] {
        [self.output, self.saved, self.plain_workspace, self.record_workspace, self.backward_workspace]
    }
}

/// Times one operation, then gives its result its kind and closes the
/// ledger's measurement: `(result, milliseconds, workspace used)`.
fn measure<T>(ledger: &Ledger, run: impl FnOnce() -> T, tag: impl FnOnce(&mut T)) -> Result<(T, f64, u64), u64> {
    ledger.begin_op();
    let start = Instant::now();
    let mut result = run();
    let elapsed = start.elapsed().as_secs_f64() * 1e3;
    tag(&mut result);
    let measured = ledger.end_op(0).map_err(|leak| leak.bytes)?;
    Ok((result, elapsed, measured.used))
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n % 2 == 1 { times[n / 2] } else { (times[n / 2 - 1] + times[n / 2]) / 2.0 }
}

fn same_bits(a: &Array2<f32>, b: &Array2<f32>) -> bool {
    a.dim() == b.dim() && Zip::from(a).and(b).all(|x, y| x.to_bits() == y.to_bits())
}

/// Profiles `net` followed by `loss` on a sample batch and returns its chain
/// (times in milliseconds, sizes in bytes).
///
/// For each stage l, on the sample a^{l-1}, `repeats` times: a forward without
/// recording (F_ck), a recording forward (F_all) and its backward with a
/// delta^l of ones. The forward and backward times are the medians of the F_all
/// and B runs (as in Rotor); `output_size` and `saved_size` are the bytes of the
/// output and the record; `forward_overhead` is the larger workspace of the two
/// forwards (the model has one o_f for every forward kind) and
/// `backward_overhead` the backward's; `gradient_size` is the output's. The loss
/// (stage L+1) is measured the same way with delta^{L+1} = `[[1.0]]`.
///
/// Checks what the model relies on: the same memory figures on every run, the
/// shapes `output_shape` announces, a backward returning a gradient of its
/// input's shape, and the two forwards agreeing bit for bit. Parameter
/// gradients are zero afterwards. Memory use is that of the largest stage;
/// time is `repeats` x (2 forwards + 1 backward) per stage.
pub fn profile(
    net: &mut Sequential,
    loss: &dyn Loss,
    input: &Array2<f32>,
    target: &Array2<f32>,
    options: &ProfileOptions,
) -> Result<Chain, ExecError> {
    if options.repeats == 0 {
        return Err(ExecError::Options("profile repeats must be at least 1".into()));
    }
    let shapes = check_batch(net, loss, input.dim(), target.dim())?;
    let n = net.len() + 1;
    let ledger = Ledger::new();
    let mut x = ledger.track(input.clone());
    x.set_kind(Kind::Activation);
    let mut stages = Vec::with_capacity(n);
    for l in 1..=n {
        let name = if l == n { loss.name() } else { net.stages()[l - 1].name() };
        let contract = |message: String| ExecError::Contract { stage: l, name: name.clone(), message };
        let leak = |bytes: u64| contract(format!("{bytes} bytes it allocated outlived the operation"));
        let expected = shapes.get(l).copied().unwrap_or((1, 1)); // the loss is 1x1
        let (mut forward_times, mut backward_times) = (Vec::new(), Vec::new());
        let mut first: Option<Sizes> = None;
        let mut output: Option<Tensor> = None;
        for _ in 0..options.repeats {
            let (y, plain_workspace) = if l == n {
                (None, 0)
            } else {
                let stage = &net.stages()[l - 1];
                let (y, _, used) =
                    measure(&ledger, || stage.forward(&x, &ledger), |y| y.set_kind(Kind::Activation)).map_err(leak)?;
                (Some(y), used)
            };
            let (record, forward_time, record_workspace) = if l == n {
                measure(&ledger, || loss.forward(&x, target, &ledger), |r| r.set_kind(Kind::Saved))
            } else {
                let stage = &net.stages()[l - 1];
                measure(&ledger, || stage.forward_record(&x, &ledger), |r| r.set_kind(Kind::Saved))
            }
            .map_err(leak)?;
            if record.output().dim() != expected {
                return Err(contract(format!(
                    "its recording forward gives shape {:?}, expected {expected:?}",
                    record.output().dim()
                )));
            }
            if let Some(y) = &y
                && !same_bits(y.array(), record.output().array())
            {
                return Err(contract(
                    "its forwards with and without recording give different outputs (shape or bits), \
                     so recomputation would change the gradients"
                        .into(),
                ));
            }
            let mut dy = ledger.track(Array2::ones(expected));
            dy.set_kind(Kind::Gradient);
            let (dx, backward_time, backward_workspace) = if l == n {
                measure(&ledger, || loss.backward(&record, &x, target, &dy, &ledger), |d| d.set_kind(Kind::Gradient))
            } else {
                let stage = &mut net.stages_mut()[l - 1];
                measure(&ledger, || stage.backward(&record, &x, &dy, &ledger), |d| d.set_kind(Kind::Gradient))
            }
            .map_err(leak)?;
            if dx.dim() != x.dim() {
                return Err(contract(format!(
                    "its backward gives a gradient of shape {:?} for an input of shape {:?}",
                    dx.dim(),
                    x.dim()
                )));
            }
            let sizes = Sizes {
                output: record.output().bytes(),
                saved: record.bytes(),
                plain_workspace,
                record_workspace,
                backward_workspace,
            };
            if let Some(first) = first {
                for ((what, a), b) in Sizes::NAMES.iter().zip(first.figures()).zip(sizes.figures()) {
                    if a != b {
                        return Err(ExecError::Unstable { stage: l, name: name.clone(), what, first: a, then: b });
                    }
                }
            }
            first = Some(sizes);
            forward_times.push(forward_time);
            backward_times.push(backward_time);
            output = y;
        }
        let sizes = first.expect("at least one repeat");
        stages.push(ChainStage {
            name: Some(name),
            forward_time: median(forward_times),
            backward_time: median(backward_times),
            output_size: sizes.output,
            saved_size: sizes.saved,
            gradient_size: sizes.output,
            forward_overhead: sizes.plain_workspace.max(sizes.record_workspace),
            recording_overhead: None,
            backward_overhead: sizes.backward_workspace,
            backward_frees: 0,
            options: Vec::new(),
        });
        if let Some(mut y) = output {
            y.set_kind(Kind::Activation);
            x = y;
        }
    }
    net.zero_grad();
    let loss_stage = stages.pop().expect("the loss was profiled");
    let mut chain = Chain::new(
        format!("profiled ({} stages, input {}x{})", net.len(), input.nrows(), input.ncols()),
        input.len() as u64 * super::ELEMENT_BYTES,
        stages,
        loss_stage,
    )?;
    chain.set_metadata(serde_json::json!({
        "source": "remat::exec::profile",
        "input_shape": [input.nrows(), input.ncols()],
        "repeats": options.repeats,
        "time_unit": "ms",
        "times": "median of the recording forward and of the backward runs",
    }));
    Ok(chain)
}
