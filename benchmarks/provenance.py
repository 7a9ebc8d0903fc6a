"""What every benchmark's JSON line carries beside its figures: library versions, the commit,
the machine and its load before and after, so a figure can be read against the run behind it.

    from provenance import Run
    record = Run("reward")            # reads versions, commit, CPU and the load at start
    ...                            # measure
    record.emit(result, save=args.save)   # adds the end load, prints one JSON line, may save it

`--save` writes the same JSON to `benchmarks/results/<name>-<UTC time>.json`: the raw record
behind a table in `benchmarks/README.md`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "tokenizers", "transformers", "torch",
            "google-tunix")


def versions(packages=PACKAGES) -> dict[str, str | None]:
    """Installed versions by distribution name; None where a package is not installed."""
    out = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _git(*args: str) -> str:
    repo = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def cpu_model() -> str:
    """`lscpu`'s model name, else /proc/cpuinfo's, else what `platform` knows."""
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10)
        for line in done.stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """Versions, commit (and whether the library or configs differ from it), CPU and load."""
    dirty = _git("status", "--porcelain", "--", "jaxtom", "configs", "benchmarks")
    return {"versions": versions(), "python": platform.python_version(),
            "commit": _git("rev-parse", "HEAD"), "dirty": bool(dirty),
            "cpu": cpu_model(), "cores": os.cpu_count(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_start": load()}


class Run:
    """One benchmark run: its provenance is read when it starts and closed when it emits."""

    def __init__(self, name: str):
        self.name = name
        self.provenance = machine()

    def emit(self, result: dict, save: bool = False) -> dict:
        """Adds the provenance (with the end load) to `result`, prints it as one JSON line and,
        with `save`, writes it under benchmarks/results/."""
        out = dict(result)
        out["benchmark"] = self.name
        out["provenance"] = dict(self.provenance, load_end=load())
        line = json.dumps(out, default=float)
        if save:
            RESULTS.mkdir(exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            (RESULTS / f"{self.name}-{stamp}.json").write_text(line + "\n")
        print(line, flush=True)
        return out
