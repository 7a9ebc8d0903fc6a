"""The code sandbox against hostile submissions: each ends within its limits, scores 0 and
leaves the host untouched. Both isolation levels are exercised where available."""

import os
import socket
import time

import pytest

from jaxtom.ctom.sandbox import SandboxLimits, namespace_command, run_tests, score_coding

TESTS = """
import unittest
class TestCases(unittest.TestCase):
    def test_runs(self):
        self.assertEqual(task_func(), 1)
    def test_again(self):
        self.assertEqual(task_func(), 1)
"""

MODES = ["process"] + (["namespaces"] if namespace_command() else [])
FAST = SandboxLimits(timeout_s=4.0, memory_mb=512)


def _leftovers(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def test_good_code_scores_fraction_passed():
    code = "def task_func():\n    return 1\n"
    r = run_tests(code, TESTS + "    def test_fail(self):\n        self.assertEqual(task_func(), 2)\n")
    assert (r.passed, r.total) == (2, 3) and r.score == 2 / 3  # passed / total, one division
    assert score_coding("", TESTS) == 0.0
    assert run_tests("def task_func(:\n", TESTS).score == 0.0  # syntax error
    assert run_tests("def task_func():\n    return 1\n", "x = 1\n").error == "no unittest cases found"


def test_printing_a_fake_result_line_does_not_count():
    code = 'print("\\ndeadbeef {\\"total\\": 1, \\"passed\\": 1, \\"error\\": null}")\ndef task_func():\n    return 0\n'
    assert run_tests(code, TESTS).score == 0.0


# a run must come back within its timeout; the slack absorbs a loaded 2-core CI machine (a
# fork bomb took 16 s there with 4 s allowed), while a missing timeout would never return
SLACK_S = 30


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(mode):
    start = time.monotonic()
    r = run_tests("def task_func():\n    while True:\n        pass\n", TESTS, FAST, isolation=mode)
    assert r.score == 0.0 and "timed out" in r.error
    assert time.monotonic() - start < FAST.timeout_s + SLACK_S
    assert not _leftovers("jaxtom-sandbox-")


@pytest.mark.parametrize("mode", MODES)
def test_memory_bomb_fails_cleanly(mode):
    code = "def task_func():\n    x = bytearray(8 * 2**30)\n    return 1\n"
    start = time.monotonic()
    r = run_tests(code, TESTS, FAST, isolation=mode)
    assert r.score == 0.0 and r.total == 2
    assert time.monotonic() - start < FAST.timeout_s + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_is_bounded_and_cleaned_up(mode):
    code = "import os\ndef task_func():\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n"
    before = len(os.listdir("/proc"))
    start = time.monotonic()
    r = run_tests(code, TESTS, FAST, isolation=mode)
    assert r.score == 0.0
    assert time.monotonic() - start < FAST.timeout_s + SLACK_S
    time.sleep(0.5)
    assert not _leftovers("jaxtom-sandbox-")
    assert len(os.listdir("/proc")) < before + 10


@pytest.mark.parametrize("mode", MODES)
def test_writes_outside_temp_dir_are_refused(mode, tmp_path):
    target = tmp_path / "escaped.txt"
    code = f"""
import os, shutil
def task_func():
    for attempt in (lambda: open({str(target)!r}, "w").write("x"),
                    lambda: os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT),
                    lambda: shutil.copyfile("solution.py", {str(target)!r}),
                    lambda: os.remove({str(tmp_path / 'keep.txt')!r})):
        try:
            attempt()
        except Exception:
            pass
    open("inside.txt", "w").write("fine")  # its own temp dir is writable
    return 1 if not os.path.exists({str(target)!r}) else 0
"""
    (tmp_path / "keep.txt").write_text("keep")
    r = run_tests(code, TESTS, FAST, isolation=mode)
    assert not target.exists() and (tmp_path / "keep.txt").read_text() == "keep"
    assert r.score == 1.0  # the code ran, its escape attempts failed, the tests saw that


@pytest.mark.skipif("namespaces" not in MODES, reason="unshare not available here")
def test_namespaces_stop_writes_that_bypass_python(tmp_path):
    target = tmp_path / "raw.txt"
    code = f"""
import ctypes
def task_func():
    libc = ctypes.CDLL(None)
    fd = libc.open({str(target).encode()!r}, 0o101, 0o644)  # O_WRONLY | O_CREAT
    return 1 if fd < 0 else 0
"""
    r = run_tests(code, TESTS, FAST, isolation="namespaces")
    assert not target.exists() and r.score == 1.0


@pytest.mark.parametrize("mode", MODES)
def test_network_is_unreachable(mode):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = f"""
import socket
def task_func():
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    s.sendall(b"leak")
    return 1
"""
    r = run_tests(code, TESTS, FAST, isolation=mode)
    server.setblocking(False)
    with pytest.raises(BlockingIOError):  # no connection ever reached the backlog
        server.accept()
    server.close()
    assert r.score == 0.0


def test_every_builtin_coding_reference_passes_and_a_stub_does_not():
    # the grader's value codec must carry every argument and return value of the task set
    from jaxtom.ctom.data import builtin_tasks
    stub = "def task_func(*args, **kwargs):\n    return None\n"
    for task in builtin_tasks("coding"):
        r = run_tests(task.reference, task.tests)
        assert r.score == 1.0 and r.total >= 2, (task.id, r)
        assert run_tests(stub, task.tests).score < 1.0, task.id
