#!/usr/bin/env python3
"""The crate's layers, defined once (LAYERS below), and the check that keeps
them: every `crate::` path in src/ (a `use`, or a path in code) must point to
its own module or to one in the same or a lower layer. An edge that points up
a layer fails, naming the file and line, unless it is one of the EXCEPTIONS
(each says why it is there and what removes it); an exception that no longer
occurs fails too, so that the list only shrinks. A cycle between modules
(two of one layer using each other, directly or round a loop) fails too. Test modules (`#[cfg(test)]
mod ... { }`) may use any layer and are not checked; comments are skipped.

    python3 tools/layers.py          # check (exit 0 when clean), CI runs it
    python3 tools/layers.py --edges  # print every module-to-module edge

Names re-exported at the crate root (`crate::Chain`) count as the module that
defines them (read from src/lib.rs's `pub use` lines).
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Bottom first. A module may use its own layer and every layer below it.
LAYERS: list[tuple[str, list[str]]] = [
    ("leaves: sizes, the model's text, kinds of errors, the machine's memory", ["size", "model", "error", "machine"]),
    ("the model's data and its judge", ["chain", "schedule", "simulate", "slots"]),
    ("operator-level joint graphs (self-contained)", ["joint"]),
    ("the chain solvers", ["solve"]),
    ("the graph MILP's limit (the chain solvers' are solve::limits)", ["guard"]),
    ("graphs and their solvers", ["graph"]),
    ("generators of test chains and graphs", ["synthetic"]),
    ("inputs: a file read once and routed; real architectures", ["problem", "zoo"]),
    ("what front ends print or run: tables, plots, the ndarray executor", ["report", "exec"]),
    ("the command line", ["cli"]),
]

# Up edges allowed for now: (file, target module, why and what removes it).
# None today (issue 26 removed the last five: solve -> guard and
# solve/algorithm.rs -> graph). Remove an entry when its edge goes; the check
# fails on a stale one.
EXCEPTIONS: list[tuple[str, str, str]] = []


def layer_of() -> dict[str, int]:
    return {module: i for i, (_, modules) in enumerate(LAYERS) for module in modules}


def root_reexports() -> dict[str, str]:
    """Names `pub use`d at the crate root, to the module that defines them."""
    names: dict[str, str] = {}
    text = (SRC / "lib.rs").read_text(encoding="utf-8")
    for module, rest in re.findall(r"^pub use (\w+)::(\{[^}]*\}|\w+);", text, flags=re.M):
        for name in re.findall(r"\w+", rest):
            names[name] = module
    return names


def code_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, code) outside comments and top-level test modules
    (`#[cfg(test)]` then `mod NAME {` at column 0, to the `}` at column 0
    that closes it: rustfmt's layout)."""
    out: list[tuple[int, str]] = []
    in_tests = False
    cfg_test = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if in_tests:
            in_tests = line != "}"
            continue
        if line == "#[cfg(test)]":
            cfg_test = True
            continue
        if cfg_test and re.match(r"(pub(\(\w+\))? )?mod \w+ \{$", line):
            in_tests = True
            cfg_test = False
            continue
        cfg_test = False
        out.append((number, re.sub(r'"(?:[^"\\]|\\.)*"', '""', line.split("//")[0])))
    return out


def module_of(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".rs")


def edges() -> dict[tuple[str, str], list[str]]:
    """(from module, to module) -> ["file:line", ...]."""
    reexports = root_reexports()
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.rs")):
        source = module_of(path)
        if source in ("lib", "main"):
            continue
        for number, code in code_lines(path):
            targets: list[str] = re.findall(r"\bcrate::(\w+)", code)
            for group in re.findall(r"\bcrate::\{([^}]*)", code):
                targets += re.findall(r"(?:^|,)\s*(\w+)", group)
            for target in targets:
                target = reexports.get(target, target)
                if target != source:
                    found[(source, target)].append(f"{path.relative_to(SRC)}:{number}")
    return found


def cycles(found: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The module cycles (strongly connected components of more than one
    module, Tarjan's algorithm), each sorted, in sorted order. Modules of one
    layer may use each other, but not both ways round."""
    graph: dict[str, list[str]] = defaultdict(list)
    for source, target in sorted(found):
        graph[source].append(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(set(graph)):
        if v not in index:
            visit(v)
    return sorted(out)


def main() -> int:
    layers = layer_of()
    found = edges()
    if "--edges" in sys.argv[1:]:
        for (source, target), where in sorted(found.items()):
            print(f"{source:10} -> {target:10} {len(where):3}  {', '.join(where[:4])}")
        return 0
    errors: list[str] = []
    modules = {module_of(p) for p in SRC.rglob("*.rs")} - {"lib", "main"}
    for module in sorted(modules - set(layers)):
        errors.append(f"src/{module}: not in any layer; add it to LAYERS in tools/layers.py")
    used_exceptions: set[tuple[str, str]] = set()
    excepted = {(f, t) for f, t, _ in EXCEPTIONS}
    for (source, target), where in sorted(found.items()):
        if target not in layers:
            errors.append(f"`crate::{target}` ({', '.join(where)}): not a module in any layer")
            continue
        if source not in layers or layers[target] <= layers[source]:
            continue
        for place in where:
            file = place.rsplit(":", 1)[0]
            if (file, target) in excepted:
                used_exceptions.add((file, target))
                continue
            errors.append(
                f"src/{place}: `{source}` (layer {layers[source]}: {LAYERS[layers[source]][0]}) uses `{target}`, "
                f"a layer above it (layer {layers[target]}: {LAYERS[layers[target]][0]})"
            )
    for cycle in cycles(found):
        pairs = [f"{a} -> {b} ({found[(a, b)][0]})" for a in cycle for b in cycle if (a, b) in found]
        errors.append(f"module cycle {' <-> '.join(cycle)}: {'; '.join(pairs)}; break it (move the shared item down)")
    for file, target in sorted(excepted - used_exceptions):
        errors.append(f"exception (src/{file} -> {target}) no longer occurs: remove it from EXCEPTIONS")
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if errors:
        print(f"{len(errors)} layering error(s); the layers are defined in tools/layers.py", file=sys.stderr)
        return 1
    print(f"layers: {len(found)} module edges, none up a layer, no cycle ({len(EXCEPTIONS)} listed exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
