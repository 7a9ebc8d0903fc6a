"""Red team for the coding grader: submissions that attack the grading machinery instead of
solving the task. Each attack wraps the same wrong `add` (a - b), whose honest score on the
cases below is 2/4 (it gets add(0, 0) and the TypeError case right). No attack may score
above that, and the two reproductions of issue 11 must score 0."""

import json

import pytest

from jaxtom.ctom import _sandbox_runner as codec
from jaxtom.ctom.sandbox import SandboxLimits, SubmissionDied, run_tests

TESTS = """
import unittest
class TestAdd(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(1, 2), 3)
    def test_zero(self):
        self.assertEqual(add(0, 0), 0)
    def test_larger(self):
        self.assertEqual(add(2, 5), 7)
    def test_bad_type(self):
        with self.assertRaises(Exception):
            add(None, 1)
"""

WRONG = "def add(a, b):\n    return a - b\n"
LIMITS = SandboxLimits(timeout_s=8.0, memory_mb=512)


def score(code: str) -> float:
    return run_tests(code, TESTS, LIMITS, entry_point="add").score


@pytest.fixture(scope="module")
def honest() -> float:
    value = score(WRONG)
    assert value == 2 / 4  # passed / total, exact
    return value


# the record format a forger would copy: a claim that add returned the right value
FORGED_RECORD = codec.RESULT_MARK + json.dumps({"status": "returned", "value": ["int", "3"],
                                                "tampering": []})

ATTACKS = {
    # issue 11, reproduction 1: neuter the assertion the tests use
    "patch_assertEqual": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
                         + WRONG,
    # issue 11, reproduction 2: forge the old runner's nonce-stamped result line and leave
    "forge_nonce_line_and_exit": WRONG + """
import __main__, json, os, sys
nonce = getattr(__main__, "NONCE", "x")
sys.__stdout__.write("\\n" + nonce + " " + json.dumps({"total": 4, "passed": 4, "error": None}) + "\\n")
sys.__stdout__.flush()
os._exit(0)
""",
    "early_os_exit": "import os\nos._exit(0)\n" + WRONG,
    "sys_exit_in_call": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "raise_keyboardinterrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "patch_builtins": WRONG + """
import builtins
builtins.isinstance = lambda *a: True
builtins.len = lambda *a: 0
builtins.print = lambda *a, **k: None
""",
    "fake_unittest_in_sys_modules": WRONG + """
import sys, types
fake = types.ModuleType("unittest")
class TestCase:
    def __getattr__(self, name):
        return lambda *a, **k: None
fake.TestCase = TestCase
sys.modules["unittest"] = fake
""",
    "patch_loader_and_result": WRONG + """
import unittest
unittest.TestLoader.loadTestsFromTestCase = lambda self, cls: unittest.TestSuite()
unittest.TestResult.wasSuccessful = lambda self: True
unittest.TextTestRunner.run = lambda self, suite: unittest.TestResult()
""",
    # reads the tests file (where the old runner put it) to special-case the inputs
    "read_tests_file": """
import os, re
def add(a, b):
    for path in ("tests.py", "../tests.py", os.path.expanduser("~/tests.py")):
        try:
            src = open(path).read()
        except OSError:
            continue
        m = re.search(r"add\\(%r, %r\\), (\\d+)" % (a, b), src)
        if m:
            return int(m.group(1))
    return a - b
""",
    "always_equal_object": """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__
def add(a, b):
    return Anything()
""",
    "int_subclass_always_equal": """
class Sly(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def add(a, b):
    return Sly(a - b)
""",
    "monkeypatch_print_to_forge": WRONG + """
import builtins, sys
_real = builtins.print
def print(*a, **k):
    _real(%r, file=sys.__stdout__)
builtins.print = print
print("anything")
""" % FORGED_RECORD,
    "write_fd1_then_exit": """
import os
def add(a, b):
    os.write(1, (%r + "\\n").encode())
    os._exit(0)
""" % ("\n" + FORGED_RECORD),
    "forge_record_after_return": """
import atexit, os, threading, time
def add(a, b):
    def late():
        time.sleep(0.05)
        os.write(1, (%r + "\\n").encode())
    threading.Thread(target=late, daemon=True).start()
    atexit.register(lambda: os.write(1, %r))
    return a - b
""" % ("\n" + FORGED_RECORD, ("\n" + FORGED_RECORD + "\n").encode()),
    "patch_json_encoder": WRONG + """
import json
_dumps = json.dumps
json.dumps = lambda obj, *a, **k: _dumps({"status": "returned", "value": ["int", "3"],
                                          "tampering": []})
""",
    "gc_walk_for_grader_frames": WRONG + """
import gc, sys
for obj in gc.get_objects():
    if isinstance(obj, dict) and "RESULT_MARK" in obj:
        obj["RESULT_MARK"] = "x"
    if type(obj).__name__ == "TestResult":
        obj.failures.clear()
""",
    "sleep_forever": "import time\ndef add(a, b):\n    time.sleep(3600)\n",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_attack_scores_above_the_honest_result(name, honest):
    result = run_tests(ATTACKS[name], TESTS, LIMITS, entry_point="add")
    print(f"{name}: {result.score:.2f} ({result.passed}/{result.total}) {result.error}")
    assert result.total == 4
    assert result.score <= honest


@pytest.mark.parametrize("name", ["patch_assertEqual", "forge_nonce_line_and_exit"])
def test_issue_reproductions_score_zero(name):
    result = run_tests(ATTACKS[name], TESTS, LIMITS, entry_point="add")
    assert result.score == 0.0, result


def test_correct_code_still_scores_full():
    assert score("def add(a, b):\n    return a + b\n") == 1.0


def test_a_visible_but_harmless_tamper_is_reported():
    code = "import unittest\nunittest.TestCase.maxDiff = 1\n" + WRONG
    result = run_tests(code, TESTS, LIMITS, entry_point="add")
    assert result.score == 0.0 and "tampering detected" in result.error
    assert "TestCase" in result.error


def test_importing_unittest_alone_is_not_tampering():
    # scipy.stats and matplotlib.pyplot import unittest: honest code must not lose for it
    code = "import unittest, unittest.mock\ndef add(a, b):\n    return a + b\n"
    assert score(code) == 1.0


def test_arguments_that_cannot_cross_are_an_error_and_strings_are_not_confused():
    tests = """
import unittest
class T(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(f("opaque", ["opaque"]), "opaque1")
    def test_object(self):
        self.assertEqual(f(object(), []), None)
"""
    code = "def f(s, xs):\n    return s + str(len(xs))\n"
    r = run_tests(code, tests, LIMITS, entry_point="f")
    assert (r.passed, r.total) == (1, 2)


def test_exceptions_cross_as_their_builtin_class():
    tests = """
import unittest
class T(unittest.TestCase):
    def test_value_error(self):
        with self.assertRaises(ValueError):
            f(-1)
    def test_subclass_keeps_its_base(self):
        with self.assertRaises(LookupError):
            f(0)
    def test_returns(self):
        self.assertEqual(f(2), {"x": [1.5, (2, None)], "n": float("inf")})
"""
    code = """
class Missing(KeyError):
    pass
def f(n):
    if n < 0:
        raise ValueError("negative")
    if n == 0:
        raise Missing("zero")
    return {"x": [1.5, (2, None)], "n": float("inf")}
"""
    r = run_tests(code, tests, LIMITS, entry_point="f")
    assert (r.passed, r.total) == (3, 3), r


def test_codec_round_trips_plain_data_and_refuses_objects():
    np = pytest.importorskip("numpy")
    value = {"a": [1, 2.5, float("nan"), 10 ** 40], ("t", 1): {3, 4}, "b": b"\x00\xff",
             "c": complex(1, -2), "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
             "s": np.float32(0.5), "r": range(1, 9, 2)}
    back = codec.decode(json.loads(json.dumps(codec.encode(value))))
    assert back["a"][:2] == [1, 2.5] and back["a"][2] != back["a"][2] and back["a"][3] == 10 ** 40
    assert back[("t", 1)] == {3, 4} and back["b"] == b"\x00\xff" and back["c"] == complex(1, -2)
    assert back["arr"].dtype == np.int32 and back["arr"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["s"] == np.float32(0.5) and back["r"] == range(1, 9, 2)
    opaque = codec.decode(codec.encode(object()))
    assert opaque != opaque and not (opaque == 1)
    with pytest.raises(ValueError):
        codec.decode(["eval", "__import__('os')"])


def test_submission_died_is_not_an_exception():
    # why it is a BaseException: assertRaises(Exception) must not count a dead call as a pass
    assert not issubclass(SubmissionDied, Exception)
