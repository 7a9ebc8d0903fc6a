"""Worker of the coding grader: loads submitted code, makes ONE call, reports what came back.

`sandbox.py` starts a fresh copy of this script (inside the namespaces of `_sandbox_init.py`
when they work) for every call a test makes to the entry point. The worker never sees the
tests or the expected values: its work dir holds only `solution.py` and `call.json` (the
entry point's name and the call's arguments). It prints one record line,

    JAXTOM-SANDBOX-RESULT {"status": "returned" | "raised" | "load_error", ...}

and exits. The record is not authenticated, and need not be: everything it can carry decodes
(in the parent, with `decode` below) into plain data (numbers, strings, containers, NumPy
arrays) or an exception class name, which is exactly what the submitted code could have
produced by returning or raising honestly. A forged record is therefore no stronger than an
honest return; the comparison with the expected value happens in the parent, out of reach.

The worker also reports tampering it can see (unittest's module or main classes patched,
builtins or already-loaded modules replaced); the parent scores such a call as failed. That check runs
in the submitted code's own process, so it only detects; the design above is what rules the
tampering out.

Before any submitted code runs, an audit hook refuses sockets, process-replacing calls,
signals to other processes and writes outside the work dir (a second layer under the
namespaces, and the only one where namespaces are unavailable).

This module is also imported by the parent for its value codec (`encode`/`decode`), so it
does nothing at import time. Stdlib only. argv: workdir.
"""

import builtins
import io
import json
import os
import sys

import numpy as np

RESULT_MARK = "JAXTOM-SANDBOX-RESULT "
MAX_DEPTH = 64
_NUMPY_KINDS = "biufcUS"  # dtype kinds rebuilt as arrays; anything else stays opaque


# ---------------------------------------------------------------------------------------
# value codec: tagged JSON, exact for floats (hex) and big ints (hex), no code execution
# ---------------------------------------------------------------------------------------

def encode(value, depth: int = 0):
    """A JSON-able tagged tree for `value`; objects of other types become 'opaque'."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if value is None:
        return ["none"]
    if isinstance(value, bool):
        return ["bool", bool(value)]
    if type(value).__module__ == "numpy":
        return _encode_numpy(value, d)
    if isinstance(value, int):
        return ["int", format(int(value), "x")]
    if isinstance(value, float):
        return ["float", float(value).hex()]
    if isinstance(value, complex):
        return ["complex", value.real.hex(), value.imag.hex()]
    if isinstance(value, str):
        return ["str", str(value)]
    if isinstance(value, (bytes, bytearray)):
        return ["bytearray" if isinstance(value, bytearray) else "bytes", bytes(value).hex()]
    if isinstance(value, dict):
        return ["dict", [[encode(k, d), encode(v, d)] for k, v in value.items()]]
    for tag, kind in (("list", list), ("tuple", tuple), ("set", set), ("frozenset", frozenset)):
        if isinstance(value, kind):
            return [tag, [encode(x, d) for x in value]]
    if isinstance(value, range):
        return ["range", value.start, value.stop, value.step]
    try:
        text = repr(value)[:200]
    except Exception:  # noqa: BLE001 - a broken __repr__ is the submission's problem
        text = "<unprintable>"
    return ["opaque", type(value).__qualname__, text]


def _encode_numpy(value, depth):
    kind = getattr(getattr(value, "dtype", None), "kind", "O")
    if hasattr(value, "shape") and hasattr(value, "tolist") and type(value).__name__ == "ndarray":
        if kind in _NUMPY_KINDS:
            return ["ndarray", str(value.dtype), list(value.shape), encode(value.tolist(), depth)]
    elif hasattr(value, "item") and kind in _NUMPY_KINDS:
        return ["npscalar", str(value.dtype), encode(value.item(), depth)]
    return ["opaque", type(value).__qualname__, repr(value)[:200]]


class Opaque:
    """A returned object that cannot cross the process boundary: equal to nothing."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<opaque {self.type_name}: {self.text}>"


def decode(tree, depth: int = 0):
    """Inverse of `encode`; builds only plain data (and NumPy arrays when NumPy is here)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise ValueError(f"malformed value record: {str(tree)[:80]}")
    tag, rest, d = tree[0], tree[1:], depth + 1
    if tag == "none":
        return None
    if tag == "bool":
        return bool(rest[0])
    if tag == "int":
        return int(rest[0], 16)
    if tag == "float":
        return float.fromhex(rest[0])
    if tag == "complex":
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "str":
        return str(rest[0])
    if tag in ("bytes", "bytearray"):
        raw = bytes.fromhex(rest[0])
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "dict":
        return {decode(k, d): decode(v, d) for k, v in rest[0]}
    kinds = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    if tag in kinds:
        return kinds[tag](decode(x, d) for x in rest[0])
    if tag == "range":
        return range(int(rest[0]), int(rest[1]), int(rest[2]))
    if tag == "npscalar":
        dtype = np.dtype(str(rest[0]))
        if dtype.kind not in _NUMPY_KINDS:
            raise ValueError(f"dtype {dtype} not allowed")
        return dtype.type(decode(rest[1], d))
    if tag == "ndarray":
        dtype = np.dtype(str(rest[0]))
        if dtype.kind not in _NUMPY_KINDS:
            raise ValueError(f"dtype {dtype} not allowed")
        return np.array(decode(rest[2], d), dtype=dtype).reshape([int(n) for n in rest[1]])
    if tag == "opaque":
        return Opaque(str(rest[0]), str(rest[1]))
    raise ValueError(f"unknown value tag {tag!r}")


# ---------------------------------------------------------------------------------------
# the worker process
# ---------------------------------------------------------------------------------------

def _make_hook(workdir: str, namespaced: bool):
    allowed = (workdir + os.sep, "/dev/null", "/dev/shm/")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    me = os.getpid()

    def inside(path) -> bool:
        if isinstance(path, int):
            return True
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:  # noqa: BLE001
            return False
        return real == workdir or real.startswith(allowed)

    def hook(event, args):
        if event.startswith("socket.") or event in ("os.exec", "os.posix_spawn", "os.system",
                                                     "subprocess.Popen"):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event in ("os.fork", "os.forkpty") and not namespaced:
            raise PermissionError("sandbox: fork needs the namespace sandbox (process limits "
                                  "alone cannot bound it for a privileged user)")
        if event in ("os.kill", "os.killpg") and args and args[0] not in (0, me):
            raise PermissionError(f"sandbox: {event} to another process is not allowed")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} is not allowed")
        if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
                     "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree",
                     "shutil.move", "shutil.copyfile"):
            paths = [a for a in args if isinstance(a, (str, bytes, os.PathLike))]
            if not all(inside(p) for p in paths):
                raise PermissionError(f"sandbox: {event} outside the work dir is not allowed")
    return hook


_WATCHED = ("TestCase", "TestLoader", "TestResult", "TestSuite", "TextTestRunner",
            "TextTestResult")


def _unittest_snapshot() -> dict:
    """The unittest module's namespace and its main classes' attributes, by identity.

    The worker imports unittest itself before the submission runs (scipy.stats and
    matplotlib.pyplot import it too, so importing it cannot count as tampering); patching
    it afterwards is what the check looks for."""
    import unittest  # inside the sandboxed child only
    snap = {"unittest": dict(vars(unittest))}
    for name in _WATCHED:
        cls = getattr(unittest, name, None)
        if isinstance(cls, type):
            snap[name] = dict(vars(cls))
    return snap


def _changed(before: dict, after: dict) -> list[str]:
    """Names whose value was replaced or deleted (additions, like `unittest.mock` appearing
    on the package after an import, are not tampering)."""
    return sorted(k for k in before if after.get(k, _changed) is not before[k])


def _tampering(builtins_before: dict, modules_before: dict, unittest_before: dict) -> list[str]:
    """What the submitted code visibly changed in the machinery around it (detect only)."""
    found = []
    changed = _changed(builtins_before, dict(vars(builtins)))
    if changed:
        found.append(f"replaced builtins {changed[:5]}")
    swapped = [k for k, v in modules_before.items() if sys.modules.get(k) is not v]
    if swapped:
        found.append(f"replaced loaded modules {sorted(swapped)[:5]}")
    try:
        now = _unittest_snapshot()
    except Exception as e:  # noqa: BLE001 - a broken unittest is itself a sign of tampering
        found.append(f"broke the unittest module ({type(e).__name__})")
    else:
        for name, attrs in unittest_before.items():
            diff = _changed(attrs, now.get(name, {}))
            if diff:
                found.append(f"patched unittest {name}: {diff[:5]}")
    return found


def main():

    workdir = os.path.realpath(sys.argv[1])
    with open(os.path.join(workdir, "solution.py")) as f:
        code = f.read()
    with open(os.path.join(workdir, "call.json")) as f:
        call = json.load(f)
    os.remove(os.path.join(workdir, "call.json"))
    entry = call["entry_point"]
    args, kwargs = decode(call["args"]), decode(call["kwargs"])
    out = sys.stdout
    sys.stdout = io.StringIO()  # the submission's prints stay out of the record stream
    unittest_before = _unittest_snapshot()
    builtins_before = dict(vars(builtins))
    modules_before = dict(sys.modules)
    sys.addaudithook(_make_hook(workdir, os.environ.get("JAXTOM_SANDBOX_MODE") == "namespaces"))
    namespace = {"__name__": "solution"}
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
        fn = namespace.get(entry)
        if not callable(fn):
            raise NameError(f"the submission defines no callable {entry!r}")
    except BaseException as e:  # noqa: BLE001 - any load failure of submitted code scores 0
        record = {"status": "load_error", "error": f"{type(e).__name__}: {e}"[:300]}
    else:
        try:
            record = {"status": "returned", "value": encode(fn(*args, **kwargs))}
        except Exception as e:  # noqa: BLE001 - a raised Exception is a legitimate outcome
            names = [c.__name__ for c in type(e).__mro__]
            record = {"status": "raised", "mro": names, "message": str(e)[:300]}
        # SystemExit / KeyboardInterrupt / GeneratorExit propagate: no record, the call died
    record["tampering"] = _tampering(builtins_before, modules_before, unittest_before)
    out.write("\n" + RESULT_MARK + json.dumps(record) + "\n")
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
