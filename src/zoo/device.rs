//! Element types and devices: what a zoo network's tensors weigh and how long
//! its kernels take on a roofline model of a GPU.

use serde_json::json;

/// The type of the activations (and of the compute) of a network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// 32-bit floats everywhere.
    Fp32,
    /// bfloat16 activations and tensor-core math (autocast-style mixed precision).
    Bf16,
}

impl Dtype {
    /// Every dtype, in the order `--help` lists them.
    pub const ALL: &'static [Dtype] = &[Dtype::Fp32, Dtype::Bf16];

    /// Bytes of one element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Bf16 => 2,
        }
    }

    /// The name used on the command line and in metadata.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
        }
    }
}

named!(Dtype, "dtype");
named!(Device, "device");

/// Which hardware unit a kernel runs on, for the roofline's compute ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Convolutions (cuDNN: TF32 tensor cores for fp32 on Ampere and later, as
    /// PyTorch's default `torch.backends.cudnn.allow_tf32 = True`).
    Conv,
    /// Matrix products (cuBLAS: plain FP32 for fp32, as PyTorch's default
    /// `torch.backends.cuda.matmul.allow_tf32 = False`; tensor cores for bf16).
    Matmul,
    /// Elementwise, reductions, normalization, pooling: CUDA cores (in practice
    /// these are bound by bandwidth).
    Vector,
}

/// One kernel's work: floating-point operations and bytes moved to and from
/// device memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Kernel {
    /// The unit whose peak bounds the compute.
    pub unit: Unit,
    /// Floating-point operations (a multiply-add counts 2).
    pub flops: f64,
    /// Bytes read plus bytes written.
    pub bytes: f64,
}

/// A GPU's datasheet figures (dense, no sparsity), the only inputs of the roofline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// NVIDIA V100 SXM2.
    V100,
    /// NVIDIA A100 SXM4 80 GB.
    A100,
    /// NVIDIA H100 SXM5.
    H100,
}

impl Device {
    /// Every device, in the order `--help` lists them.
    pub const ALL: &'static [Device] = &[Device::V100, Device::A100, Device::H100];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Device::V100 => "v100",
            Device::A100 => "a100",
            Device::H100 => "h100",
        }
    }

    /// The exact model the figures are for.
    pub fn model(self) -> &'static str {
        match self {
            Device::V100 => "NVIDIA V100 SXM2",
            Device::A100 => "NVIDIA A100 SXM4 80GB",
            Device::H100 => "NVIDIA H100 SXM5",
        }
    }

    /// Peak FP32 on CUDA cores, TFLOP/s.
    pub fn fp32_tflops(self) -> f64 {
        match self {
            Device::V100 => 15.7,
            Device::A100 => 19.5,
            Device::H100 => 66.9,
        }
    }

    /// Peak TF32 tensor-core throughput, TFLOP/s (`None`: no TF32 on the device).
    pub fn tf32_tflops(self) -> Option<f64> {
        match self {
            Device::V100 => None,
            Device::A100 => Some(156.0),
            Device::H100 => Some(494.7),
        }
    }

    /// Peak BF16 tensor-core throughput, TFLOP/s (`None`: no bf16 on the device).
    pub fn bf16_tflops(self) -> Option<f64> {
        match self {
            Device::V100 => None,
            Device::A100 => Some(312.0),
            Device::H100 => Some(989.4),
        }
    }

    /// Memory bandwidth, GB/s.
    pub fn bandwidth_gbs(self) -> f64 {
        match self {
            Device::V100 => 900.0,
            Device::A100 => 2039.0,
            Device::H100 => 3350.0,
        }
    }

    /// Whether the device computes in `dtype` (V100 has no bf16).
    pub fn supports(self, dtype: Dtype) -> bool {
        dtype == Dtype::Fp32 || self.bf16_tflops().is_some()
    }

    /// The compute ceiling of `unit` for `dtype`, in FLOP/s.
    ///
    /// # Panics
    /// If the device does not support `dtype` (check [`Device::supports`] first).
    pub fn peak(self, unit: Unit, dtype: Dtype) -> f64 {
        let tflops = match (dtype, unit) {
            (_, Unit::Vector) | (Dtype::Fp32, Unit::Matmul) => self.fp32_tflops(),
            (Dtype::Fp32, Unit::Conv) => self.tf32_tflops().unwrap_or(self.fp32_tflops()),
            (Dtype::Bf16, _) => self.bf16_tflops().expect("checked by Device::supports"),
        };
        tflops * 1e12
    }

    /// Roofline time of one kernel in milliseconds: max(FLOPs / peak, bytes /
    /// bandwidth). A lower bound on what the kernel really takes (no launch
    /// latency, no efficiency loss).
    pub fn time_ms(self, kernel: &Kernel, dtype: Dtype) -> f64 {
        let compute = kernel.flops / self.peak(kernel.unit, dtype);
        let memory = kernel.bytes / (self.bandwidth_gbs() * 1e9);
        compute.max(memory) * 1e3
    }

    /// The figures the roofline used, for a file's metadata.
    pub fn describe(self) -> serde_json::Value {
        json!({
            "name": self.name(),
            "model": self.model(),
            "fp32_tflops": self.fp32_tflops(),
            "tf32_tflops": self.tf32_tflops(),
            "bf16_tflops": self.bf16_tflops(),
            "bandwidth_gb_per_s": self.bandwidth_gbs(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_picks_the_binding_ceiling() {
        // 1 GFLOP and 1 MB on a V100 conv: compute-bound, 1e9 / 15.7e12 s.
        let k = Kernel { unit: Unit::Conv, flops: 1e9, bytes: 1e6 };
        let t = Device::V100.time_ms(&k, Dtype::Fp32);
        assert!((t - 1e3 / 15.7e3).abs() < 1e-12, "{t}");
        // The same conv on an A100 in fp32 uses TF32 tensor cores.
        assert!((Device::A100.time_ms(&k, Dtype::Fp32) - 1e3 / 156e3).abs() < 1e-12);
        // An elementwise kernel moving 1 GB: bandwidth-bound.
        let e = Kernel { unit: Unit::Vector, flops: 1e6, bytes: 1e9 };
        assert!((Device::H100.time_ms(&e, Dtype::Bf16) - 1e3 / 3350.0).abs() < 1e-12);
    }

    #[test]
    fn parses_names_and_rejects_unknown_ones() {
        assert_eq!("bf16".parse::<Dtype>(), Ok(Dtype::Bf16));
        assert_eq!("h100".parse::<Device>(), Ok(Device::H100));
        let e = "fp16".parse::<Dtype>().unwrap_err();
        assert!(e.contains("fp16") && e.contains("fp32, bf16"), "{e}");
        let e = "k80".parse::<Device>().unwrap_err();
        assert!(e.contains("v100, a100, h100"), "{e}");
        assert!(!Device::V100.supports(Dtype::Bf16));
        assert!(Device::A100.supports(Dtype::Bf16));
    }
}
