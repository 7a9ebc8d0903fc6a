"""Scores submitted Python against unittest cases in a sandboxed subprocess (appendix A.2).

Layers, each tested in tests/ctom/test_sandbox.py:
  * namespaces (when `unshare` works here): a new network namespace (no interfaces but a
    down loopback), a pid namespace (the run cannot see or signal host processes and dies
    whole), a mount namespace where everything but the temp dir is read-only and /dev
    holds only null/zero/random/urandom; all capabilities dropped before user code runs;
  * resource limits: address space, CPU seconds, processes, file size, open files, no core;
  * a wall-clock timeout that kills the whole process group;
  * a stripped environment, a fresh temp dir as cwd and HOME, and an audit hook in the
    runner refusing sockets, exec/spawn and writes outside the temp dir.
Score = passed / total tests; a timeout, crash, load failure or missing result scores 0.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 20.0  # wall clock for loading the code and running every test
    memory_mb: int = 1024  # RLIMIT_AS of the runner (and each process it forks)
    max_processes: int = 32  # processes beyond those the user already runs
    max_file_mb: int = 16  # RLIMIT_FSIZE


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    score: float
    passed: int
    total: int
    error: str | None
    isolation: str  # "namespaces" or "process"


@functools.cache
def namespace_command() -> tuple[str, ...] | None:
    """The `unshare` prefix that works on this host (root, or an unprivileged user ns)."""
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return None
    base = (exe, "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc")
    candidates = [base] if os.geteuid() == 0 else []
    candidates.append(base[:1] + ("--map-root-user",) + base[1:])
    for cmd in candidates:
        try:
            ok = subprocess.run([*cmd, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return tuple(cmd)
    return None


def _user_process_count() -> int:
    uid, n = os.geteuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += os.stat(f"/proc/{pid}").st_uid == uid
            except OSError:
                pass
    return n


def _limits_preexec(limits: SandboxLimits, nproc: int):
    def apply():
        import resource
        mem = limits.memory_mb * 2 ** 20
        cpu = int(limits.timeout_s) + 1
        for lim, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu),
                           (resource.RLIMIT_NPROC, nproc),
                           (resource.RLIMIT_FSIZE, limits.max_file_mb * 2 ** 20),
                           (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(lim, (value, value))
    return apply


def run_tests(code: str, tests: str, limits: SandboxLimits = SandboxLimits(), *,
              isolation: str = "auto") -> SandboxResult:
    """Runs `tests` (unittest source calling the code's functions) against `code`.

    isolation: "auto" (namespaces when available), "namespaces" (error if unavailable) or
    "process" (limits + audit hook only).
    """
    prefix = namespace_command() if isolation in ("auto", "namespaces") else None
    if isolation == "namespaces" and prefix is None:
        raise RuntimeError("namespace isolation requested but `unshare` does not work here")
    if isolation not in ("auto", "namespaces", "process"):
        raise ValueError(f"isolation must be auto/namespaces/process, got {isolation!r}")
    mode = "namespaces" if prefix else "process"
    nonce = secrets.token_hex(16)
    nproc = _user_process_count() + limits.max_processes
    with tempfile.TemporaryDirectory(prefix="jaxtom-sandbox-") as work:
        work = os.path.realpath(work)
        Path(work, "solution.py").write_text(code or "")
        Path(work, "tests.py").write_text(tests or "")
        env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        env["JAXTOM_SANDBOX_MODE"] = mode
        runner = str(_HERE / "_sandbox_runner.py")
        if prefix:
            if "--map-root-user" in prefix:
                env["JAXTOM_SANDBOX_USERNS"] = "1"
            cmd = [*prefix, sys.executable, "-I", str(_HERE / "_sandbox_init.py"), work,
                   str(limits.memory_mb * 2 ** 20), str(int(limits.timeout_s) + 1), str(nproc),
                   str(limits.max_file_mb * 2 ** 20), runner]
            preexec = None
        else:
            cmd = [sys.executable, "-I", runner, work]
            preexec = _limits_preexec(limits, nproc)
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=preexec)
        try:
            out, err = proc.communicate((nonce + "\n").encode(), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return SandboxResult(0.0, 0, 0, f"timed out after {limits.timeout_s} s", mode)
        finally:
            _kill_group(proc)
    return _parse(out.decode(errors="replace"), err.decode(errors="replace"), nonce, mode)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass


def _parse(out: str, err: str, nonce: str, mode: str) -> SandboxResult:
    for line in reversed(out.splitlines()):
        if line.startswith(nonce + " "):
            data = json.loads(line[len(nonce) + 1:])
            total, passed = int(data["total"]), int(data["passed"])
            score = passed / total if total and data["error"] is None else 0.0
            error = data["error"] or (None if total else "no unittest cases found")
            return SandboxResult(score, passed, total, error, mode)
    tail = (err.strip().splitlines() or ["no output"])[-1][:300]
    return SandboxResult(0.0, 0, 0, f"runner ended without a result: {tail}", mode)


def score_coding(code: str | None, tests: str, limits: SandboxLimits = SandboxLimits()) -> float:
    """Fraction of unit tests the submitted code passes (0.0 for no code)."""
    if not code or not code.strip():
        return 0.0
    return run_tests(code, tests, limits).score
