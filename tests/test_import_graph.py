"""jaxtom's import graph: every import of a jaxtom module counts, at module level or inside a
function, absolute or relative. It has no cycle, and no arrow runs from a lower layer to a
higher one:

    base < models < sampling < rl (the trainer, the config) < papers < tools < commands

with the environments (`gridworld`, `household`) beside the models, importing only base
modules and each other's nothing, and the two papers (`mindzero`, `ctom`) side by side, neither
importing the other. `from pkg import name` is an edge to the submodule `pkg.name` when that
is a module, else to `pkg` itself. Both checks are shown to fail on a planted violation."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxtom"

# the layer of each top-level module or package of jaxtom (lower numbers sit lower)
LAYERS = {
    "errors": 0, "storage": 0, "http_client": 0, "buckets": 0, "tokenizer": 0, "parallel": 0,
    "eval": 0,
    "models": 1, "gridworld": 1, "household": 1,
    "sampling": 2,
    "rl": 3, "config": 3, "flops": 3, "plan_shapes": 3,
    "mindzero": 4, "ctom": 4,
    "plan": 5, "plan_rollout": 5, "preflight": 5,
    "commands": 6, "cli": 6, "__main__": 6, "jaxtom": 6,
}
ENVIRONMENTS = {"gridworld", "household"}
PAPERS = {"mindzero", "ctom"}


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    out = {}
    for f in root.rglob("*.py"):
        name = ".".join(f.relative_to(root.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(source: str, importer: str, modules, is_package: bool = False) -> set[str]:
    """Every jaxtom module `source` imports, wherever the import statement stands."""
    deps = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            deps |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, importer, is_package)
            subs = {f"{module}.{a.name}" for a in node.names} & modules
            deps |= subs if len(subs) == len(node.names) else subs | {module}
    return {d for d in deps if d in modules and d != importer}


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imports_of(f.read_text(), name, files.keys(), f.name == "__init__.py")
            for name, f in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def area(module: str) -> str:
    """The top-level module or package of jaxtom a module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "jaxtom"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for importer, deps in sorted(graph.items()):
        a = area(importer)
        for dep in sorted(deps):
            b = area(dep)
            if a == b:
                continue
            why = None
            if LAYERS[b] > LAYERS[a]:
                why = "imports a higher layer"
            elif a in PAPERS and b in PAPERS:
                why = "one paper imports the other"
            elif a in ENVIRONMENTS and LAYERS[b] != 0:
                why = "an environment imports beyond the base modules"
            if why:
                bad.append(f"{importer} -> {dep}: {why}")
    return bad


def test_every_module_has_a_layer():
    assert {area(m) for m in module_files()} <= LAYERS.keys()


def test_counts_function_level_and_relative_imports():
    modules = {"jaxtom.a", "jaxtom.b", "jaxtom.c", "jaxtom.pkg", "jaxtom.pkg.d"}
    source = "def f():\n    from jaxtom import b\n    from . import c\n    from .pkg import d\n"
    assert imports_of(source, "jaxtom.a", modules) == {"jaxtom.b", "jaxtom.c", "jaxtom.pkg.d"}


def test_cycle_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_jaxtom():
    graph = import_graph()
    assert graph["jaxtom.mindzero.driver"] and graph["jaxtom.commands.train"]
    assert cycles(graph) == []


def test_no_import_runs_up_the_layers():
    assert layer_violations(import_graph()) == []


def test_planted_violations_fail(tmp_path):
    """A copy of the package with a function-level import from the models up to the
    trainer, one from CToM into MindZero and one from the gridworld into the sampler fails
    both checks; the unplanted copy passes them."""
    import shutil
    copy = tmp_path / "jaxtom"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    assert cycles(import_graph(copy)) == [] and layer_violations(import_graph(copy)) == []
    plant = {"models/attention.py": "from jaxtom.rl import trainer",
             "ctom/tiny.py": "from jaxtom.mindzero import driver",
             "gridworld/text.py": "from jaxtom.sampling import sampler"}
    for path, line in plant.items():
        f = copy / path
        f.write_text(f.read_text() + f"\n\ndef _planted():\n    {line}\n")
    graph = import_graph(copy)
    assert any("jaxtom.models.attention" in c and "jaxtom.rl.trainer" in c
               for c in cycles(graph))
    found = layer_violations(graph)
    assert "jaxtom.models.attention -> jaxtom.rl.trainer: imports a higher layer" in found
    assert "jaxtom.ctom.tiny -> jaxtom.mindzero.driver: one paper imports the other" in found
    assert ("jaxtom.gridworld.text -> jaxtom.sampling.sampler: imports a higher layer"
            in found)
