//! `remat zoo`: real networks' chains and forward graphs from their architecture.

use std::path::PathBuf;

use crate::zoo::{Device, Dtype, Generated, Granularity, NETWORKS, Spec, generate};

use super::output::{out, outln};
use super::{CliResult, Failure, write_file};

fn networks_help() -> String {
    let mut s = String::from("Networks:\n");
    for n in NETWORKS {
        s += &format!("  {n}\n");
    }
    s += "\nExamples:
  remat zoo resnet101 --batch 32 -o resnet101.json
  remat zoo gpt2-xl --batch 4 --seq 1024 --dtype bf16 --device h100
  remat zoo unet --graph layers -o unet.json
  remat zoo resnet50 --graph layers --blocks 1-6

Sizes are exact for the modelled PyTorch implementation (tensor shapes and what
autograd keeps); times are a roofline estimate on the device, not a measurement.
tools/profile_chain.py measures a chain on a real GPU.";
    s
}

/// Generate a real network's chain, or its forward graph, from its architecture.
///
/// Builds the network layer by layer as PyTorch runs it in training mode and
/// writes one chain stage per block (the modules an nn.Sequential wrapper such
/// as Rotor's lists): activation sizes from tensor shapes, saved sizes from what
/// autograd keeps for the backward, transients from what is alive while a block
/// runs, and times from a roofline of the device (FLOPs and bytes moved against
/// its peak throughput and bandwidth). The file's metadata records the command
/// that regenerates it.
#[derive(clap::Args)]
#[command(after_help = networks_help())]
pub struct Args {
    /// Network (see the list below).
    #[arg(required_unless_present = "list", value_name = "NAME")]
    name: Option<String>,
    /// Samples per batch.
    #[arg(long, default_value_t = 1, value_name = "B")]
    batch: usize,
    /// Image side in pixels (square images) for vision networks [default: 224;
    /// 299 for inception_v3; 256 for unet; 32 for resnet1001-cifar].
    #[arg(long, value_name = "H")]
    image: Option<usize>,
    /// Sequence length in tokens for GPT-2 [default: 1024, the most it has].
    #[arg(long, value_name = "N")]
    seq: Option<usize>,
    /// Activation and compute type: fp32, or bf16 (autocast-style mixed precision).
    #[arg(long, default_value = "fp32", value_parser = |s: &str| s.parse::<Dtype>())]
    dtype: Dtype,
    /// Device whose datasheet figures the roofline times use: v100, a100, h100.
    #[arg(long, default_value = "a100", value_parser = |s: &str| s.parse::<Device>())]
    device: Device,
    /// Write the forward graph instead of the chain: one node per layer
    /// (`layers`, the default) or per block (`blocks`). U-Net is only a graph.
    #[arg(long, value_name = "GRANULARITY", num_args = 0..=1, default_missing_value = "layers",
          value_parser = |s: &str| s.parse::<Granularity>())]
    graph: Option<Granularity>,
    /// Only blocks FROM-TO (1-based, as the chain numbers its stages; `N` alone
    /// means 1-N), their input being the output of the block before. No loss.
    #[arg(long, value_name = "FROM-TO", value_parser = parse_blocks)]
    blocks: Option<(usize, usize)>,
    /// Give each block recording options (selective saving): `matmuls` (keep
    /// matrix-product and convolution outputs, recompute the rest),
    /// `no-attention` (recompute the attention core only), `input` (recompute
    /// the whole block in its backward); the solvers choose one per block.
    #[arg(long)]
    options: bool,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// List the networks and exit.
    #[arg(long)]
    list: bool,
}

fn parse_blocks(s: &str) -> Result<(usize, usize), String> {
    let err = || format!("`{s}` is not a block range: write FROM-TO (e.g. 1-6) or N for 1-N");
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a.trim().parse().map_err(|_| err())?, b.trim().parse().map_err(|_| err())?),
        None => (1, s.trim().parse().map_err(|_| err())?),
    };
    Ok((a, b))
}

pub fn run(args: Args) -> CliResult {
    if args.list {
        for n in NETWORKS {
            outln!("{n}");
        }
        return Ok(());
    }
    let spec = Spec {
        network: args.name.expect("clap requires NAME without --list"),
        batch: args.batch,
        image: args.image,
        seq: args.seq,
        dtype: args.dtype,
        device: args.device,
        graph: args.graph,
        blocks: args.blocks,
        options: args.options,
    };
    let generated = generate(&spec).map_err(Failure::input)?;
    let text = generated.to_json();
    match &args.output {
        Some(path) => {
            write_file(path, &text)?;
            let what = match &generated {
                Generated::Chain(c) => format!("chain {} ({} stages + loss)", c.name(), c.len()),
                Generated::Graph(g) => format!("forward graph {} ({} nodes)", g.name(), g.len()),
            };
            eprintln!("wrote {}: {what}", path.display());
        }
        None => out!("{text}"),
    }
    Ok(())
}
