"""A tiny decoder and random GRPO batches shared by the step tests and their subprocesses."""

import numpy as np

from jaxtom import rl
from jaxtom.models import init_decoder
from jaxtom.models.config import ModelConfig
from tests.tolerance import EPS32, decoder_depth, decoder_reduction, float32_tol

TINY = ModelConfig(family="qwen3", vocab_size=48, hidden_size=32, intermediate_size=64,
                   num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def tiny_model(seed=0):
    return init_decoder(TINY, seed=seed)


def random_batch(seed, *, num_seqs=8, group=4, num_rows=8, row_len=16, prediction=True,
                 decision=True, off_policy=True, degenerate=False):
    """Random rollouts packed into a fixed-shape batch (NumPy leaves)."""
    rng = np.random.default_rng(seed)
    seqs, masks, decisions = [], [], []
    for _ in range(num_seqs):
        L = int(rng.integers(3, row_len + 1))
        prompt = int(rng.integers(1, L))
        seqs.append(rng.integers(0, TINY.vocab_size, L).tolist())
        masks.append([0.0] * prompt + [1.0] * (L - prompt))
        d = [0.0] * L
        d[prompt] = 1.0
        decisions.append(d)
    rewards = rng.normal(size=num_seqs)
    if degenerate:
        kind = seed % 4
        if kind == 0:
            rewards[:] = 1.0  # every group equal: zero advantages
        if kind == 1:
            masks = [[0.0] * len(m) for m in masks]  # no policy tokens
        if kind == 2:
            rewards = rng.choice([-1e6, 1e6], num_seqs)
    adv = np.asarray(rl.group_advantages(rewards, group))
    old = None
    if off_policy:
        scale = 30.0 if degenerate else 0.1
        old = [(-rng.exponential(3.0, len(s)) + rng.normal(0, scale, len(s))).tolist()
               for s in seqs]
    batch = rl.pack_sequences(seqs, masks, adv, [i // group for i in range(num_seqs)],
                              num_rows=num_rows, row_len=row_len, old_logps=old,
                              decision_masks=decisions if decision else None)
    if prediction:
        n = num_rows // 2 if not (degenerate and seed % 4 == 3) else 0
        ctx = [rng.integers(0, TINY.vocab_size, int(rng.integers(1, 6))).tolist()
               for _ in range(n)]
        tgt = [rng.integers(0, TINY.vocab_size, int(rng.integers(1, 6))).tolist()
               for _ in range(n)]
        batch = batch.replace(prediction=rl.prediction_batch(ctx, tgt, num_rows=num_rows,
                                                             row_len=12))
    return batch


# elementwise ops of the GRPO / prediction / entropy losses per token (ratio, clips, k3 KL,
# masks, weights), a generous count
LOSS_OPS = 32


def gradient_tol(cfg=TINY, *, seq_len=16, tokens=8 * 16):
    """`reduction`/`depth` of the float32 bound (tests/tolerance.py) on the gradient of a
    token-mean loss of decoder `cfg`: forward then backward (2x the decoder depth), each
    stage with a layer's reductions, the log-softmax over the vocabulary, the loss's
    elementwise ops and its sum over `tokens`, and the weight gradients' sum over the same
    tokens. The bound holds relative to each gradient's own scale."""
    return dict(reduction=decoder_reduction(cfg, seq_len) + cfg.vocab_size + 2 * tokens
                + LOSS_OPS, depth=2 * decoder_depth(cfg))


def adam_tol(params, *, learning_rate, cfg=TINY, seq_len=16, tokens=8 * 16):
    """Bound on the parameters after ONE AdamW update, from a fresh optimiser state, by two
    float32 programs whose gradients differ by rounding. The first direction
    g / (|g| + adam_eps) is invariant to the gradient's scale (so to the global-norm clip),
    and a relative error r of an entry moves it by at most r / 4 whatever |g| is, with r
    `gradient_tol`'s bound; plus ~16 rounding steps of the update on each |param|."""
    grad_rel = EPS32 * np.prod(list(gradient_tol(cfg, seq_len=seq_len, tokens=tokens)
                                    .values()))
    return (learning_rate * grad_rel / 4
            + float32_tol(np.abs(np.asarray(params)).max() + learning_rate, 16))


# After more than one update no such bound exists: Adam divides each gradient entry by its
# own running RMS + adam_eps, and an entry of a few times adam_eps (a rarely seen embedding
# row) that two programs round differently, or that sees parameters already apart, moves
# by up to lr x its difference / adam_eps: O(lr) in the worst case. Trajectories of Adam
# updates are compared to a fraction of the distance the updates move an entry (lr each)
# instead, set against the smallest bug the tests check for: one update fewer moves entries
# by ~0.1 lr, the mini-batches in another order by ~1.5 lr (tests/rl/test_ppo.py). The
# largest rounding effect seen is 3e-4 lr (one embedding entry of an off-policy PPO run).
ADAM_TRAJECTORY_FRACTION = 1e-2


def adam_trajectory_tol(params, *, updates, learning_rate):
    """Tolerance on the parameters after `updates` AdamW updates by two programs: the
    fraction above of the distance they move an entry, plus their float32 rounding."""
    return (updates * learning_rate * ADAM_TRAJECTORY_FRACTION
            + float32_tol(np.abs(np.asarray(params)).max() + learning_rate, 16, updates))


def params_array(state):
    """All trainable params flattened into one float64 vector (for comparisons)."""
    import jax
    return np.concatenate([np.asarray(x, np.float64).ravel()
                           for x in jax.tree.leaves(state.params)])


def two_processes_and_one(script: str, out_dir, timeout: int = 900):
    """Runs `script` (argv: nproc, pid, port, out.npy) as 2 jax.distributed processes x 2 CPU
    devices and as 1 process x 4 devices; returns (multi, single) arrays it saved and the
    stdout of process 0 and of the single process."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(root)}
    two = {**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    procs = [subprocess.Popen([sys.executable, "-c", script, "2", str(i), str(port),
                               str(Path(out_dir) / "multi.npy")], env=two, cwd=root,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    four = {**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    single = subprocess.run([sys.executable, "-c", script, "1", "0", "0",
                             str(Path(out_dir) / "single.npy")], env=four, cwd=root,
                            capture_output=True, text=True, timeout=timeout)
    assert single.returncode == 0, single.stderr[-4000:]
    return (np.load(Path(out_dir) / "multi.npy"), np.load(Path(out_dir) / "single.npy"),
            outs[0][0], single.stdout)
