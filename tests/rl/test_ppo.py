"""PPO mini-batch updates: one `Learner.update` equals the single-update rule applied by hand
to each mini-batch in order, the clips act from the second mini-batch on, losses on
off-policy ratios match the float64 NumPy reference, and odd row counts are padded (1 and 4
simulated devices) instead of failing."""

import dataclasses
import functools
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxtom import rl
from jaxtom.rl.losses import KL_CLAMP, LOG_RATIO_CLAMP
from tests.rl import reference as ref
from tests.rl.common import (
    LOSS_OPS, TINY, adam_trajectory_tol, gradient_tol, params_array, tiny_model,
    two_processes_and_one,
)
from tests.simulated import MULTIHOST_PREAMBLE, run_on_devices
from tests.tolerance import assert_close, decoder_depth, decoder_reduction, float32_tol

jax.config.update("jax_default_matmul_precision", "highest")
ROOT = Path(__file__).resolve().parents[2]

# lr 1e-2 moves the tiny policy far enough in one update for the next mini-batch's ratios to
# leave [0.8, 1.2]; adam_eps 1e-5 keeps Adam from turning rounding-sized gradient entries
# (different reduction orders in the two programs) into O(lr) differences.
PPO = rl.StepConfig(learning_rate=1e-2, kl_coef=0.05, lambda_pred=1.0,
                    lambda_entropy=1e-2, adam_eps=1e-5, micro_batches=3, ppo_mini_batches=3,
                    ppo_epochs=2)


def odd_batch(seed, rows=7, pred_rows=5, off_policy=False):
    """`rows` policy rows (one GRPO group) and `pred_rows` prediction rows: neither divides
    ppo_mini_batches, as with the CToM paper's rollout-dependent rows.

    Row i holds rollout i // 3 (rewards per rollout), so every mini-batch (rows k, k+3, ...)
    revisits rollouts an earlier one trained on: a random tiny model barely generalises
    between unrelated random sequences, and the ratio would stay 1 until the next epoch.
    """
    rng = np.random.default_rng(seed)
    distinct = -(-rows // 3)
    base = [rng.integers(0, TINY.vocab_size, int(rng.integers(6, 17))).tolist()
            for _ in range(distinct)]
    prompts = [int(rng.integers(1, len(b) - 2)) for b in base]
    rewards = rng.normal(size=distinct)
    seqs = [base[i // 3] for i in range(rows)]
    masks = [[0.0] * prompts[i // 3] + [1.0] * (len(seqs[i]) - prompts[i // 3])
             for i in range(rows)]
    decisions = [[1.0 if j == prompts[i // 3] else 0.0 for j in range(len(seqs[i]))]
                 for i in range(rows)]
    adv = np.asarray(rl.group_advantages(np.asarray([rewards[i // 3] for i in range(rows)]),
                                         rows))
    old = None
    if off_policy:  # rollout log-probs far from the tiny model's (about -log 48 = -3.9)
        old = [(-rng.exponential(3.0, len(q))).tolist() for q in seqs]
    b = rl.pack_sequences(seqs, masks, adv, [0] * rows, num_rows=rows, row_len=16,
                          old_logps=old, decision_masks=decisions)
    ctx = [rng.integers(0, TINY.vocab_size, int(rng.integers(1, 6))).tolist()
           for _ in range(pred_rows)]
    tgt = [rng.integers(0, TINY.vocab_size, int(rng.integers(1, 6))).tolist()
           for _ in range(pred_rows)]
    return b.replace(prediction=rl.prediction_batch(ctx, tgt, num_rows=pred_rows, row_len=12))


# float32 rounding steps of a forward to a token-mean loss of the tiny model: the decoder,
# the log-softmax, the loss's elementwise ops and exp's amplification of a clamped log-ratio,
# and the mean over the (at most 9 x 16) tokens (tests/tolerance.py)
LOSS_STEPS = (decoder_reduction(TINY, 16) * decoder_depth(TINY) + TINY.vocab_size + LOSS_OPS
              + int(LOG_RATIO_CLAMP) + 9 * 16)
SCHEDULE_OPS = 16  # warmup / cosine decay in float32


def grpo_scale(cfg, advantages, logp_scale):
    """A GRPO term is at most S = |A| max(1 + clip_high, c) + kl_coef KL_CLAMP; its
    derivative in log p is at most S too, so a log-prob rounded at |log p| moves the loss by
    S |log p| x its relative error."""
    s = np.abs(advantages).max() * max(1 + cfg.clip_high, cfg.dual_clip) + cfg.kl_coef * KL_CLAMP
    return s * (1 + logp_scale)


@functools.lru_cache(maxsize=None)
def learner_for(cfg, total_steps: int = 2):
    """One Learner (and so one set of compiled programs) per config for the whole module."""
    return rl.Learner(tiny_model(), cfg, total_steps=total_steps)


def single_update_learner(cfg):
    """The existing one-update rule (no mini-batches, no micro-batches, reference log-probs
    from the batch) on a schedule as long, in updates, as the PPO learner's."""
    u = cfg.updates_per_batch
    return learner_for(dataclasses.replace(
        cfg, ppo_mini_batches=1, ppo_epochs=1, micro_batches=1, reference="batch",
        warmup_steps=cfg.warmup_steps * u), total_steps=2 * u)


def sequential_reference(cfg, batch):
    """By hand: score old (if absent) and reference log-probs with the rollout params, then
    one single-rule update per mini-batch (rows k, k+n, ... of the unpadded batch), in order.
    Returns the final state and, per update, (params before it, mini-batch, metrics)."""
    n = cfg.ppo_mini_batches
    single = single_update_learner(cfg)
    state = single.init_state(tiny_model())
    initial = np.asarray(single.logprobs(state, batch))  # frozen copy = rollout params
    batch = batch.replace(old_logp=initial if batch.old_logp is None else batch.old_logp,
                          ref_logp=initial)
    trace = []
    for u in range(cfg.updates_per_batch):
        mini = jax.tree.map(lambda x: np.asarray(x)[u % n::n], batch)
        before = jax.tree.map(np.array, state)
        state, metrics = single.update(state, mini)
        trace.append((before, mini, {k: float(v) for k, v in metrics.items()}))
    return single, state, trace


@pytest.fixture(scope="module")
def on_policy_run():
    """One padded PPO update (7 -> 9 rows, 5 -> 9 prediction rows) and its reference."""
    batch = odd_batch(0)
    learner = learner_for(PPO)
    state = learner.init_state(tiny_model())
    init = params_array(state)
    new_state, metrics = learner.update(state, batch)
    _, ref_state, trace = sequential_reference(PPO, batch)
    return learner, new_state, metrics, ref_state, trace, init


def test_update_equals_sequential_single_updates(on_policy_run):
    learner, state, metrics, ref_state, trace, init = on_policy_run
    got, want = params_array(state), params_array(ref_state)
    # Adam trajectories: a fraction of the updates' reach (tests/rl/common.py), less than
    # the last update alone moved (one update fewer is a bug this must catch)
    tol = adam_trajectory_tol(want, updates=PPO.updates_per_batch,
                              learning_rate=PPO.learning_rate)
    assert np.abs(want - params_array(trace[-1][0])).max() > 5 * tol
    assert np.abs(want - init).max() > 50 * tol
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    assert int(state.step) == 1  # counts rollout batches, not optimiser updates
    per = {k: np.array([m[k] for _, _, m in trace]) for k in trace[0][2]}
    # means over the updates of float32 forwards at parameters that agree as above: each
    # within the bound of its computation at its own scale (the log-probs' size for the
    # losses), eta as a ratio of two gradient norms over all P entries
    nll = per["loss_pred"].max()
    grad = gradient_tol(tokens=9 * 16)
    eta_steps = 2 * (grad["reduction"] * grad["depth"] + len(want))
    adv = np.concatenate([np.ravel(mini.advantages) for _, mini, _ in trace])
    bound = {"loss_grpo": float32_tol(grpo_scale(PPO, adv, nll), LOSS_STEPS),
           "kl": float32_tol(KL_CLAMP * (1 + nll), LOSS_STEPS),
           "loss_pred": float32_tol(2 * nll, LOSS_STEPS),
           "eta": float32_tol(per["eta"].max(), eta_steps),
           "learning_rate": float32_tol(PPO.learning_rate, SCHEDULE_OPS)}
    for k, tol_k in bound.items():
        assert float(metrics[k]) == pytest.approx(per[k].mean(), rel=0, abs=tol_k), k
    # a clip fraction counts tokens: a ratio within rounding of 1 +- clip may go either way,
    # one token per update at most
    n_min = per["policy_tokens"].min()
    assert float(metrics["clip_frac"]) == pytest.approx(per["clip_frac"].mean(), abs=1.5 / n_min)
    assert float(metrics["clip_frac_last"]) == pytest.approx(per["clip_frac"][-1],
                                                             abs=1.5 / per["policy_tokens"][-1])
    assert float(metrics["policy_tokens"]) == per["policy_tokens"][:3].sum()  # exact counts
    assert float(metrics["skipped"]) == 0.0 and float(metrics["updates"]) == 6


def test_clip_acts_from_the_second_mini_batch(on_policy_run):
    _, _, metrics, _, trace, _ = on_policy_run
    clip = [m["clip_frac"] for _, _, m in trace]
    assert clip[0] == 0.0  # the rollout policy itself: ratio 1
    assert min(clip[1:]) > 0.0, clip  # every later mini-batch sees a moved policy
    assert float(metrics["clip_frac_last"]) > 0.0


def test_schedule_counts_optimiser_updates(on_policy_run):
    learner, _, _, _, trace, _ = on_policy_run
    lrs = [m["learning_rate"] for _, _, m in trace]
    want = [float(learner.schedule(u)) for u in range(PPO.updates_per_batch)]
    sched = float32_tol(1.0, SCHEDULE_OPS)  # relative
    np.testing.assert_allclose(lrs, want, rtol=sched)
    assert all(a > b for a, b in zip(lrs, lrs[1:]))  # decays within one rollout batch
    cfg = dataclasses.replace(PPO, end_lr_ratio=0.1)
    schedule = rl.step.make_schedule(cfg, 10)
    total = 10 * cfg.ppo_epochs * cfg.ppo_mini_batches
    assert float(schedule(total)) == pytest.approx(0.1 * cfg.learning_rate, rel=sched)
    assert float(schedule(total // 2)) == pytest.approx(0.55 * cfg.learning_rate, rel=sched)


def test_off_policy_losses_match_numpy_reference():
    """Rollout log-probs far from the policy's: ratios from ~0 to ~e^5, so the clip and the
    dual clip (c = 3) both act (the clip on every mini-batch); loss and per-token gradient
    are checked against the float64 reference at each mini-batch's starting params."""
    cfg = PPO
    batch = odd_batch(1, off_policy=True)
    learner = learner_for(cfg)
    state, metrics = learner.update(learner.init_state(tiny_model()), batch)
    single, ref_state, trace = sequential_reference(cfg, batch)
    want_params = params_array(ref_state)
    np.testing.assert_allclose(params_array(state), want_params, rtol=0, atol=adam_trajectory_tol(
        want_params, updates=cfg.updates_per_batch, learning_rate=cfg.learning_rate))
    losses, acting, scales = [], [], []
    for before, mini, m in trace:
        logp = np.asarray(single.logprobs(before, mini), np.float64)
        args = (logp, mini.old_logp, mini.ref_logp, mini.advantages, mini.policy_mask)
        want = ref.grpo_loss(*args, kl_coef=cfg.kl_coef)
        clip, dual = ref.clip_counts(logp, mini.old_logp, mini.advantages, mini.policy_mask)
        acting.append((clip, dual))
        n = float(mini.policy_mask.sum())
        assert m["clip_frac"] == pytest.approx(clip / n, abs=1.5 / n)  # a boundary token
        assert m["dual_clip_frac"] == pytest.approx(dual / n, abs=1.5 / n)
        # the update's own float32 forward and loss vs the float64 loss of the log-probs
        # `logprobs` scored (another float32 forward)
        scales.append(grpo_scale(cfg, mini.advantages, np.abs(logp).max()))
        assert_close(m["loss_grpo"], want, reduction=LOSS_STEPS, scale=scales[-1])
        # the float32 gradient in log p from the same log-probs: per token at most S / n,
        # over the loss's ops and exp's amplification
        f32 = [np.asarray(a, np.float32) for a in args]
        grad = np.asarray(jax.grad(rl.grpo_loss)(*f32, kl_coef=cfg.kl_coef))
        assert_close(grad, ref.grpo_loss_grad(*args, kl_coef=cfg.kl_coef),
                     reduction=LOSS_OPS + int(LOG_RATIO_CLAMP) + 2,
                     scale=grpo_scale(cfg, mini.advantages, 0.0) / n)
        losses.append(want)
    clips, duals = np.asarray(acting).T
    assert clips.min() > 0 and duals.sum() > 0, acting
    assert_close(metrics["loss_grpo"], np.mean(losses), reduction=LOSS_STEPS, scale=max(scales))


def test_pad_rows_adds_empty_rows_only():
    batch = odd_batch(2)
    padded = rl.batch.pad_rows(batch, 9)
    assert padded.tokens.shape == (9, 16) and padded.prediction.tokens.shape == (9, 12)
    for name in ("policy_mask", "advantages", "segment_ids", "decision_mask"):
        assert not np.any(getattr(padded, name)[7:]), name
    assert np.all(padded.group_ids[7:] == -1) and not np.any(padded.prediction.target_mask[5:])
    np.testing.assert_array_equal(padded.tokens[:7], batch.tokens)
    assert rl.batch.pad_rows(batch, 7).tokens.shape[0] == 7
    assert rl.batch.pad_rows(batch, 2, min_rows=11).tokens.shape[0] == 12
    with pytest.raises(ValueError, match="multiple must be a positive int"):
        rl.batch.pad_rows(batch, 0)


SCRIPT = textwrap.dedent("""
    import json
    import jax
    assert jax.device_count() == 4, jax.devices()
    jax.config.update("jax_default_matmul_precision", "highest")
    from jaxtom import parallel, rl
    from tests.rl.common import params_array, tiny_model
    from tests.rl.test_ppo import PPO, odd_batch

    learner = rl.Learner(tiny_model(), PPO, mesh=parallel.make_mesh(2, 2, 1), total_steps=2)
    state = learner.init_state(tiny_model())
    batch = learner.put_batch(odd_batch(0))
    state, metrics = learner.update(state, batch)
    q = state.params["layers"]["q_proj"].get_value()
    print("RESULT " + json.dumps(dict(
        params=params_array(state).tolist(), rows=batch.tokens.shape[0],
        pred_rows=batch.prediction.tokens.shape[0], q_shards=len(q.sharding.device_set),
        clip_last=float(metrics["clip_frac_last"]))))
""")


def test_odd_rows_on_four_devices_equal_one(on_policy_run):
    """The fixture's 7/5-row update (padded to 9 on one device) on a 2 x 2 (data, fsdp)
    mesh, where put_batch pads to 12 = 4-way data x 3 mini (one row per device per
    mini-batch, so one micro-batch of the 3 allowed)."""
    out = run_on_devices(SCRIPT, 4)
    assert (out["rows"], out["pred_rows"]) == (12, 12)
    assert out["q_shards"] == 4  # the weights really are split (fsdp)
    _, state, metrics, _, trace, _ = on_policy_run
    want = params_array(state)
    np.testing.assert_allclose(np.asarray(out["params"]), want, rtol=0, atol=adam_trajectory_tol(
        want, updates=PPO.updates_per_batch, learning_rate=PPO.learning_rate))
    # a ratio within rounding of the clip boundary may go either way: one token
    n_last = trace[-1][2]["policy_tokens"]
    assert out["clip_last"] == pytest.approx(float(metrics["clip_frac_last"]), abs=1.5 / n_last)


MULTI = MULTIHOST_PREAMBLE + textwrap.dedent("""
    import dataclasses
    assert jax.device_count() == 4
    from jax.experimental import multihost_utils
    from jaxtom import parallel, rl
    from jaxtom.models import init_decoder
    from tests.rl.common import TINY
    from tests.rl.test_ppo import PPO, odd_batch

    cfg = dataclasses.replace(PPO, ppo_epochs=1)
    model = init_decoder(TINY, seed=1)
    learner = rl.Learner(model, cfg, mesh=parallel.make_mesh(2, 2, 1), total_steps=2)
    state = learner.init_state(model)
    # process 0 packed 4 rows and 3 prediction rows, process 1 only 3 and 2
    local = [odd_batch(0, rows=4, pred_rows=3), odd_batch(1, rows=3, pred_rows=2)]
    if nproc > 1:
        batch = learner.put_batch(local[pid])
    else:  # the layout two processes give: each one's rows padded to its share (6 of 12)
        parts = [rl.batch.pad_rows(b, 6) for b in local]
        batch = learner.put_batch(jax.tree.map(lambda *x: np.concatenate(x), *parts))
    assert batch.tokens.shape[0] == 12 and batch.prediction.tokens.shape[0] == 12
    state, metrics = learner.update(state, batch)
    assert float(metrics["skipped"]) == 0.0 and float(metrics["clip_frac_last"]) > 0
    leaves = [multihost_utils.process_allgather(x, tiled=True)
              for x in jax.tree.leaves(state.params)]
    if pid == 0:
        np.save(out, np.concatenate([np.asarray(x, np.float64).ravel() for x in leaves]))
""")


@pytest.mark.slow  # three fresh JAX processes compiling the update: ~2 min on 2 cores
def test_two_processes_with_unequal_rows_equal_one_process(tmp_path):
    """put_batch on 2 processes x 2 devices whose rollouts packed different row counts:
    they agree on the padded size, and the update equals one process x 4 devices fed the
    same global layout."""
    multi, one, _, _ = two_processes_and_one(MULTI, tmp_path)
    np.testing.assert_allclose(multi, one, rtol=0, atol=adam_trajectory_tol(
        one, updates=3, learning_rate=PPO.learning_rate))
