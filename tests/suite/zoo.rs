//! The zoo against published figures (shapes, parameter counts, MACs, activation
//! memory), and the committed chains and graphs in `chains/` against the
//! generator that made them (they cannot drift) and against the solvers.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use remat::solve::{Algorithm, SolveOptions, min_budget, solve};
use remat::zoo::{Dtype, Granularity, Net, Spec, build, generate};
use remat::{Chain, Op, simulate};

const GIB: f64 = (1u64 << 30) as f64;

fn spec(name: &str, batch: usize, image: Option<usize>) -> Spec {
    Spec { batch, image, ..Spec::new(name) }
}

fn chain_of(s: &Spec) -> Chain {
    generate(s).unwrap().chain().expect("a chain").clone()
}

/// Peak of the schedule without recomputation: F_all^1..F_all^{L+1}, B^{L+1}..B^1.
fn store_all_peak(chain: &Chain) -> u64 {
    let n = chain.len() + 1;
    let mut ops: Vec<Op> = (1..=n).map(|l| Op::FAll(l, 0)).collect();
    ops.extend((1..=n).rev().map(Op::B));
    simulate(chain, &ops).unwrap().peak_memory
}

fn block_shape(net: &Net, block: &str) -> Vec<usize> {
    let b = net.block(block).unwrap_or_else(|| panic!("no block {block}"));
    net.nodes[b.output()].shape.clone()
}

/// ResNet-50 at 224, batch 1: the stage outputs of torchvision's model
/// (He et al. 2016, Table 1: conv2_x 56x56, conv3_x 28x28, conv4_x 14x14,
/// conv5_x 7x7, with 256/512/1024/2048 channels), in the chain's sizes too.
#[test]
fn resnet50_stage_shapes() {
    let s = spec("resnet50", 1, Some(224));
    let net = build(&s).unwrap();
    let chain = chain_of(&s);
    assert_eq!(chain.len(), 22);
    let expected = [
        ("conv1", vec![1, 64, 112, 112]),
        ("maxpool", vec![1, 64, 56, 56]),
        ("layer1.2", vec![1, 256, 56, 56]),
        ("layer2.3", vec![1, 512, 28, 28]),
        ("layer3.5", vec![1, 1024, 14, 14]),
        ("layer4.2", vec![1, 2048, 7, 7]),
        ("fc", vec![1, 1000]),
    ];
    for (block, shape) in expected {
        assert_eq!(block_shape(&net, block), shape, "{block}");
        let stage = chain.stages().iter().find(|st| st.name.as_deref() == Some(block)).unwrap();
        assert_eq!(stage.output_size, shape.iter().product::<usize>() as u64 * 4, "{block}");
    }
    assert_eq!(chain.input_size(), 3 * 224 * 224 * 4);
}

/// Parameters (exact) and multiply-accumulates of one 224x224 (299 for
/// Inception) forward against torchvision's model table ("Params" and
/// "GFLOPS", which counts multiply-adds), and He et al. 2016's 3.8-4.1 GFLOPs
/// for ResNet-50 (torchvision's v1.5 has 4.09).
#[test]
fn params_and_macs_match_torchvision() {
    let table: &[(&str, u64, f64)] = &[
        ("resnet18", 11_689_512, 1.81),
        ("resnet34", 21_797_672, 3.66),
        ("resnet50", 25_557_032, 4.09),
        ("resnet101", 44_549_160, 7.80),
        ("resnet152", 60_192_808, 11.51),
        ("densenet121", 7_978_856, 2.83),
        ("densenet161", 28_681_000, 7.73),
        ("densenet169", 14_149_480, 3.36),
        ("densenet201", 20_013_928, 4.29),
        // torchvision's 27,161,264 includes the auxiliary classifier (conv0:
        // 768*128 + 256, conv1: 128*768*25 + 1536, fc: 768*1000 + 1000 =
        // 3,326,696), which remat leaves out.
        ("inception_v3", 27_161_264 - 3_326_696, 5.71),
        ("vgg11", 132_863_336, 7.61),
        ("vgg13", 133_047_848, 11.31),
        ("vgg16", 138_357_544, 15.47),
        ("vgg19", 143_667_240, 19.63),
    ];
    for &(name, params, gmacs) in table {
        let net = build(&Spec::new(name)).unwrap();
        assert_eq!(net.params(), params, "{name} parameters");
        let got = net.macs() as f64 / 1e9;
        assert!((got / gmacs - 1.0).abs() < 0.005, "{name}: {got} GMACs, published {gmacs}");
    }
    // The pin: ResNet-50 within 5% of 4.1 GMACs per image.
    let r50 = build(&Spec::new("resnet50")).unwrap().macs() as f64 / 1e9;
    assert!((r50 / 4.1 - 1.0).abs() < 0.05, "{r50}");
}

/// GPT-2: Hugging Face's parameter counts (lm_head tied to wte), and the matmul
/// work per token of Kaplan et al. 2020 (Table 1) without causal halving, as
/// eager attention computes the full score matrix: 12 d^2 per block + 2 s d
/// for attention per block + d V for the head.
#[test]
fn gpt2_params_and_matmul_macs() {
    for (name, params, layers, d) in [
        ("gpt2-small", 124_439_808u64, 12u64, 768u64),
        ("gpt2-medium", 354_823_168, 24, 1024),
        ("gpt2-large", 774_030_080, 36, 1280),
        ("gpt2-xl", 1_557_611_200, 48, 1600),
    ] {
        let net = build(&Spec::new(name)).unwrap();
        assert_eq!(net.params(), params, "{name}");
        let (s, v) = (1024u64, 50257u64);
        let per_token = layers * (12 * d * d + 2 * s * d) + d * v;
        assert_eq!(net.macs(), per_token * s, "{name}");
    }
}

/// A transformer block keeps s*b*h*(34 + 5*a*s/h) bytes in 16-bit with dropout
/// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
/// Transformer Models", eq. 1), plus the two LayerNorms' fp32 mean and rstd.
#[test]
fn gpt2_block_keeps_what_korthikanti_counts() {
    for (name, h, a, batch) in [("gpt2-small", 768u64, 12u64, 2usize), ("gpt2-xl", 1600, 25, 1)] {
        let s = Spec { batch, dtype: Dtype::Bf16, ..Spec::new(name) };
        let chain = chain_of(&s);
        let (seq, b) = (1024u64, batch as u64);
        let expected = seq * b * h * 34 + 5 * a * seq * seq * b + 2 * 2 * seq * b * 4;
        for stage in &chain.stages()[1..chain.len() - 2] {
            assert!(stage.name.as_deref().unwrap().starts_with("h."));
            assert_eq!(stage.saved_size, expected, "{name} {:?}", stage.name);
            assert_eq!(stage.output_size, seq * b * h * 2);
        }
    }
}

/// `--options` gives each GPT-2 block three recording options. Korthikanti's
/// selective recomputation (`no-attention`) keeps no term in seq^2: its saved
/// bytes double with the sequence, where the whole record's more than double.
/// `input` keeps the output alone and reruns the whole forward. Every option
/// keeps less than the whole record, and the uniform baseline's best policy
/// is never slower than store-all where store-all fits.
#[test]
fn gpt2_options_by_policy() {
    let at = |seq: usize| {
        chain_of(&Spec { batch: 2, seq: Some(seq), dtype: Dtype::Bf16, options: true, ..Spec::new("gpt2-small") })
    };
    let (short, long) = (at(512), at(1024));
    assert!(long.name().ends_with("-options"));
    let block = |c: &Chain| c.stages()[1].clone();
    let (s, l) = (block(&short), block(&long));
    let names: Vec<_> = l.options.iter().map(|o| o.name.clone().unwrap()).collect();
    assert_eq!(names, ["matmuls", "no-attention", "input"]);
    assert_eq!(l.options[1].saved_size, 2 * s.options[1].saved_size);
    assert!(l.saved_size > 2 * s.saved_size);
    assert_eq!(l.options[2].saved_size, l.output_size);
    assert!((l.options[2].recompute_time - l.forward_time).abs() <= 1e-3 * l.forward_time);
    for o in &l.options {
        assert!(o.saved_size < l.saved_size && o.saved_size >= l.output_size, "{o:?}");
        assert!(o.recompute_time > 0.0 && o.recompute_time <= l.forward_time * 1.001, "{o:?}");
        assert!(o.backward_overhead >= l.backward_overhead);
    }
    let peak = store_all_peak(&long);
    let all = solve(&long, peak, Algorithm::StoreAll, &SolveOptions::default()).unwrap();
    let uniform = solve(&long, peak, Algorithm::Uniform, &SolveOptions::default()).unwrap();
    assert!(uniform.schedule.makespan <= all.schedule.makespan);
    // Half of store-all: some policy fits, recomputing inside every block.
    let half = solve(&long, peak / 2, Algorithm::Uniform, &SolveOptions::default()).unwrap();
    assert!(half.schedule.peak_memory <= peak / 2 && half.schedule.makespan > all.schedule.makespan);
    assert!(half.detail.as_deref().unwrap().contains("on every stage"), "{:?}", half.detail);
    assert!(half.schedule.operations.iter().any(|op| op.option() > 0));
    // Graphs have no options.
    let e = generate(&Spec { options: true, graph: Some(Granularity::Blocks), ..Spec::new("gpt2-small") });
    assert!(e.unwrap_err().to_string().contains("--options"));
}

/// Inception v3 at 299: torchvision's shape comments for every module.
#[test]
fn inception_v3_shapes() {
    let net = build(&Spec::new("inception_v3")).unwrap();
    assert_eq!(net.blocks.len(), 27);
    for (block, c, hw) in [
        ("Conv2d_1a_3x3.bn", 32, 149),
        ("Conv2d_2b_3x3.bn", 64, 147),
        ("maxpool1", 64, 73),
        ("Conv2d_4a_3x3.bn", 192, 71),
        ("maxpool2", 192, 35),
        ("Mixed_5b", 256, 35),
        ("Mixed_5d", 288, 35),
        ("Mixed_6a", 768, 17),
        ("Mixed_6e", 768, 17),
        ("Mixed_7a", 1280, 8),
        ("Mixed_7c", 2048, 8),
    ] {
        assert_eq!(block_shape(&net, block), vec![1, c, hw, hw], "{block}");
    }
}

/// DenseNet-121 at 224: channels after each dense block and transition
/// (Huang et al. 2017, Table 1), and Rotor's 74-stage sequentialization.
#[test]
fn densenet121_shapes() {
    let net = build(&Spec::new("densenet121")).unwrap();
    assert_eq!(net.blocks.len(), 3 + 58 + 3 * 3 + 4);
    for (block, c, hw) in [
        ("denseblock1.denselayer6", 256, 56),
        ("transition1.pool", 128, 28),
        ("denseblock2.denselayer12", 512, 28),
        ("transition2.pool", 256, 14),
        ("denseblock3.denselayer24", 1024, 14),
        ("transition3.pool", 512, 7),
        ("denseblock4.denselayer16", 1024, 7),
    ] {
        assert_eq!(block_shape(&net, block), vec![1, c, hw, hw], "{block}");
    }
}

/// ResNet-1001 sequentialized as Rotor does is 339 stages long (Rotor paper,
/// section 5.1: "ResNet 1001 ... results in a chain of length 339"), and with
/// Rotor's widths its store-all peak at 224 and batch 8 is the 225 GiB the
/// paper gives (section 5.3: "running the setting with batch size 8 with the
/// PyTorch strategy would require 225 GiB").
#[test]
fn resnet1001_matches_rotor() {
    for name in ["resnet1001", "resnet1001-cifar"] {
        assert_eq!(chain_of(&Spec::new(name)).len(), 339, "{name}");
    }
    let peak = store_all_peak(&chain_of(&spec("resnet1001", 8, Some(224)))) as f64 / GIB;
    assert!((peak / 225.0 - 1.0).abs() < 0.03, "{peak} GiB");
    // He et al.'s CIFAR widths: 64, 128, 256 output channels at 32, 16, 8.
    let net = build(&Spec::new("resnet1001-cifar")).unwrap();
    assert_eq!(block_shape(&net, "layer1.110"), vec![1, 64, 32, 32]);
    assert_eq!(block_shape(&net, "layer3.110"), vec![1, 256, 8, 8]);
}

/// ResNet-101's store-all peak against what the Rotor paper reports for
/// PyTorch: "ResNet101 ... 224x224 ... batch size of 32 ... requires around 5GB
/// of available memory, while the parameters of the model only require 170MB"
/// (section 1), and a measured peak of 2.83 GiB at image 1000, batch 1
/// (section 5.3, Figure 6). The measured figures also hold parameters,
/// gradients and workspaces, so the activations must come out somewhat below.
#[test]
fn resnet101_store_all_peak_is_in_the_published_range() {
    let peak = store_all_peak(&chain_of(&spec("resnet101", 32, Some(224)))) as f64;
    assert!(peak > 0.7 * 5e9 && peak < 5e9, "{} GiB", peak / GIB);
    let params = build(&Spec::new("resnet101")).unwrap().params() as f64 * 4.0;
    let peak = store_all_peak(&chain_of(&spec("resnet101", 1, Some(1000)))) as f64 + 2.0 * params;
    assert!(peak > 0.85 * 2.83 * GIB && peak < 2.83 * GIB, "{} GiB", peak / GIB);
}

/// U-Net: the levels of Ronneberger et al. (64 to 1024 channels, four halvings)
/// with padded convolutions; it is a graph, the decoder reading the encoder.
#[test]
fn unet_is_a_graph_with_skips() {
    let s = Spec { graph: Some(Granularity::Blocks), ..Spec::new("unet") };
    let net = build(&s).unwrap();
    for (block, c, hw) in
        [("inc", 64, 256), ("down2", 256, 64), ("down4", 1024, 16), ("up1", 512, 32), ("up4", 64, 256)]
    {
        assert_eq!(block_shape(&net, block), vec![1, c, hw, hw], "{block}");
    }
    let g = generate(&s).unwrap().graph().unwrap().clone();
    let up1 = (0..g.len()).find(|&v| g.node_name(v) == "up1").unwrap();
    let inputs: Vec<&str> = g.inputs(up1).iter().map(|&u| g.node_name(u)).collect();
    assert_eq!(inputs, ["down4", "down3"]);
    let err = generate(&Spec::new("unet")).unwrap_err().to_string();
    assert!(err.contains("not a chain"), "{err}");
}

/// For a network that is a chain, the block graph is a path whose nodes are
/// the chain's stages (and the loss): the graph builder's sequentialization
/// is the chain.
#[test]
fn block_graph_of_a_chain_is_the_chain() {
    for name in ["resnet50", "densenet121", "inception_v3", "gpt2-small"] {
        let chain = chain_of(&Spec::new(name));
        let g = generate(&Spec { graph: Some(Granularity::Blocks), ..Spec::new(name) }).unwrap();
        let g = g.graph().unwrap();
        assert_eq!(g.len(), chain.len() + 1, "{name}");
        assert_eq!(g.input_size(), chain.input_size());
        for i in 0..g.len() {
            let st = chain.stage(i + 1);
            let expected_inputs: Vec<usize> = if i == 0 { vec![] } else { vec![i - 1] };
            assert_eq!(g.inputs(i), expected_inputs, "{name} {}", g.node_name(i));
            let as_stage = g.stage(i);
            assert_eq!(
                (as_stage.output_size, as_stage.saved_size, as_stage.forward_overhead, as_stage.backward_overhead),
                (st.output_size, st.saved_size, st.forward_overhead, st.backward_overhead)
            );
            assert_eq!((as_stage.forward_time, as_stage.backward_time), (st.forward_time, st.backward_time));
        }
    }
}

/// Every generated chain and graph is valid: no saved_size below output_size
/// (the chain loader would warn), graph nodes in topological order with unique
/// names, and a layer graph's times add up to the chain's.
#[test]
fn generated_models_are_well_formed() {
    for n in remat::zoo::NETWORKS {
        let layers = generate(&Spec { graph: Some(Granularity::Layers), ..Spec::new(n.name) }).unwrap();
        let layers = layers.graph().unwrap();
        // The library's ForwardGraph validated names and input order; the zoo
        // must also never write a saved_size below the output.
        for v in 0..layers.len() {
            assert!(layers.stage(v).saved_size >= layers.stage(v).output_size, "{} {}", n.name, layers.node_name(v));
        }
        if n.is_chain() {
            let chain = chain_of(&Spec::new(n.name));
            assert!(chain.warnings().is_empty(), "{}: {:?}", n.name, chain.warnings());
            let layer_time: f64 =
                (0..layers.len()).map(|v| layers.stage(v).forward_time + layers.stage(v).backward_time).sum();
            let rel = (layer_time - chain.store_all_time()).abs() / chain.store_all_time();
            assert!(rel < 1e-3, "{}: {layer_time} vs {}", n.name, chain.store_all_time());
        }
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The committed generated files: `chains/*.json` and `chains/graphs/*.json`
/// whose metadata says `remat zoo` made them.
fn committed() -> Vec<(PathBuf, String, String)> {
    let mut files = Vec::new();
    for dir in ["chains", "chains/graphs"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            if let Some(cmd) = json["metadata"]["command"].as_str().filter(|c| c.starts_with("remat zoo ")) {
                files.push((path, cmd.to_string(), text));
            }
        }
    }
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo()).unwrap().display().to_string()
}

/// Each committed file is exactly what its recorded command prints today, and
/// chains/README.md lists it with that command.
#[test]
fn committed_files_regenerate_exactly() {
    let files = committed();
    assert!(files.len() >= 25, "only {} generated files", files.len());
    let readme = std::fs::read_to_string(repo().join("chains/README.md")).unwrap();
    for (path, cmd, text) in &files {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = Command::cargo_bin("remat").unwrap().args(&args).output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8(out.stdout).unwrap() == *text, "{} differs from `{cmd}`", relative(path));
        let row = format!("`{cmd} -o {}`", relative(path));
        assert!(readme.contains(&row), "chains/README.md has no row {row}");
    }
}

/// Every committed chain loads without warnings, has a smallest budget, and
/// solves (persistent DP, few slots for long chains) halfway between that
/// budget and the store-all peak, at no more than the store-all peak and at
/// least the store-all time.
#[test]
fn committed_chains_solve() {
    for (path, _, text) in committed() {
        if !path.parent().unwrap().ends_with("chains") {
            continue;
        }
        let chain = Chain::from_json(&text).unwrap();
        assert!(chain.warnings().is_empty(), "{}", relative(&path));
        let slots = std::num::NonZeroUsize::new(if chain.len() > 100 { 20 } else { 100 }).unwrap();
        let opts = SolveOptions { slots, ..SolveOptions::default() };
        let min = min_budget(&chain, Algorithm::Persistent, &opts).unwrap().expect("some budget works");
        let peak = store_all_peak(&chain);
        assert!(min < peak, "{}: min {min} vs store-all {peak}", relative(&path));
        let budget = min + (peak - min) / 2;
        let sol = solve(&chain, budget, Algorithm::Persistent, &opts).unwrap();
        assert!(sol.schedule.peak_memory <= budget);
        assert!(sol.schedule.makespan >= chain.store_all_time() * (1.0 - 1e-9), "{}", relative(&path));
    }
}

#[test]
fn cli_lists_errors_and_writes() {
    let out = Command::cargo_bin("remat").unwrap().args(["zoo", "--list"]).output().unwrap();
    let list = String::from_utf8(out.stdout).unwrap();
    assert!(list.contains("resnet1001") && list.contains("gpt2-xl") && list.contains("unet"));
    let out = Command::cargo_bin("remat").unwrap().args(["zoo", "resnet5O"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("unknown network `resnet5O` (did you mean `resnet50`?)") && err.contains("densenet121"));
    let out = Command::cargo_bin("remat")
        .unwrap()
        .args(["zoo", "gpt2-small", "--dtype", "bf16", "--device", "v100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("--dtype: NVIDIA V100 SXM2 has no bf16"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r18.json");
    let out = Command::cargo_bin("remat")
        .unwrap()
        .args(["zoo", "resnet18", "--batch", "8", "-o", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8(out.stderr).unwrap().contains("resnet18-224-b8 (14 stages + loss)"));
    let out = Command::cargo_bin("remat").unwrap().args(["min-memory", file.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::cargo_bin("remat")
        .unwrap()
        .args(["solve", file.to_str().unwrap(), "--memory", "200MiB"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout).unwrap().contains("resnet18-224-b8 (14 stages + loss)"));
}
