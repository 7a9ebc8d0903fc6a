"""Scores submitted Python against unittest cases, with the verdict out of the code's reach.

Design (CToM appendix A.2: the score is the fraction of unit tests passed):
  * the unittest cases run HERE, in the grading process, which never loads submitted code;
    their call to the entry point (`task_func`) is a proxy that sends the call's arguments to
    a fresh worker process (`_sandbox_runner.py`), one per call, which loads the submission,
    makes that one call and reports the returned value or the raised exception's class;
  * the value crosses the boundary as tagged JSON decoded into plain data (numbers, strings,
    containers, NumPy arrays); anything else arrives as an `Opaque` that equals nothing. The
    assertion (`assertEqual`, `assertRaises`, ...) is then evaluated by the grader's own,
    unpatched unittest on that plain data;
  * a worker that exits without a record (`os._exit`, `sys.exit`, a signal, a timeout, the
    memory limit), fails to load, or visibly tampers (patches unittest, replaces builtins or
    loaded modules) fails that call with `SubmissionDied`, a BaseException that unittest
    records as an error and `assertRaises(Exception)` does not swallow.

What this rules out, by construction: patching `unittest` / the loader / the runner / the
result (the submission's process holds none of the grader's), forged result lines and early
exits (the only thing a record can say is "returned V" or "raised E", which honest code can
say too, so forging it is never stronger than returning V), values whose `__eq__` is always
true (they cannot cross as such), patched `print`/`builtins`/`sys.modules`/fd 1 (they act
on the worker alone), reading the tests file (it is not in the worker's work dir and the
expected values never leave the grader).
What it only detects: visible tampering in the worker (reported by the worker itself, so a
submission can hide it; hiding it leaves the tampering inert, which is what matters).
The tests themselves are trusted (they come from the task data) and run in this process.
What it cannot stop: code that finds the expected answers elsewhere on a readable file
system (the task data set itself is readable; namespaces make the host read-only, not
invisible), code that keeps state between calls on disk is cut off only because each call
gets a fresh work dir; in "process" isolation (no namespaces), C-level calls through
`ctypes` bypass the audit hook (for example to signal the grader), so use namespaces
wherever the host allows them. Tests must pass the entry point arguments the codec can carry
(plain data and NumPy arrays); module mocks in the tests do not reach the worker.

Isolation layers of each worker, tested in tests/ctom/test_sandbox.py:
  * namespaces (when `unshare` works here): a new network namespace (no interfaces but a
    down loopback), a pid namespace (the run cannot see or signal host processes and dies
    whole), a mount namespace where everything but the temp dir is read-only and /dev
    holds only null/zero/random/urandom; all capabilities dropped before user code runs;
  * resource limits: address space, CPU seconds, processes, file size (which also bounds
    the worker's output), open files, no core;
  * a wall-clock budget for the whole test run that kills each worker's process group;
  * a stripped environment, a fresh temp dir as cwd and HOME, and an audit hook in the
    worker refusing sockets, exec/spawn, signals to other processes and writes outside the
    temp dir.
Score = passed / total tests; a run with no tests scores 0.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from jaxtom.ctom import _sandbox_runner as codec

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
        import resource  # inside the sandboxed child only (POSIX limits)
        mem = limits.memory_mb * 2 ** 20
        cpu = int(limits.timeout_s) + 1
        for lim, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu),
                           (resource.RLIMIT_NPROC, nproc),
                           (resource.RLIMIT_FSIZE, limits.max_file_mb * 2 ** 20),
                           (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(lim, (value, value))
    return apply


class SubmissionDied(BaseException):
    """A call into the submission ended without an honest outcome (see the module docstring).

    A BaseException so that `assertRaises(Exception)` in a test cannot count it as a pass.
    """


def _raise_decoded(mro: list[str], message: str):
    """Re-raises the worker's exception as its nearest builtin Exception class."""
    import builtins  # inside the sandboxed child only
    base = Exception
    for name in mro:
        cls = getattr(builtins, str(name), None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            base = cls
            break
    name = str(mro[0]) if mro else "Exception"
    cls = base if base.__name__ == name else type(name, (base,), {})
    try:
        exc = cls(message)
    except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs five arguments
        exc = type(name, (Exception,), {})(message)
    raise exc


def _has_opaque(tree) -> bool:
    """Whether an encoded value holds an object the codec could not carry."""
    if not isinstance(tree, list):
        return False
    if tree and tree[0] == "opaque":
        return True
    return any(_has_opaque(x) for x in tree)


class _Grader:
    """Runs one submission's calls, each in a fresh worker; remembers the first failure."""

    def __init__(self, code: str, entry_point: str, limits: SandboxLimits, prefix, mode: str):
        self.code, self.entry_point, self.limits = code or "", entry_point, limits
        self.prefix, self.mode = prefix, mode
        self.deadline = time.monotonic() + limits.timeout_s
        self.nproc = _user_process_count() + limits.max_processes
        self.error: str | None = None
        self.load_error: str | None = None
        self.calls = 0

    def _fail(self, why: str):
        self.error = self.error or why
        raise SubmissionDied(why)

    def __call__(self, *args, **kwargs):
        if self.load_error:
            raise SubmissionDied(self.load_error)
        try:
            call = {"entry_point": self.entry_point, "args": codec.encode(list(args)),
                    "kwargs": codec.encode(dict(kwargs))}
            payload = json.dumps(call)
        except (TypeError, ValueError) as e:
            raise TypeError(f"sandbox: the test passes arguments that cannot cross to the "
                            f"worker: {e}") from None
        if _has_opaque(call["args"]) or _has_opaque(call["kwargs"]):
            raise TypeError("sandbox: the test passes an argument the value codec cannot carry")
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self._fail(f"timed out after {self.limits.timeout_s} s")
        self.calls += 1
        record, why = self._run_worker(payload, remaining)
        if record is None:
            self._fail(why)
        if record.get("tampering"):
            self._fail(f"tampering detected: {'; '.join(map(str, record['tampering']))}"[:300])
        status = record.get("status")
        if status == "load_error":
            self.load_error = f"solution failed to load: {record.get('error')}"
            self._fail(self.load_error)
        if status == "raised":
            _raise_decoded(list(record.get("mro") or []), str(record.get("message", "")))
        if status == "returned":
            try:
                return codec.decode(record["value"])
            except (KeyError, ValueError, TypeError, RecursionError, ImportError) as e:
                self._fail(f"malformed result: {e}"[:300])
        self._fail(f"malformed result status {status!r}")

    def _run_worker(self, payload: str, timeout: float) -> tuple[dict | None, str]:
        with tempfile.TemporaryDirectory(prefix="jaxtom-sandbox-") as work, \
                tempfile.TemporaryFile() as out:
            work = os.path.realpath(work)
            Path(work, "solution.py").write_text(self.code)
            Path(work, "call.json").write_text(payload)
            env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
                   "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "JAXTOM_SANDBOX_MODE": self.mode}
            runner = str(_HERE / "_sandbox_runner.py")
            lim = self.limits
            if self.prefix:
                if "--map-root-user" in self.prefix:
                    env["JAXTOM_SANDBOX_USERNS"] = "1"
                cmd = [*self.prefix, sys.executable, "-I", str(_HERE / "_sandbox_init.py"), work,
                       str(lim.memory_mb * 2 ** 20), str(int(lim.timeout_s) + 1), str(self.nproc),
                       str(lim.max_file_mb * 2 ** 20), runner]
                preexec = None
            else:
                cmd = [sys.executable, "-I", runner, work]
                preexec = _limits_preexec(lim, self.nproc)
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    preexec_fn=preexec)
            try:
                _, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return None, f"timed out after {lim.timeout_s} s"
            finally:
                _kill_group(proc)
            out.seek(0)
            text = out.read().decode(errors="replace")
        for line in reversed(text.splitlines()):
            if line.startswith(codec.RESULT_MARK):
                try:
                    record = json.loads(line[len(codec.RESULT_MARK):])
                except ValueError:
                    return None, "malformed result record"
                return (record, "") if isinstance(record, dict) else (None, "malformed record")
        tail = ((err or b"").decode(errors="replace").strip().splitlines() or
                [f"exit status {proc.returncode}"])[-1][:300]
        return None, f"the call ended without a result: {tail}"


def run_tests(code: str, tests: str, limits: SandboxLimits = SandboxLimits(), *,
              isolation: str = "auto", entry_point: str = "task_func") -> SandboxResult:
    """Runs `tests` (trusted unittest source calling `entry_point`) against `code`.

    The tests execute in this process against a proxy for `entry_point`; the submission runs
    only in workers. isolation: "auto" (namespaces when available), "namespaces" (error if
    unavailable) or "process" (limits + audit hook only).
    """
    if isolation not in ("auto", "namespaces", "process"):
        raise ValueError(f"isolation must be auto/namespaces/process, got {isolation!r}")
    prefix = namespace_command() if isolation in ("auto", "namespaces") else None
    if isolation == "namespaces" and prefix is None:
        raise RuntimeError("namespace isolation requested but `unshare` does not work here")
    mode = "namespaces" if prefix else "process"
    grader = _Grader(code, entry_point, limits, prefix, mode)
    namespace = {"__name__": "jaxtom_sandbox_tests", entry_point: grader}
    try:
        exec(compile(tests or "", "tests.py", "exec"), namespace)
    except Exception as e:  # noqa: BLE001 - broken test source: nothing can be scored
        return SandboxResult(0.0, 0, 0, f"tests failed to load: {type(e).__name__}: {e}"[:300],
                             mode)
    loader, suite = unittest.TestLoader(), unittest.TestSuite()
    for value in list(namespace.values()):
        if isinstance(value, type) and issubclass(value, unittest.TestCase) \
                and value is not unittest.TestCase:
            suite.addTests(loader.loadTestsFromTestCase(value))
    outcome = unittest.TestResult()
    suite.run(outcome)
    total = outcome.testsRun
    if not total:
        return SandboxResult(0.0, 0, 0, "no unittest cases found", mode)
    bad = len(outcome.failures) + len(outcome.errors) + len(outcome.unexpectedSuccesses)
    passed = max(0, total - bad)
    return SandboxResult(passed / total, passed, total, grader.error, mode)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, ValueError):
        pass


def score_coding(code: str | None, tests: str, limits: SandboxLimits = SandboxLimits(), *,
                 entry_point: str = "task_func") -> float:
    """Fraction of unit tests the submitted code passes (0.0 for no code)."""
    if not code or not code.strip():
        return 0.0
    return run_tests(code, tests, limits, entry_point=entry_point).score
