"""Real multi-host: 2 processes on 127.0.0.1 (jax.distributed, gloo CPU collectives, 2
devices each) run sharded update steps, each feeding its own rows; the params equal a
single-process run on 4 devices. This is the code path of a TPU pod or a multi-node GPU job."""

import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.rl.common import TINY, adam_trajectory_tol, gradient_tol, two_processes_and_one
from tests.simulated import MULTIHOST_PREAMBLE
from tests.tolerance import float32_tol

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = MULTIHOST_PREAMBLE + textwrap.dedent("""
    assert jax.device_count() == 4 and jax.local_device_count() == 4 // nproc
    from jax.experimental import multihost_utils
    from jaxtom import parallel, rl
    from jaxtom.models import init_decoder
    from tests.rl.common import TINY, random_batch

    cfg = TINY.replace(num_heads=4, num_kv_heads=2)
    step_cfg = rl.StepConfig(lambda_pred=1.0, lambda_entropy=1e-2, learning_rate=1e-3,
                             adam_eps=1e-5)
    mesh = parallel.make_mesh(2, 2, 1)
    model = init_decoder(cfg, seed=1)
    learner = rl.Learner(model, step_cfg, mesh=mesh, total_steps=1000)
    state = learner.init_state(model)
    rows = 8 // nproc
    for seed in range(3):
        full = random_batch(seed, num_rows=8, row_len=16)
        local = jax.tree.map(lambda x: x[pid * rows:(pid + 1) * rows], full)
        state, metrics = learner.update(state, learner.put_batch(local))
    leaves = [multihost_utils.process_allgather(x, tiled=True)
              for x in jax.tree.leaves(state.params)]
    if pid == 0:
        np.save(out, np.concatenate([np.asarray(x, np.float64).ravel() for x in leaves]))
        print("ETA", float(metrics["eta"]))
""")


@pytest.mark.slow  # three fresh JAX processes compiling the step: ~1-2 min on 2 cores
def test_two_process_step_equals_single_process(tmp_path):
    multi, ref, out0, out_single = two_processes_and_one(SCRIPT, tmp_path, timeout=600)
    assert multi.shape == ref.shape
    # three Adam updates at lr 1e-3 (tests/rl/common.py); eta is a ratio of two gradient
    # norms: the gradient's float32 bound plus a sum of squares over all P parameters, twice
    np.testing.assert_allclose(multi, ref, rtol=0, atol=adam_trajectory_tol(
        ref, updates=3, learning_rate=1e-3))
    eta_multi, eta_single = float(out0.split()[-1]), float(out_single.split()[-1])
    grad = gradient_tol(TINY)
    assert abs(eta_multi - eta_single) <= float32_tol(
        eta_single, 2 * (grad["reduction"] * grad["depth"] + len(ref))), (eta_multi, eta_single)
