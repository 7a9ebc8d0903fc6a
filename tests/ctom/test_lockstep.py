"""The lockstep helpers of multi-process CToM rollouts, on 2 real jax.distributed processes
(gloo on 127.0.0.1, no model): host results computed once and shared, an error on one
process raised on both (no deadlock), simulator seeds as on one process, and each process's
block of the step's batch, which put back together is the single process's padded batch."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tests.simulated import MULTIHOST_PREAMBLE

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = MULTIHOST_PREAMBLE + textwrap.dedent("""
    import json
    from jaxtom.ctom import lockstep
    from jaxtom.rl.batch import pack_sequences

    me = jax.process_index()
    out = {"gathered": lockstep.allgather_objects({"p": me, "blob": "x" * (1000 * me + 3)})}
    out["gathered"] = [(g["p"], len(g["blob"])) for g in out["gathered"]]
    seen = []

    def square(share):
        seen.extend(share)
        return [x * x for x in share]

    out["squares"] = lockstep.shared_map(square, list(range(7)))
    out["computed_here"] = seen

    def failing(share):
        if nproc > 1 and me == 1 and share:
            raise ValueError("sandbox timed out")
        return list(share)

    try:
        lockstep.shared_map(failing, list(range(4)))
        out["error"] = None
    except RuntimeError as err:
        out["error"] = str(err)

    class Echo:
        def reply(self, requests, seed=0):
            return [f"{seed + i}:{r}" for i, r in enumerate(requests)]

    out["replies"] = lockstep.shared_simulator(Echo()).reply(list("abcde"), seed=10)
    tasks = [{"row": r, "task": f"t{r}"} for r in range(4)]
    lo, hi = lockstep.share_bounds(4)
    out["tasks"] = [t["task"] for t in lockstep.global_tasks(tasks[lo:hi][::-1])]
    seqs = [[1 + i] * (3 + i) for i in range(6)]
    batch = pack_sequences(seqs, [[1.0] * len(s) for s in seqs], [0.5] * 6, list(range(6)),
                           num_rows=6, row_len=10)
    mine = lockstep.process_rows(batch, lambda rows: -(-rows // 4) * 4)
    out["rows"] = np.asarray(mine.tokens).tolist()
    print("RESULT " + json.dumps(out), flush=True)
""")


def _run(nproc: int, tmp_path: Path) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(nproc), str(i), str(port),
                               str(tmp_path / f"out{nproc}")], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nproc)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        line = next(l for l in out.splitlines() if l.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT "):]))
    return results


def test_shared_host_work_and_process_rows(tmp_path):
    one, = _run(1, tmp_path)
    two = _run(2, tmp_path)
    assert one["gathered"] == [[0, 3]]
    assert [r["gathered"] for r in two] == [[[0, 3], [1, 1003]]] * 2
    for r in [one] + two:
        assert r["squares"] == [x * x for x in range(7)]
        assert r["replies"] == one["replies"] == [f"{10 + i}:{c}" for i, c in enumerate("abcde")]
        assert r["tasks"] == ["t0", "t1", "t2", "t3"]
    # each item computed by exactly one process
    assert sorted(two[0]["computed_here"] + two[1]["computed_here"]) == list(range(7))
    assert two[0]["computed_here"] and two[1]["computed_here"]
    assert one["error"] is None
    assert all("process 1: ValueError: sandbox timed out" in r["error"] for r in two)
    # the blocks put back in process order are the single process's rows, padded to 4
    assert len(one["rows"]) == 8 and two[0]["rows"] + two[1]["rows"] == one["rows"]
    assert np.asarray(one["rows"])[6:].sum() == 0
