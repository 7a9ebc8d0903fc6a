"""No import cycle between jaxtom's modules: the graph of module-level imports (a
function-level import is a deliberate lazy edge and not counted) has no strongly connected
component of more than one module. `from pkg import sub` is an edge to the submodule only."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxtom"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        name = ".".join(f.relative_to(ROOT.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, f in mods.items():
        deps = set()
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & mods.keys()
                deps |= subs if len(subs) == len(node.names) else subs | {node.module}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


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


def test_cycle_finder_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_jaxtom():
    graph = import_graph()
    assert "jaxtom.mindzero.trainer" in graph and graph["jaxtom.mindzero.trainer"]
    assert cycles(graph) == []
