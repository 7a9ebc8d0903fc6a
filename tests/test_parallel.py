"""Meshes, logical-axis rules, and sharded forward/generation equal to one device.

The 8-device checks run in a subprocess with XLA_FLAGS set before JAX starts, so they do not
fight with the single-device JAX of the rest of the suite.
"""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jaxtom import parallel
from jaxtom.models.config import ModelConfig
from tests.tolerance import decoder_depth, decoder_reduction, float32_tol


def test_rules_map_logical_axes():
    assert parallel.logical_to_spec(("layers", "embed", "q_heads")) == P(None, "fsdp", "tensor")
    assert parallel.logical_to_spec(("batch", "seq")) == P(("data", "fsdp"), None)
    # a mesh axis is never used twice in one spec
    assert parallel.logical_to_spec(("embed", "embed")) == P("fsdp", None)


def test_mesh_size_errors():
    import jax

    n = jax.device_count()
    with pytest.raises(ValueError, match=f"needs {2 * n} devices but {n} are available"):
        parallel.make_mesh(2 * n, 1, 1)
    with pytest.raises(ValueError, match="at most one mesh axis may be -1"):
        parallel.make_mesh(-1, -1, 1)
    mesh = parallel.make_mesh(1, -1, 1)
    assert dict(mesh.shape) == {"data": 1, "fsdp": n, "tensor": 1}


SCRIPT = textwrap.dedent("""
    import json, sys, tempfile
    import jax, numpy as np
    assert jax.device_count() == 8, jax.devices()
    from jaxtom import models, parallel
    from jaxtom.sampling import sampler
    from jaxtom.models.tiny import save_tiny_hf

    path = tempfile.mkdtemp()
    save_tiny_hf(path, "qwen3", num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                 initializer_range=0.15)
    ids = np.random.default_rng(0).integers(0, 256, (8, 12))
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    ragged = [list(range(1, 2 + i)) for i in range(16)]

    def run(mesh, compact=False):
        model = models.from_pretrained(path, mesh=mesh)
        logits = np.asarray(model(ids))
        greedy = sampler.generate(model, prompts, max_new_tokens=10, temperature=0.0)
        sampled = sampler.generate(model, prompts, max_new_tokens=10, temperature=1.0,
                                    key=jax.random.key(3))
        # rows stopping at token 7 anywhere in 70 steps, finished rows dropped every 32
        long = None if compact is None else sampler.generate(
            model, ragged, max_new_tokens=70, temperature=1.0, key=jax.random.key(4),
            stop=[7], compact=compact).tokens
        return model, logits, greedy.tokens, sampled.tokens, long

    _, ref_logits, ref_greedy, ref_sampled, ref_long = run(None)
    out = {"max_abs_logit": float(np.abs(ref_logits).max()),
           "ragged_lengths": sorted({int((r != 0).sum()) for r in ref_long})}
    for shape in [(8, 1, 1), (2, 4, 1), (1, 2, 4), (2, 2, 2)]:
        mesh = parallel.make_mesh(*shape)
        # compacted decoding on two meshes, against the single loop on one device
        compact = True if shape in [(8, 1, 1), (2, 2, 2)] else None
        model, logits, greedy, sampled, long = run(mesh, compact=compact)
        q_spec = model.layers.q_proj[...].sharding.spec
        out[str(shape)] = dict(
            max_diff=float(np.abs(logits - ref_logits).max()),
            greedy_equal=bool(np.array_equal(greedy, ref_greedy)),
            sampled_equal=bool(np.array_equal(sampled, ref_sampled)),
            long_equal=long is None or bool(np.array_equal(long, ref_long)),
            q_spec=str(q_spec),
            q_shards=len({d.id for d in model.layers.q_proj[...].sharding.device_set}))
    try:
        models.from_pretrained(path, mesh=parallel.make_mesh(1, 1, 8))
        out["bad_mesh_error"] = None
    except ValueError as err:
        out["bad_mesh_error"] = str(err)
    print("RESULT " + json.dumps(out))
""")


class _FakeDevice:
    """What the mesh layout reads of a device: its platform, kind, id and slice."""

    def __init__(self, id, slice_index, platform="cpu"):
        self.id, self.slice_index, self.platform = id, slice_index, platform
        self.device_kind, self.process_index = platform, slice_index

    def __repr__(self):
        return f"D{self.id}/s{self.slice_index}"


def test_device_grid_keeps_one_slice_in_order_and_puts_data_across_slices():
    one = [_FakeDevice(i, 0) for i in range(8)]
    grid = parallel.device_grid((2, 2, 2), one)
    assert [d.id for d in grid.flat] == list(range(8))  # CPU: jax.devices() order
    # GPU: by device id, whatever order the list came in
    gpus = [_FakeDevice(i, 0, "gpu") for i in (3, 1, 0, 2)]
    assert [d.id for d in parallel.device_grid((1, 4, 1), gpus).flat] == [0, 1, 2, 3]
    two = [_FakeDevice(i, i // 4) for i in range(8)]
    grid = parallel.device_grid((2, 4, 1), two)
    assert grid.shape == (2, 4, 1)
    assert {d.slice_index for d in grid[0].flat} == {0}
    assert {d.slice_index for d in grid[1].flat} == {1}  # each data index: one slice
    grid = parallel.device_grid((4, 2, 1), two)
    assert [{d.slice_index for d in grid[i].flat} for i in range(4)] == [{0}, {0}, {1}, {1}]
    with pytest.raises(ValueError, match=r"spans 2 slices; .* mesh.data must be a multiple "
                                         r"of 2 \(e.g. mesh.data=2\)"):
        parallel.device_grid((1, 8, 1), two)


def test_sharded_forward_and_generation_equal_single_device():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    # the script's model (jaxtom.models.tiny defaults with its overrides), 12 tokens: sharded
    # matmuls add their partial sums in another order, within a decoder forward's float32
    # bound (tests/tolerance.py)
    cfg = ModelConfig(family="qwen3", vocab_size=256, hidden_size=64, intermediate_size=128,
                      num_layers=2, num_heads=8, num_kv_heads=4, head_dim=8, qk_norm=True)
    tol = float32_tol(out["max_abs_logit"], decoder_reduction(cfg, 12), decoder_depth(cfg))
    for shape in ["(8, 1, 1)", "(2, 4, 1)", "(1, 2, 4)", "(2, 2, 2)"]:
        r = out[shape]
        assert r["max_diff"] <= tol, (shape, tol, r)
        assert r["greedy_equal"] and r["sampled_equal"] and r["long_equal"], (shape, r)
    assert len(out["ragged_lengths"]) > 3, out  # rows stop at many different steps
    assert "tensor" in out["(1, 2, 4)"]["q_spec"] and "fsdp" in out["(1, 2, 4)"]["q_spec"]
    assert out["(2, 2, 2)"]["q_shards"] == 8
    assert out["max_abs_logit"] > 0.5  # logits large enough for the tolerance to mean something
    assert "does not divide num_key_value_heads (4)" in out["bad_mesh_error"]


def test_sharded_zeros_reuses_its_program_across_calls():
    """A sampler call per rollout step creates its cache with `sharded_zeros`: the same
    shapes and shardings must reuse one compiled program (it used to compile a new one on
    every call), and other shapes get their own."""
    mesh = parallel.make_mesh(1, 1, 1)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    shapes = {"k": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
    before = len(parallel._ZEROS)
    for _ in range(3):
        out = parallel.sharded_zeros(shapes, {"k": sharding})
        assert out["k"].shape == (2, 3) and not np.asarray(out["k"]).any()
    assert len(parallel._ZEROS) == before + 1
    parallel.sharded_zeros({"k": jax.ShapeDtypeStruct((4, 3), jnp.float32)}, {"k": sharding})
    assert len(parallel._ZEROS) == before + 2
