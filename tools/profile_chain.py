#!/usr/bin/env python3
"""Measure a network of remat's zoo and write it in remat's chain format.

The network is split into the same stages as `remat zoo` (Rotor's nn.Sequential
sequentialization, see chains/README.md), so a measured file and the estimate
line up stage by stage. The stages are measured by `remat.torch.profile` (see
its documentation for every field): times are medians of --repeat runs (CUDA
events on a GPU, perf_counter on the CPU); saved_size counts the distinct
storages autograd keeps (saved_tensors_hooks), the stage's parameters, buffers
and input excluded, its output included; transient overheads come from the
CUDA allocator's peak on a GPU and from remat.torch.LiveBytes on the CPU. The
loss is measured the same way, as a one-stage chain on the network's output.

(The script used to take saved_size from torch.cuda.memory_allocated, which
also counted parameter-sized and library workspace allocations: a 256x1024
Linear stage at batch 256 was reported as 5,242,880 bytes instead of its
1,048,576-byte output.)

Usage (needs the remat Python package, PyTorch and torchvision; GPT-2 needs
`transformers`; a CUDA GPU is used when there is one):

    python tools/profile_chain.py resnet50 --batch 32 --image 224 \\
        -o chains/measured/resnet50-224-b32-a100.json \\
        --compare chains/resnet50-224-b32.json

--compare prints, stage by stage, the measured figures against the estimate
and the ratios of the totals. Measured files record the device that made them
in their metadata.
"""

import argparse
import contextlib
import json
import sys
from collections import OrderedDict

import torch
from torch import nn


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class Relu(nn.Sequential):
    """A module then an in-place ReLU, as one stage (Rotor's ReLUatEnd)."""

    def __init__(self, module):
        super().__init__(module, nn.ReLU(inplace=True))


class DenseLayerCat(nn.Module):
    """torchvision's _DenseLayer returns only its new features; as a chain stage
    it returns cat([input, new features]) (Rotor's densenet)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return torch.cat([x, self.layer(x)], 1)


class BasicConvSplit:
    """torchvision's Inception BasicConv2d as two stages: conv, BatchNorm + ReLU."""

    @staticmethod
    def stages(name, m):
        return [(f"{name}.conv", m.conv), (f"{name}.bn", Relu(m.bn))]


def resnet_stages(name):
    import torchvision.models as tv

    layers = {"resnet200": [3, 24, 36, 3]}
    if name in layers:
        model = tv.resnet.ResNet(tv.resnet.Bottleneck, layers[name])
    else:
        model = getattr(tv, name)()
    stages = [("conv1", model.conv1), ("bn1", Relu(model.bn1)), ("maxpool", model.maxpool)]
    for i in range(1, 5):
        for j, block in enumerate(getattr(model, f"layer{i}")):
            stages.append((f"layer{i}.{j}", block))
    stages += [("avgpool", model.avgpool), ("flatten", Flatten()), ("fc", model.fc)]
    return stages


def densenet_stages(name):
    import torchvision.models as tv

    model = getattr(tv, name)()
    f = model.features
    stages = [("conv0", f.conv0), ("norm0", Relu(f.norm0)), ("pool0", f.pool0)]
    for child_name, child in f.named_children():
        if child_name.startswith("denseblock"):
            for layer_name, layer in child.named_children():
                stages.append((f"{child_name}.{layer_name}", DenseLayerCat(layer)))
        elif child_name.startswith("transition"):
            stages += [
                (f"{child_name}.norm", Relu(child.norm)),
                (f"{child_name}.conv", child.conv),
                (f"{child_name}.pool", child.pool),
            ]
    stages += [
        ("norm5", Relu(f.norm5)),
        ("avgpool", nn.AdaptiveAvgPool2d((1, 1))),
        ("flatten", Flatten()),
        ("classifier", model.classifier),
    ]
    return stages


def inception_stages(_name):
    import torchvision.models as tv

    m = tv.inception_v3(aux_logits=False, init_weights=False)
    stages = []
    stages += BasicConvSplit.stages("Conv2d_1a_3x3", m.Conv2d_1a_3x3)
    stages += BasicConvSplit.stages("Conv2d_2a_3x3", m.Conv2d_2a_3x3)
    stages += BasicConvSplit.stages("Conv2d_2b_3x3", m.Conv2d_2b_3x3)
    stages.append(("maxpool1", m.maxpool1))
    stages += BasicConvSplit.stages("Conv2d_3b_1x1", m.Conv2d_3b_1x1)
    stages += BasicConvSplit.stages("Conv2d_4a_3x3", m.Conv2d_4a_3x3)
    stages.append(("maxpool2", m.maxpool2))
    for n in [
        "Mixed_5b",
        "Mixed_5c",
        "Mixed_5d",
        "Mixed_6a",
        "Mixed_6b",
        "Mixed_6c",
        "Mixed_6d",
        "Mixed_6e",
        "Mixed_7a",
        "Mixed_7b",
        "Mixed_7c",
    ]:
        stages.append((n, getattr(m, n)))
    stages += [("avgpool", m.avgpool), ("dropout", m.dropout), ("flatten", Flatten()), ("fc", m.fc)]
    return stages


def vgg_stages(name):
    import torchvision.models as tv

    m = getattr(tv, name)()
    stages = []
    children = list(m.features.children())
    i = 0
    index = 0
    while i < len(children):
        c = children[i]
        if isinstance(c, nn.Conv2d):
            stages.append((f"features.{index}", nn.Sequential(c, children[i + 1])))
            i += 2
        else:
            stages.append((f"features.{index}", c))
            i += 1
        index += 1
    cl = list(m.classifier.children())
    stages += [
        ("avgpool", m.avgpool),
        ("flatten", Flatten()),
        ("classifier.0", nn.Sequential(cl[0], cl[1])),
        ("classifier.1", cl[2]),
        ("classifier.2", nn.Sequential(cl[3], cl[4])),
        ("classifier.3", cl[5]),
        ("classifier.4", cl[6]),
    ]
    return stages


class Gpt2Embed(nn.Module):
    def __init__(self, tr):
        super().__init__()
        self.tr = tr

    def forward(self, ids):
        pos = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
        return self.tr.drop(self.tr.wte(ids) + self.tr.wpe(pos))


class Gpt2Block(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


def gpt2_stages(name):
    from transformers import GPT2Config, GPT2LMHeadModel

    sizes = {
        "gpt2-small": (12, 768, 12),
        "gpt2-medium": (24, 1024, 16),
        "gpt2-large": (36, 1280, 20),
        "gpt2-xl": (48, 1600, 25),
    }
    layers, hidden, heads = sizes[name]
    cfg = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, attn_implementation="eager")
    model = GPT2LMHeadModel(cfg)
    tr = model.transformer
    stages = [("embed", Gpt2Embed(tr))]
    stages += [(f"h.{i}", Gpt2Block(b)) for i, b in enumerate(tr.h)]
    stages += [("ln_f", tr.ln_f), ("lm_head", model.lm_head)]
    return stages


FAMILIES = [
    (("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet200"), resnet_stages),
    (("densenet121", "densenet161", "densenet169", "densenet201"), densenet_stages),
    (("inception_v3",), inception_stages),
    (("vgg11", "vgg13", "vgg16", "vgg19"), vgg_stages),
    (("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"), gpt2_stages),
]


def stages_of(name):
    for names, fn in FAMILIES:
        if name in names:
            return fn(name)
    known = ", ".join(n for names, _ in FAMILIES for n in names)
    sys.exit(
        f"error: unknown network `{name}`; this script knows: {known} (ResNet-1001 and U-Net are not wired in yet)"
    )


def loss_fn(name):
    if name.startswith("gpt2"):

        def lm_loss(logits, ids):
            shift = logits[..., :-1, :].contiguous()
            return nn.functional.cross_entropy(shift.view(-1, shift.size(-1)), ids[..., 1:].reshape(-1))

        return lm_loss
    return lambda logits, target: nn.functional.cross_entropy(logits, target)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("network")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--image", type=int, help="image side (default 224, 299 for inception_v3)")
    p.add_argument("--seq", type=int, default=1024, help="sequence length for GPT-2")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16: run under autocast")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per stage (median)")
    p.add_argument("--compare", help="a remat zoo chain file to compare the measurements with")
    p.add_argument("-o", "--output", help="chain file to write (default: stdout)")
    args = p.parse_args()

    import remat.torch

    stages = stages_of(args.network)
    gpt = args.network.startswith("gpt2")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    if gpt:
        x = torch.randint(0, 50257, (args.batch, args.seq), device=dev)
        target = x
    else:
        image = args.image or (299 if args.network == "inception_v3" else 224)
        x = torch.randn(args.batch, 3, image, image, device=dev)
        target = torch.randint(0, 1000, (args.batch,), device=dev)
    # Module names cannot contain dots: `features.0` becomes `features_0`.
    model = nn.Sequential(OrderedDict((n.replace(".", "_"), m) for n, m in stages)).to(dev).train()
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext()
    with autocast:
        chain = remat.torch.profile(model, x, repeat=args.repeat, name=f"{args.network}-measured").to_dict()
        # The zoo's names (`layer1.0`), for --compare and readers of both files.
        for stage, (name, _) in zip(chain["stages"], stages):
            stage["name"] = name
        with torch.no_grad():
            out = model(x)
        lf = loss_fn(args.network)

        class Loss(nn.Module):
            def forward(self, logits):
                return lf(logits, target)

        loss = remat.torch.profile(nn.Sequential(Loss()), out, repeat=args.repeat).to_dict()["stages"][0]
    loss["name"] = "loss"
    chain["loss"] = loss
    chain["metadata"].update(
        {
            "generator": "tools/profile_chain.py: measured with remat.torch.profile",
            "command": " ".join(["python", "tools/profile_chain.py", *sys.argv[1:]]),
            "dtype": args.dtype,
        }
    )
    if dev.type == "cuda":
        chain["metadata"]["cudnn"] = torch.backends.cudnn.version()
    text = json.dumps(chain, indent=1)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if args.compare:
        compare(chain, args.compare)


def compare(measured, path):
    with open(path) as f:
        est = json.load(f)
    by_name = {s.get("name"): s for s in est["stages"]}
    keys = ["forward_time", "backward_time", "saved_size", "forward_overhead", "backward_overhead"]
    totals = {k: [0.0, 0.0] for k in keys}
    print(f"{'stage':24}" + "".join(f"{k:>22}" for k in keys), file=sys.stderr)
    for s in measured["stages"]:
        e = by_name.get(s["name"])
        if e is None:
            print(f"{s['name']:24} (not in {path})", file=sys.stderr)
            continue
        row = f"{s['name']:24}"
        for k in keys:
            m, g = s.get(k, 0), e.get(k, 0)
            totals[k][0] += m
            totals[k][1] += g
            row += f"{m:>11.4g}/{g:<10.4g}"
        print(row, file=sys.stderr)
    print(
        "measured/estimated totals: "
        + ", ".join(f"{k} {t[0] / t[1]:.2f}" if t[1] else f"{k} n/a" for k, t in totals.items()),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
