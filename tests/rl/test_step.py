"""The update step: eta cap against outside gradients, exact GRPO-only path, no-op padding,
micro-batches (a cap), packing, LoRA, and finiteness on degenerate batches."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from jaxtom import rl
from jaxtom.models import add_lora
from tests.rl.common import (TINY, adam_tol, gradient_tol, params_array, random_batch,
                             tiny_model)
from tests.tolerance import (assert_close, decoder_depth, decoder_reduction, float32_tol,
                             is_close)

jax.config.update("jax_default_matmul_precision", "highest")


def outside_gradients(learner, state, batch, cfg):
    """g_grpo, g_pred computed with jax.grad on the public loss functions, not the step."""
    gd = learner.graphdef

    def logp_of(params, tokens, positions, segments):
        logits = nnx.merge(gd, params, state.frozen)(tokens, positions, segments)
        return rl.token_logprobs(logits, tokens)

    b = jax.tree.map(jnp.asarray, batch)
    ref = logp_of(state.ref_params, b.tokens, b.positions, b.segment_ids)

    def l_grpo(params):
        lp = logp_of(params, b.tokens, b.positions, b.segment_ids)
        return rl.grpo_loss(lp, b.old_logp, ref, b.advantages, b.policy_mask,
                            kl_coef=cfg.kl_coef)

    def l_pred(params):
        p = b.prediction
        return rl.prediction_nll(logp_of(params, p.tokens, p.positions, p.segment_ids),
                                 p.target_mask)

    return jax.jit(lambda p: (jax.grad(l_grpo)(p), jax.grad(l_pred)(p)))(state.params)


def flat(tree):
    return np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(tree)])


# float32 bound on a loss gradient of the tiny model (tests/rl/common.py), as one count of
# rounding steps relative to each gradient's own scale
GRAD = gradient_tol()
GRAD_STEPS = GRAD["reduction"] * GRAD["depth"]


def leaves_close(actual, expected, reduction, scales=None):
    """assert_close per leaf (each against its own max |expected| unless `scales` given)."""
    a, e = jax.tree.leaves(actual), jax.tree.leaves(expected)
    assert len(a) == len(e)
    for i, (x, y) in enumerate(zip(a, e)):
        assert_close(x, y, reduction=reduction, scale=None if scales is None else scales[i],
                     err_msg=f"leaf {i}")


def max_abs(tree):
    return [float(np.abs(np.asarray(x)).max()) for x in jax.tree.leaves(tree)]


LAMBDA_PRED = 5.0
CFG = rl.StepConfig(lambda_pred=LAMBDA_PRED, lambda_entropy=1e-2, kl_coef=0.05,
                    learning_rate=1e-2)


@pytest.fixture(scope="module")
def learner():
    """One compiled step shared by the tests that use the same config and batch layout."""
    return rl.Learner(tiny_model(), CFG, total_steps=1000)


def test_eta_and_combined_gradient_match_formula(learner):
    model = tiny_model()
    state = learner.init_state(model)
    batch = random_batch(0)
    batch = batch.replace(decision_mask=np.zeros_like(batch.decision_mask))  # no entropy term
    g1, g2 = outside_gradients(learner, state, batch, CFG)
    n1, n2 = np.linalg.norm(flat(g1)), np.linalg.norm(flat(g2))
    eta_want = min(1.0, n1 / (2 * LAMBDA_PRED * n2))
    assert eta_want < 0.5  # the cap is active
    combined, eta, gg, gp = learner.gradients(state, learner.put_batch(batch))
    # a norm adds a sum of squares over all P entries to its gradient's bound; eta is a
    # ratio of two norms, each computed by both sides
    P = len(flat(g1))
    norm_steps = GRAD_STEPS + P
    eta_rel = float32_tol(1.0, 2 * norm_steps)
    assert float(eta) == pytest.approx(eta_want, rel=eta_rel, abs=0)
    leaves_close(gg, g1, GRAD_STEPS)
    leaves_close(gp, g2, GRAD_STEPS)
    scales = [a + eta_want * LAMBDA_PRED * b for a, b in zip(max_abs(g1), max_abs(g2))]
    want = jax.tree.map(lambda a, b: np.asarray(a) + eta_want * LAMBDA_PRED * np.asarray(b),
                        g1, g2)
    leaves_close(combined, want, GRAD_STEPS + 2 * norm_steps, scales)
    for lam in (LAMBDA_PRED, 1e-3):  # capped and uncapped regimes of the public rule
        c2, eta2 = rl.combine_gradients(g1, g2, lam)
        want = min(1.0, n1 / (2 * lam * n2))
        # same inputs: only the two norms (P terms each, here and in NumPy) and two ops
        assert float(eta2) == pytest.approx(want, rel=float32_tol(1.0, 2 * P), abs=0)
        leaves_close(c2, jax.tree.map(lambda a, b: np.asarray(a) + want * lam * np.asarray(b),
                                      g1, g2), 2 * P + 4,
                     [a + want * lam * b for a, b in zip(max_abs(g1), max_abs(g2))])
    assert float(rl.combine_gradients(g1, g2, 1e-3)[1]) == 1.0
    # the step applies exactly clip + optax's own AdamW to that combined gradient
    def adamw_step(weight_decay):
        adamw = optax.chain(optax.clip_by_global_norm(CFG.max_grad_norm),
                            optax.adamw(CFG.learning_rate, b1=CFG.adam_b1, b2=CFG.adam_b2,
                                        eps=CFG.adam_eps, weight_decay=weight_decay))
        return flat(jax.jit(lambda g, p: optax.apply_updates(
            p, adamw.update(g, adamw.init(p), p)[0]))(combined, state.params))
    want, no_decay = adamw_step(CFG.weight_decay), adamw_step(0.0)
    new_state, metrics = learner.update(state, learner.put_batch(batch))
    tol = adam_tol(want, learning_rate=CFG.learning_rate)
    np.testing.assert_allclose(flat(new_state.params), want, rtol=0, atol=tol)
    # a step that forgot the weight decay (lr x wd x |w|) fails it
    assert np.abs(flat(new_state.params) - no_decay).max() > 10 * tol
    assert float(metrics["eta"]) == pytest.approx(eta_want, rel=eta_rel, abs=0)
    assert float(metrics["grad_norm_grpo"]) == pytest.approx(n1, rel=float32_tol(1.0, norm_steps))
    assert float(metrics["grad_norm_pred"]) == pytest.approx(n2, rel=float32_tol(1.0, norm_steps))
    # under 1%: a missing factor 2, a forgotten cap (eta = 1) or eta = 0 all fail it
    assert eta_rel < 0.01, eta_rel

def test_eta_is_one_for_zero_prediction_gradient():
    g = {"a": jnp.ones(3), "b": jnp.full((2, 2), -2.0)}
    zero = jax.tree.map(jnp.zeros_like, g)
    combined, eta = rl.combine_gradients(g, zero, 0.7)
    assert float(eta) == 1.0
    np.testing.assert_array_equal(flat(combined), flat(g))
    _, eta = rl.combine_gradients(g, g, 0.0)  # lambda_pred = 0: eta 1 too
    assert float(eta) == 1.0
    _, eta = rl.combine_gradients(zero, g, 1.0)  # no GRPO gradient: prediction is switched off
    assert float(eta) == 0.0


def test_lambda_pred_zero_equals_grpo_only_exactly():
    model = tiny_model()
    batch = random_batch(1)
    a = rl.Learner(model, rl.StepConfig(lambda_pred=0.0, learning_rate=1e-2), total_steps=1000)
    b = rl.Learner(model, rl.StepConfig(lambda_pred=0.5, learning_rate=1e-2), total_steps=1000)
    sa, sb = a.init_state(model), b.init_state(model)
    for _ in range(2):
        sa, ma = a.update(sa, a.put_batch(batch))
        sb, mb = b.update(sb, b.put_batch(batch.replace(prediction=None)))
    np.testing.assert_array_equal(params_array(sa), params_array(sb))
    assert float(ma["eta"]) == 1.0 and float(ma["grad_norm_pred"]) == 0.0


def test_all_padding_step_is_a_noop(learner):
    model = tiny_model()
    state = learner.init_state(model)
    batch = random_batch(2)
    empty = batch.replace(policy_mask=np.zeros_like(batch.policy_mask),
                          decision_mask=np.zeros_like(batch.decision_mask),
                          prediction=batch.prediction.replace(
                              target_mask=np.zeros_like(batch.prediction.target_mask)))
    before = jax.tree.map(np.asarray, (state.params, state.opt_state))
    state, metrics = learner.update(state, learner.put_batch(empty))
    after = jax.tree.map(np.asarray, (state.params, state.opt_state))
    jax.tree.map(np.testing.assert_array_equal, before, after)
    assert float(metrics["skipped"]) == 1.0 and float(metrics["eta"]) == 1.0
    assert all(np.isfinite(float(v)) for v in metrics.values())
    state, metrics = learner.update(state, learner.put_batch(batch))  # real data does move
    assert float(metrics["skipped"]) == 0.0
    assert not np.array_equal(params_array(state), np.concatenate(
        [np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(before[0])]))


def test_no_nan_over_random_degenerate_batches(learner):
    model = tiny_model()
    state = learner.init_state(model)
    for seed in range(8):
        batch = random_batch(seed, degenerate=True)
        state, metrics = learner.update(state, learner.put_batch(batch))
        bad = {k: float(v) for k, v in metrics.items() if not np.isfinite(float(v))}
        assert not bad, (seed, bad)
        assert np.all(np.isfinite(params_array(state))), seed


def test_micro_batches_give_the_same_gradients(learner):
    model = tiny_model()
    batch = random_batch(3)
    micro = rl.Learner(model, dataclasses.replace(CFG, micro_batches=4), total_steps=1000)
    state = learner.init_state(model)
    whole = learner.gradients(state, learner.put_batch(batch))
    split = micro.gradients(state, micro.put_batch(batch))
    # each micro-batch sums its own tokens: another order of the same float32 sums; the
    # combined gradient and eta carry the two norms' sums of squares too
    steps = GRAD_STEPS + 2 * (GRAD_STEPS + len(flat(whole[2])))
    for a, b in zip(whole, split):
        leaves_close(b, a, steps)


def test_padding_rows_leave_gradients_unchanged(learner):
    """A batch padded to 11 policy / 7 prediction rows (as a process with fewer rows than
    another is) and then by the update to 12 / 8 for micro_batches=4 (`row_split`: 3 rows
    per micro-batch, the cap's 4 micro-batches) gives the gradients of the same 6 / 6 rows
    unpadded in one micro-batch."""
    model = tiny_model()
    batch = random_batch(5, num_seqs=6, group=3, num_rows=6)
    capped = rl.Learner(model, dataclasses.replace(CFG, micro_batches=4), total_steps=1000)
    assert learner.row_split(6, 1) == (6, 1) and capped.row_split(11, 1) == (12, 4)
    assert capped.row_split(7, 1) == (8, 4)
    state = learner.init_state(model)
    whole = learner.gradients(state, batch)
    padded = capped.gradients(state, rl.batch.pad_rows_to(batch, 11, 7))
    steps = GRAD_STEPS + 2 * (GRAD_STEPS + len(flat(whole[2])))
    for a, b in zip(whole, padded):
        leaves_close(b, a, steps)


def test_packed_rows_equal_one_sequence_per_row(learner):
    model = tiny_model()
    state = learner.init_state(model)
    rng = np.random.default_rng(4)
    seqs = [rng.integers(0, 48, 6).tolist() for _ in range(4)]
    masks = [[0, 0, 1, 1, 1, 1]] * 4
    adv, groups = [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1]
    one = rl.pack_sequences(seqs, masks, adv, groups, num_rows=4, row_len=12)
    packed = rl.pack_sequences(seqs, masks, adv, groups, num_rows=2, row_len=12)
    assert packed.segment_ids.max() == 2
    g_one = learner.gradients(state, learner.put_batch(one))[0]
    g_packed = learner.gradients(state, learner.put_batch(packed))[0]
    leaves_close(g_packed, g_one, GRAD_STEPS)


def _groups_sharing_prompts(seed, *, groups=3, group=4, prompt_len=(1, 6), completion=(1, 6)):
    """Random GRPO groups: each group's samples share one prompt (lengths vary)."""
    rng = np.random.default_rng(seed)
    seqs, masks, lens, ids = [], [], [], []
    for g in range(groups):
        prompt = rng.integers(0, 48, int(rng.integers(*prompt_len))).tolist()
        for _ in range(group):
            c = rng.integers(0, 48, int(rng.integers(*completion))).tolist()
            seqs.append(prompt + c)
            masks.append([0.0] * len(prompt) + [1.0] * len(c))
            lens.append(len(prompt))
            ids.append(g)
    adv = np.asarray(rl.group_advantages(rng.normal(size=len(seqs)), group))
    return seqs, masks, adv, ids, lens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_prompt_rows_equal_one_sequence_per_row(learner, seed):
    """Each group's prompt packed once (`pack_shared_prompts`, parent_ids) gives the same
    token log-probs and the same update gradient as one sequence per row; with the parent
    link dropped, completions lose their prompt and the log-probs move (a real check)."""
    model = tiny_model()
    state = learner.init_state(model)
    seqs, masks, adv, ids, lens = _groups_sharing_prompts(seed)
    rows = [rl.pack_sequences([x], [m], [a], [i], num_rows=1, row_len=12)
            for x, m, a, i in zip(seqs, masks, adv, ids)]
    one = jax.tree.map(lambda *r: np.concatenate(r), *rows)  # one sequence per row, in order
    shared = rl.pack_shared_prompts(seqs, masks, adv, ids, lens, num_rows=2, row_len=40)
    assert shared.tokens.size < one.tokens.size
    assert int(shared.policy_mask.sum()) == int(one.policy_mask.sum())
    cfg = dataclasses.replace(CFG, lambda_pred=0.0, lambda_entropy=0.0, kl_coef=0.0)
    plain = rl.Learner(model, cfg, total_steps=1000)
    lp_one = np.asarray(plain.logprobs(state, one))[one.policy_mask > 0]
    lp_shared = np.asarray(plain.logprobs(state, shared))[shared.policy_mask > 0]
    # policy tokens come out in the same order in both layouts (groups, then samples)
    red = decoder_reduction(TINY, 12) + TINY.vocab_size
    assert_close(lp_shared, lp_one, reduction=red, depth=decoder_depth(TINY))
    broken = shared.replace(parent_ids=shared.segment_ids)
    lp_broken = np.asarray(plain.logprobs(state, broken))[shared.policy_mask > 0]
    assert not is_close(lp_broken, lp_one, reduction=red, depth=decoder_depth(TINY))
    g_one = plain.gradients(state, plain.put_batch(one))[0]
    g_shared = plain.gradients(state, plain.put_batch(shared))[0]
    leaves_close(g_shared, g_one, GRAD_STEPS)


def test_shared_prompt_packing_lays_out_families():
    seqs = [[5, 6, 7, 1], [5, 6, 7, 2, 3], [9, 4], [9, 8]]
    masks = [[0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 1], [0, 1]]
    b = rl.pack_shared_prompts(seqs, masks, [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1],
                               [3, 3, 1, 1], num_rows=2, row_len=8)
    # family 1: prompt head [5, 6] (segment 1), then 7|1 and 7|2 3 (segments 2, 3)
    assert b.tokens[0].tolist() == [5, 6, 7, 1, 7, 2, 3, 0]
    assert b.positions[0].tolist() == [0, 1, 2, 3, 2, 3, 4, 0]
    assert b.segment_ids[0].tolist() == [1, 1, 2, 2, 3, 3, 3, 0]
    assert b.parent_ids[0].tolist() == [1, 1, 1, 1, 1, 1, 1, 0]
    assert b.policy_mask[0].tolist() == [0, 0, 0, 1, 0, 1, 1, 0]
    assert b.advantages[0].tolist() == [0, 0, 1, 1, -1, -1, -1, 0]  # the head scores nothing
    # family 2 has a one-token prompt: no head, each member starts with it
    assert b.tokens[1].tolist()[:4] == [9, 4, 9, 8]
    assert b.segment_ids[1].tolist()[:4] == [2, 2, 3, 3]
    with pytest.raises(ValueError, match="prompt length 0"):
        rl.pack_shared_prompts(seqs, masks, [0.0] * 4, [0, 0, 1, 1], [0, 3, 1, 1],
                               num_rows=2, row_len=8)
    with pytest.raises(ValueError, match="does not fit"):
        rl.pack_shared_prompts(seqs, masks, [0.0] * 4, [0, 0, 1, 1], [3, 3, 1, 1],
                               num_rows=1, row_len=8)


def test_lora_trains_only_adapters_and_reference_is_base():
    model = add_lora(tiny_model(), rank=2)
    learner = rl.Learner(model, rl.StepConfig(lora=True, learning_rate=1e-2, kl_coef=0.1), total_steps=1000)
    assert learner.reference == "lora_disabled"
    state = learner.init_state(model)
    frozen_before = jax.tree.map(np.asarray, state.frozen)
    batch = random_batch(5, off_policy=False)
    for _ in range(3):
        state, metrics = learner.update(state, learner.put_batch(batch))
    jax.tree.map(np.testing.assert_array_equal, frozen_before,
                 jax.tree.map(np.asarray, state.frozen))
    leaves = jax.tree_util.tree_leaves_with_path(state.params)
    names = {jax.tree_util.keystr(p) for p, _ in leaves}
    assert names and all("lora" in n for n in names)
    assert float(metrics["kl"]) > 0  # adapters moved away from the base reference
    assert float(metrics["clip_frac"]) == 0.0  # on-policy: ratio 1


def test_bad_configs_are_named():
    with pytest.raises(ValueError, match="no LoRA adapters"):
        rl.Learner(tiny_model(), rl.StepConfig(lora=True), total_steps=1000)
    for name in ("micro_batches", "ppo_mini_batches", "ppo_epochs"):
        with pytest.raises(ValueError, match=f"StepConfig.{name} must be a positive int"):
            rl.Learner(tiny_model(), rl.StepConfig(**{name: 0}), total_steps=1000)
    with pytest.raises(ValueError, match="reference must be one of"):
        rl.Learner(tiny_model(), rl.StepConfig(reference="copy"), total_steps=1000)


def test_split_shared_prompt_packing_fills_fixed_rows():
    """`split=True`: a family goes on in another row where its next member does not fit,
    its prompt packed again there; rows fill first-fit (`shared_pieces` says where)."""
    seqs = [[5, 6, 7, 1], [5, 6, 7, 2, 3], [9, 4], [9, 8]]
    masks = [[0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 1], [0, 1]]
    args = (seqs, masks, [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1], [3, 3, 1, 1])
    pieces = rl.batch.shared_pieces(seqs, [0, 0, 1, 1], [3, 3, 1, 1], 6, split=True)
    assert pieces == [(0, 0, [0]), (1, 0, [1]), (0, 4, [2]), (2, 0, [3])]
    b = rl.pack_shared_prompts(*args, num_rows=3, row_len=6, split=True)
    assert b.tokens.tolist() == [[5, 6, 7, 1, 9, 4], [5, 6, 7, 2, 3, 0], [9, 8, 0, 0, 0, 0]]
    assert b.positions[1].tolist() == [0, 1, 2, 3, 4, 0]  # the prompt again, then member 2
    assert b.parent_ids[0].tolist() == [1, 1, 1, 1, 3, 3]
    assert b.segment_ids[0].tolist() == [1, 1, 2, 2, 4, 4]
    assert b.policy_mask.sum() == sum(map(sum, masks))
    # whole families do not fit rows of 6 (family 1 takes 7 entries)
    with pytest.raises(ValueError, match="does not fit"):
        rl.pack_shared_prompts(*args, num_rows=3, row_len=6)
    with pytest.raises(ValueError, match="a sequence of 5 tokens does not fit"):
        rl.pack_shared_prompts(*args, num_rows=3, row_len=4, split=True)


def test_split_shared_prompt_rows_equal_one_sequence_per_row(learner):
    """Families split over fixed-length rows (each piece with its prompt) give the log-probs
    and the update gradient of one sequence per row."""
    model = tiny_model()
    state = learner.init_state(model)
    seqs, masks, adv, ids, lens = _groups_sharing_prompts(0)
    pieces = rl.batch.shared_pieces(seqs, ids, lens, 14, split=True)
    families = rl.batch.shared_prompt_families(seqs, ids, lens)
    assert len(pieces) > len(families)  # some family really is split
    rows = max(r for r, _, _ in pieces) + 1
    shared = rl.pack_shared_prompts(seqs, masks, adv, ids, lens, num_rows=rows, row_len=14,
                                    split=True)
    one = jax.tree.map(lambda *r: np.concatenate(r), *[
        rl.pack_sequences([x], [m], [a], [i], num_rows=1, row_len=14)
        for x, m, a, i in zip(seqs, masks, adv, ids)])
    cfg = dataclasses.replace(CFG, lambda_pred=0.0, lambda_entropy=0.0, kl_coef=0.0)
    plain = rl.Learner(model, cfg, total_steps=1000)
    # the sequence each shared entry belongs to: policy tokens in (sequence, position)
    # order are then those of one sequence per row, in its row-major order
    member = np.full(shared.tokens.shape, len(seqs))
    for r, lo, members in pieces:
        at = lo + lens[members[0]] - 1
        for i in members:
            member[r, at:at + len(seqs[i]) - lens[i] + 1] = i
            at += len(seqs[i]) - lens[i] + 1
    key = (member * 100 + shared.positions)[shared.policy_mask > 0]
    lp_one = np.asarray(plain.logprobs(state, one))[one.policy_mask > 0]
    lp_shared = np.asarray(plain.logprobs(state, shared))[shared.policy_mask > 0]
    red = decoder_reduction(TINY, 14) + TINY.vocab_size
    assert_close(lp_shared[np.argsort(key)], lp_one, reduction=red, depth=decoder_depth(TINY))
    g_one = plain.gradients(state, plain.put_batch(one))[0]
    g_shared = plain.gradients(state, plain.put_batch(shared))[0]
    leaves_close(g_shared, g_one, GRAD_STEPS)
