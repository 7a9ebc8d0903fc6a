"""Every benchmark's JSON line carries its provenance (`benchmarks/provenance.py`): library
versions, the commit, the CPU and its core count, and the load at start and end; `--save`
keeps the raw line under `benchmarks/results/`."""

import ast
import importlib.util
import json
import pathlib

import pytest

_BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
_SPEC = importlib.util.spec_from_file_location("provenance", _BENCH / "provenance.py")
provenance = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(provenance)

# scripts whose last line is their figures' JSON; the ones missing here are libraries the
# scripts import (parity, tunix_peer, numpy_baselines, provenance)
SCRIPTS = sorted(p for p in _BENCH.glob("*.py") if "__main__" in p.read_text())


def test_emit_prints_one_json_line_with_the_provenance(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(provenance, "RESULTS", tmp_path / "results")
    out = provenance.Run("probe").emit({"speedup": 2.0}, save=True)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(line) == out
    prov = out["provenance"]
    assert out["benchmark"] == "probe" and out["speedup"] == 2.0
    assert {"jax", "jaxlib", "flax", "transformers", "torch", "google-tunix"} <= set(
        prov["versions"])
    assert prov["versions"]["jax"]  # installed in the test environment
    assert len(prov["commit"]) == 40 and prov["cpu"] and prov["cores"] >= 1
    assert len(prov["load_start"]) == 3 and len(prov["load_end"]) == 3
    saved = list((tmp_path / "results").glob("probe-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_script_emits_through_provenance(script):
    tree = ast.parse(script.read_text())
    calls = {(n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert calls & {"Run", "machine"}, f"{script.name} reads no provenance"
    assert "--save" in script.read_text(), f"{script.name} has no --save"
