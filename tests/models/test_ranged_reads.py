"""A sharded load reads each host's share of the checkpoint and little else: bytes counted
by a counting filesystem, for a local directory and for a `gs://` one (an in-memory fsspec
filesystem behind epath, with gcsfs's read-ahead files), stay within 1.1x the bytes of the
parameters the host's devices hold plus the safetensors headers, and the loaded parameters
equal the saved ones bit for bit (simulated CPU devices; two processes over jax.distributed
for the multi-host case)."""

import io
import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxtom.models import byte_ranges
from jaxtom.models.byte_ranges import box_ranges, read_ranges
from jaxtom.models.hf_io import host_reads
from tests.models.counting_fs import CountingBucket
from tests.simulated import MULTIHOST_PREAMBLE, run_on_devices

ROOT = Path(__file__).resolve().parents[2]
SLACK = 1.1

# argv: nproc, pid, port, out (holding model/ and ref.npz), mesh sizes as JSON
SCRIPT = MULTIHOST_PREAMBLE + textwrap.dedent("""
    import json
    from flax import nnx
    from jaxtom import parallel
    from jaxtom.models import from_pretrained
    from tests.models.counting_fs import CountingBucket, CountingDisk, header_bytes, host_share

    mesh = parallel.make_mesh(*json.loads(sys.argv[5]))
    ref = np.load(out + "/ref.npz")
    disk, bucket = CountingDisk.install(), CountingBucket.install()
    bucket.upload(out + "/model", "gs://ckpt/model")
    result = {"headers": header_bytes(out + "/model")}
    for name, path, counter in (("local", out + "/model", disk),
                                ("bucket", "gs://ckpt/model", bucket)):
        counter.read.clear()
        model = from_pretrained(path, mesh=mesh)
        for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
            x = var.get_value()
            key = ".".join(map(str, p))
            assert not (x.sharding.is_fully_replicated and x.ndim > 1 and "norm" not in key), key
            for shard in x.addressable_shards:
                np.testing.assert_array_equal(np.asarray(shard.data), ref[key][shard.index],
                                              err_msg=f"{name} {key}")
        result[name] = {"read": counter.safetensors_bytes(), "share": host_share(model, 4)}
    print("RESULT " + json.dumps(result))
""")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random float32 model saved with `save_pretrained` over several files, and its
    parameters (ref.npz) to compare a load with."""
    from flax import nnx

    from jaxtom.models import from_pretrained, save_pretrained
    from tests.models.test_export_sharded import random_hf_checkpoint

    out = tmp_path_factory.mktemp("ranged")
    model = from_pretrained(random_hf_checkpoint(out / "src"))
    save_pretrained(model, out / "model", max_shard_bytes=30_000)
    assert len(list((out / "model").glob("model-*.safetensors"))) > 1
    np.savez(out / "ref.npz", **{".".join(map(str, p)): np.asarray(v.get_value())
                                 for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))})
    return out


def _check(result: dict, whole: int | None = None) -> dict:
    """Each load read the headers and at least its share, at most SLACK times it; returns
    the ratios of the tensor bytes read to the share."""
    ratios = {}
    for name in ("local", "bucket"):
        read, share = result[name]["read"] - result["headers"], result[name]["share"]
        if whole is not None:
            assert share == whole, (name, share, whole)
        assert share <= read <= SLACK * share, (name, read, share)
        ratios[name] = read / share
    return ratios


def _checkpoint_bytes(out: Path) -> int:
    ref = np.load(out / "ref.npz")
    return sum(ref[k].nbytes for k in ref.files)


def test_one_process_on_four_fsdp_devices_reads_the_checkpoint_once(checkpoint):
    argv = ["-c", "1", "0", "0", str(checkpoint), "[1, 4, 1]"]
    result = run_on_devices(f"import sys\nsys.argv = {argv!r}\n" + SCRIPT, devices=4,
                            timeout=600)
    ratios = _check(result, whole=_checkpoint_bytes(checkpoint))
    print("one process on 4 devices: tensor bytes read / share", ratios, result)


def test_two_processes_each_read_their_half(checkpoint):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, "2", str(i), str(port),
                               str(checkpoint), "[1, 4, 2]"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    whole = _checkpoint_bytes(checkpoint)
    for p, (stdout, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
        line = next(l for l in stdout.splitlines() if l.startswith("RESULT "))
        result = json.loads(line[len("RESULT "):])
        # the fsdp-sharded bulk is split between the hosts; only norms are whole on both
        assert result["local"]["share"] < 0.6 * whole, (result, whole)
        ratios = _check(result)
        print("one of two processes: tensor bytes read / share", ratios, result)


def test_host_reads_one_bounding_box_when_blocks_tile_it():
    halves = [((0, 4), (0, 2)), ((0, 4), (2, 4))]
    assert host_reads(halves + halves) == [((0, 4), (0, 4))]  # replicas read once
    apart = [((0, 2), (0, 2)), ((2, 4), (2, 4))]  # a diagonal: its bounding box is twice
    assert host_reads(apart) == apart
    assert host_reads([((0, 3),)]) == [((0, 3),)]


def test_a_box_costs_exactly_its_bytes(monkeypatch):
    """Random boxes of tensors of up to 3 axes, from a plain file and from a bucket file (in
    several `cat_ranges` calls): the box's values, and only its bytes leave the bucket."""
    monkeypatch.setattr(byte_ranges, "CALL_RANGES", 3)
    rng = np.random.default_rng(0)
    bucket = CountingBucket()
    for shape in [(5,), (3, 4), (2, 3, 4), (4, 1, 6), ()]:
        tensor = rng.standard_normal(shape).astype(np.float32)
        bucket.pipe_file("t/x.bin", b"pad" + tensor.tobytes())
        for _ in range(12):
            box = tuple(tuple(int(x) for x in sorted(rng.integers(0, n + 1, 2)))
                        for n in shape)
            want = tensor[tuple(slice(a, b) for a, b in box)]
            starts, size = box_ranges(shape, 4, 3, box)
            bucket.read.clear()
            with bucket.open("t/x.bin", "rb") as fh:
                got = read_ranges(fh, starts, starts + size, "x")
            plain = read_ranges(io.BytesIO(b"pad" + tensor.tobytes()), starts, starts + size,
                                "x")
            assert sum(bucket.read.values()) == want.nbytes, (shape, box)
            for chunks in (got, plain):
                np.testing.assert_array_equal(
                    np.frombuffer(b"".join(chunks), np.float32).reshape(want.shape), want)
    with pytest.raises(ValueError, match=r"x: reading bytes \[8, 20\) gave 4 bytes"):
        read_ranges(io.BytesIO(bytes(12)), [8], [20], "x")
