"""Runs submitted code and its unittest cases inside the sandbox; prints one result line.

Before any submitted code runs, an audit hook refuses sockets, process-replacing calls and
writes outside the work dir (a second layer under the namespaces, and the only one where
namespaces are unavailable). The result line carries a nonce read from stdin first, so the
submitted code cannot forge it by printing. argv: workdir. Files: solution.py, tests.py.
"""

import json
import os
import sys

NONCE = sys.stdin.readline().strip()
WORKDIR = os.path.realpath(sys.argv[1])
_ALLOWED = (WORKDIR + os.sep, "/dev/null", "/dev/shm/")
_NAMESPACED = os.environ.get("JAXTOM_SANDBOX_MODE") == "namespaces"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _inside(path) -> bool:
    if isinstance(path, int):
        return True
    try:
        real = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return real == WORKDIR or real.startswith(_ALLOWED)


def _hook(event, args):
    if event.startswith("socket.") or event in ("os.exec", "os.posix_spawn", "os.system",
                                                 "subprocess.Popen"):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event in ("os.fork", "os.forkpty") and not _NAMESPACED:
        raise PermissionError("sandbox: fork needs the namespace sandbox (process limits "
                              "alone cannot bound it for a privileged user)")
    if event == "open" and len(args) >= 3:
        path, mode, flags = args[0], args[1], args[2]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} is not allowed")
    if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                 "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree",
                 "shutil.move", "shutil.copyfile"):
        paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
        if not all(_inside(p) for p in paths):
            raise PermissionError(f"sandbox: {event} outside the work dir is not allowed")


def main():
    import io
    import unittest

    with open(os.path.join(WORKDIR, "solution.py")) as f:
        code = f.read()
    with open(os.path.join(WORKDIR, "tests.py")) as f:
        tests = f.read()
    real_stdout = sys.stdout
    sys.stdout = io.StringIO()
    sys.addaudithook(_hook)
    namespace = {"__name__": "solution"}
    result = {"total": 0, "passed": 0, "error": None}
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as e:  # noqa: BLE001 - any failure of submitted code scores 0
        result["error"] = f"solution failed to load: {type(e).__name__}: {e}"[:500]
    if result["error"] is None:
        try:
            exec(compile(tests, "tests.py", "exec"), namespace)
            loader = unittest.TestLoader()
            suite = unittest.TestSuite()
            for value in list(namespace.values()):
                if isinstance(value, type) and issubclass(value, unittest.TestCase) \
                        and value is not unittest.TestCase:
                    suite.addTests(loader.loadTestsFromTestCase(value))
            outcome = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
            total = outcome.testsRun
            bad = len(outcome.failures) + len(outcome.errors) + len(outcome.unexpectedSuccesses)
            result.update(total=total, passed=max(0, total - bad))
        except BaseException as e:  # noqa: BLE001
            result["error"] = f"tests failed to run: {type(e).__name__}: {e}"[:500]
    real_stdout.write(f"\n{NONCE} {json.dumps(result)}\n")
    real_stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
