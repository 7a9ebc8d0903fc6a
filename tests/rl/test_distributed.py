"""The rollout helpers in `jaxtom.rl.distributed`: their single-process behaviour, and the
host gathers between 2 real processes (jax.distributed on 127.0.0.1)."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np

from jaxtom.rl import distributed
from tests.rl.common import TINY, tiny_model
from tests.simulated import MULTIHOST_PREAMBLE


def test_rows_per_call_does_not_change_the_samples():
    """Each row draws from its own key, so sampling in calls of 3 rows gives the tokens of
    one call over all 8 (what `trainer.rollout_rows` relies on to bound prefill memory)."""
    model = tiny_model(seed=3)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, TINY.vocab_size, n).tolist() for n in (3, 5, 2, 7, 4, 4, 6, 1)]
    rows = np.arange(10, 18)
    kw = dict(key=jax.random.key(7), max_new_tokens=6, temperature=1.0)
    whole = distributed.generate_rows(model, prompts, rows, **kw)
    split = distributed.generate_rows(model, prompts, rows, rows_per_call=3, **kw)
    assert split == whole and len(whole) == 8
    other = distributed.generate_rows(model, prompts, rows + 1, **kw)
    assert other != whole  # the row ids matter: the test can fail


def test_single_process_helpers_are_local():
    assert distributed.max_over_processes(5) == 5
    assert distributed.weighted_mean({"a": 2.0}, 3) == {"a": 2.0}
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.gather_token_lists([[1, 2], [3]]) == [[[1, 2], [3]]]
    calls = distributed.call_slices([5, 2], rows_per_call=2)
    assert calls == [[slice(0, 2), slice(0, 2)], [slice(2, 4), slice(2, 2)],
                     [slice(4, 5), slice(2, 2)]]


GATHERS = MULTIHOST_PREAMBLE + textwrap.dedent("""
    import json, logging, pickle
    from jaxtom.rl import distributed

    compiles, sizes = [], set()

    class Log(logging.Handler):
        def emit(self, record):
            if record.getMessage().startswith("Compiling jit(_identity_fn)"):
                compiles.append(record.getMessage())
    logging.getLogger("jax").addHandler(Log())
    jax.config.update("jax_log_compiles", True)
    for n in range(1, 41):  # every round gathers records of other sizes
        mine = list(range(n * (pid + 1)))
        assert distributed.gather_objects(mine) == [list(range(n * (p + 1)))
                                                    for p in range(nproc)]
        lists = [[pid + 1] * (n + i) for i in range(n % 5 + pid)]
        got = distributed.gather_token_lists(lists)
        assert got == [[[p + 1] * (n + i) for i in range(n % 5 + p)] for p in range(nproc)]
        sizes |= {len(pickle.dumps(mine)), len(pickle.dumps(lists))}
    big = list(range(30000 + pid))  # more than one chunk
    assert distributed.gather_objects(big) == [list(range(30000 + p)) for p in range(nproc)]
    sizes.add(len(pickle.dumps(big)))
    print("RESULT", json.dumps({"compiles": len(compiles), "sizes": len(sizes),
                                "chunks": -(-max(sizes) // distributed.GATHER_CHUNK)}))
""")


def test_host_gathers_compile_one_program_whatever_the_sizes(tmp_path):
    """Two processes gather pickled records and token lists of new sizes in each of 40
    rounds, and one record larger than a chunk: they come back exact, and the gathers
    compile two programs (the sizes', the chunk's), not one per size."""
    root = Path(__file__).resolve().parents[2]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(root),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    procs = [subprocess.Popen([sys.executable, "-c", GATHERS, "2", str(i), str(port),
                               str(tmp_path / "unused.npy")], env=env, cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    line = next(x for x in outs[0][0].splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert result["sizes"] > 40 and result["chunks"] > 1, result
    assert result["compiles"] == 2, result
