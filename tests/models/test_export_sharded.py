"""Exporting a sharded model as Hugging Face files: process 0 alone writes, gathering one
tensor at a time, and the files hold exactly the model's weights (simulated devices)."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.simulated import MULTIHOST_PREAMBLE

ROOT = Path(__file__).resolve().parents[2]

# argv: nproc, pid, port, out (a directory holding src/, the checkpoint to load)
SCRIPT = MULTIHOST_PREAMBLE + textwrap.dedent("""
    import json
    from jaxtom import models, parallel
    mesh = parallel.make_mesh(*json.loads(sys.argv[5]))
    model = models.from_pretrained(out + "/src", mesh=mesh)
    leaf = model.layers.q_proj[...]
    assert not leaf.sharding.is_fully_replicated, leaf.sharding
    # each process names its own directory, so a write by any but process 0 would show
    models.save_pretrained(model, f"{out}/dst_{pid}", max_shard_bytes=20_000)
    print("RESULT {}")
""")


def random_hf_checkpoint(path: Path, seed: int = 3) -> Path:
    """A Hugging Face directory of random float32 weights for tests/rl/common.py's TINY,
    written from numpy (building the model would compile its initialiser: ~10 s)."""
    import json

    from flax import nnx

    from jaxtom.models.config import config_to_hf_dict
    from jaxtom.models.decoder import Decoder
    from jaxtom.models.hf_io import _expected_tensors, _write_safetensors
    from tests.rl.common import TINY

    _, state = nnx.split(nnx.eval_shape(lambda: Decoder(TINY, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(seed)
    tensors = {name: rng.standard_normal(shape).astype(np.float32)
               for name, (_, _, shape) in sorted(_expected_tensors(TINY, state).items())}
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config_to_hf_dict(TINY)))
    _write_safetensors(path / "model.safetensors", tensors)
    return path


def _source(tmp_path):
    return random_hf_checkpoint(tmp_path / "src")


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from jaxtom.models.hf_io import open_hf_dir
    src = open_hf_dir(path)
    return {n: np.array(src.read(n)) for n in src.names}


def _check_export(tmp_path):
    assert not (tmp_path / "dst_1").exists(), "a process other than 0 wrote files"
    out = tmp_path / "dst_0"
    assert (out / "model.safetensors.index.json").exists()  # sharded by size
    assert len(list(out.glob("model-*.safetensors"))) > 2
    want, got = _tensors(tmp_path / "src"), _tensors(out)
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _run(nproc: int, devices_each: int, mesh, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices_each}"}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(nproc), str(i), str(port),
                               str(tmp_path), str(list(mesh))], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(nproc)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]


def test_fsdp_sharded_export_equals_weights(tmp_path):
    _source(tmp_path)
    _run(1, 8, (1, 8, 1), tmp_path)
    _check_export(tmp_path)


@pytest.mark.slow  # two JAX processes over gloo: ~30 s on 2 cores
def test_two_process_export_only_process_0_writes(tmp_path):
    _source(tmp_path)
    _run(2, 4, (1, 4, 2), tmp_path)
    _check_export(tmp_path)
