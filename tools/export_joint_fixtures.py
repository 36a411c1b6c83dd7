"""Regenerates the joint-graph fixtures in tests/data/joint/ from real PyTorch
functions (the paper's examples, an MLP block, an attention block).

    .venv/bin/python tools/export_joint_fixtures.py   # with the package installed (tools/test-all.sh)

Needs torch (CPU is enough). Deterministic: fixed seeds and shapes.
"""

from __future__ import annotations

import json
import pathlib

import torch

from remat.torch.examples import EXAMPLES
from remat.torch.joint import export_joint

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> None:
    out = ROOT / "tests" / "data" / "joint"
    out.mkdir(parents=True, exist_ok=True)
    for name, make in EXAMPLES.items():
        torch.manual_seed(0)
        fn, inputs = make()
        graph = export_joint(fn, *inputs, name=name)
        graph["metadata"].pop("torch", None)  # keep fixtures stable across versions
        path = out / f"{name}.json"
        path.write_text(json.dumps(graph, indent=1) + "\n")
        print(
            f"{path.relative_to(ROOT)}: {len(graph['nodes'])} nodes, PyTorch saves {graph['metadata']['pytorch_saved']}"
        )


if __name__ == "__main__":
    main()
