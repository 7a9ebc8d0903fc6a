"""The sharded step on 8 simulated CPU devices equals one device, for several meshes.

Runs in a subprocess with XLA_FLAGS set before JAX starts (see tests/test_parallel.py).
"""

import textwrap

import pytest
from pathlib import Path

from tests.rl.common import TINY, adam_trajectory_tol, gradient_tol
from tests.simulated import run_on_devices
from tests.tolerance import float32_tol

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json
    import jax, numpy as np
    assert jax.device_count() == 8, jax.devices()
    jax.config.update("jax_default_matmul_precision", "highest")
    from jaxtom import parallel, rl
    from jaxtom.models import init_decoder
    from tests.rl.common import TINY, params_array, random_batch

    cfg = TINY.replace(num_heads=8, num_kv_heads=4, head_dim=8)
    # adam_eps 1e-5: with eps 1e-8 Adam divides gradients near 1e-8 by themselves, turning
    # reduction-order rounding (1e-10) into O(lr) parameter differences on any backend
    step_cfg = rl.StepConfig(lambda_pred=1.0, lambda_entropy=1e-2, learning_rate=1e-3,
                             adam_eps=1e-5, micro_batches=2)
    batches = [random_batch(s, num_rows=8, row_len=16) for s in range(2)]

    def run(mesh):
        model = init_decoder(cfg, seed=1)
        learner = rl.Learner(model, step_cfg, mesh=mesh, total_steps=1000)
        state = learner.init_state(model)
        for b in batches:
            state, metrics = learner.update(state, learner.put_batch(b))
        q = state.params["layers"]["q_proj"].get_value()
        return params_array(state), {k: float(v) for k, v in metrics.items()}, q.sharding

    ref, ref_metrics, _ = run(None)
    model = init_decoder(cfg, seed=1)
    init = params_array(rl.Learner(model, step_cfg, total_steps=1000).init_state(model))
    out = {"moved": float(np.abs(ref - init).max()), "params_scale": float(np.abs(ref).max()),
           "eta": ref_metrics["eta"], "num_params": len(ref)}
    for shape in SHAPES:
        params, metrics, sharding = run(parallel.make_mesh(*shape))
        out[str(shape)] = dict(
            max_diff=float(np.abs(params - ref).max()),
            eta_diff=abs(metrics["eta"] - ref_metrics["eta"]),
            q_shards=len(sharding.device_set), q_spec=str(sharding.spec))
    print("RESULT " + json.dumps(out))
""")


# (2, 2, 2) splits data, fsdp and tensor at once (every default run); the lopsided meshes,
# tensor-only and data-heavy, each compile the whole step again (~40 s on 2 cores): slow
@pytest.mark.parametrize("shapes", [
    [(2, 2, 2)], pytest.param([(1, 2, 4), (4, 2, 1)], marks=pytest.mark.slow)])
def test_sharded_step_equals_single_device(shapes):
    out = run_on_devices(SCRIPT.replace("SHAPES", repr(shapes)), 8)
    # two Adam updates at lr 1e-3 (tests/rl/common.py); eta is a ratio of two gradient norms
    # (the gradient's float32 bound plus a sum of squares over all parameters), each side
    tol = adam_trajectory_tol([out["params_scale"]], updates=2, learning_rate=1e-3)
    grad = gradient_tol(TINY.replace(num_heads=8, num_kv_heads=4, head_dim=8))
    eta_tol = float32_tol(out["eta"], 2 * (grad["reduction"] * grad["depth"]
                                           + out["num_params"]))
    for shape in map(str, shapes):
        assert out[shape]["max_diff"] <= tol, (shape, tol, out[shape])
        assert out[shape]["eta_diff"] <= eta_tol, (shape, eta_tol, out[shape])
    assert out["moved"] > 50 * tol  # the update is far larger than the tolerance
    if "(2, 2, 2)" in out:
        assert out["(2, 2, 2)"]["q_shards"] == 8  # params really are split
    if "(1, 2, 4)" in out:
        assert "tensor" in out["(1, 2, 4)"]["q_spec"]
