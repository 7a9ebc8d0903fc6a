"""GRPO and CToM losses as pure functions on per-token arrays.

Every loss comes in two forms: a `*_terms` function returning a `(sum, count)` pair, so that
token means stay exact when a batch is split into micro-batches (sum the sums, sum the counts,
divide once), and a scalar convenience wrapper. Per-token arrays are aligned with the token
ids: entry t belongs to token t (predicted from position t-1), so entry 0 of a row is never
a policy token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# log-ratios and KL log-differences are clamped to this range before exponentiation: e^20 is
# ~5e8, far beyond any ratio the clip keeps, and it keeps float32 finite.
LOG_RATIO_CLAMP = 20.0
# cap on a single token's k3 KL estimate (the estimate is unbounded in delta).
KL_CLAMP = 10.0


def _safe_div(total, count):
    return total / jnp.maximum(count, 1.0)


ADVANTAGE_SCALES = ("group", "batch", "none")


def group_advantages(rewards: jax.Array, group_size: int | None = None, eps: float = 1e-6,
                     scale: str = "group", std_floor: float = 0.0, *,
                     groups=None) -> jax.Array:
    """GRPO advantages: rewards centred on their group's mean, then divided by a scale.

    Groups are `group_size` consecutive rewards, or, with `groups` (one id per reward, any
    order, any sizes), the rewards sharing an id: ragged groups, e.g. CToM's once failed
    conversations drop out. A lone member gets zero advantage.

    `scale="group"` (GRPO): each group's own sample std (denominator size-1), so every group
    weighs the same however little its rewards differ. `"batch"`: one std over all the
    batch's centred rewards, so a group whose rewards barely differ gets a small advantage
    instead of unit-scale noise (MindZero's pre-pick prompts: two pairs within 0.4 nats).
    `"none"`: centred rewards as they are (Dr. GRPO). `std_floor` (with "group"): a group's
    std counts as at least this, so rewards that differ by less than the floor stay small
    advantages while wider groups are normalised as in GRPO. A group of equal rewards gets
    exactly zero advantage in every mode, and no critic is involved. This is every
    rollout's advantage function (gridworld, QA, household, CToM, the generic trainer), so
    `trainer.advantage_scale` and `advantage_std_floor` mean the same everywhere.
    """
    if std_floor < 0 or (std_floor > 0 and scale != "group"):
        raise ValueError(f"std_floor must be >= 0 and only with scale='group', got "
                         f"{std_floor} with scale={scale!r}")
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"advantage scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    rewards = jnp.asarray(rewards, jnp.float32)
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [num_sequences], got shape {rewards.shape}")
    if (group_size is None) == (groups is None):
        raise ValueError("give exactly one of group_size (consecutive groups) and groups "
                         "(one group id per reward)")
    if groups is None:
        if group_size < 2 or rewards.shape[0] % group_size:
            raise ValueError(f"group_size must be >= 2 and divide the number of rewards "
                             f"({rewards.shape[0]}), got {group_size}")
        blocks = [rewards.reshape(-1, group_size)]
        index = None
    else:
        index = group_blocks(groups, rewards.shape[0])
        blocks = [rewards[jnp.asarray(ix)] for ix in index]
    centred = [_centred(r) for r in blocks]
    if scale == "none":
        adv = centred
    elif scale == "group":
        adv = []
        for c in centred:
            std = jnp.sqrt(jnp.sum(c * c, axis=1, keepdims=True) / (c.shape[1] - 1))
            adv.append(c / (jnp.maximum(std, std_floor) + eps))
    else:  # the pooled within-group std of the batch
        dof = sum(c.shape[0] * (c.shape[1] - 1) for c in centred)
        std = jnp.sqrt(sum(jnp.sum(c * c) for c in centred) / max(dof, 1))
        adv = [c / (std + eps) for c in centred]
    if index is None:
        return adv[0].reshape(-1)
    out = jnp.zeros(rewards.shape[0], jnp.float32)
    for ix, a in zip(index, adv):
        out = out.at[jnp.asarray(ix.reshape(-1))].set(a.reshape(-1))
    return out


def _centred(r: jax.Array) -> jax.Array:
    """[groups, size] rewards minus their row's mean; rows of equal rewards (up to float
    rounding) give exactly zero, not noise / eps."""
    centred = r - r.mean(axis=1, keepdims=True)
    equal = jnp.all(r == r[:, :1], axis=1, keepdims=True)
    return jnp.where(equal, 0.0, centred)


def group_blocks(groups, n: int) -> list:
    """The reward indices of each group of two or more, as one int [groups, size] array per
    group size (members in order); lone members belong to none."""
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must hold one id per reward ({n}), got shape {groups.shape}")
    members: dict = {}
    for i, g in enumerate(groups.tolist()):
        members.setdefault(g, []).append(i)
    by_size: dict[int, list] = {}
    for m in members.values():
        if len(m) >= 2:
            by_size.setdefault(len(m), []).append(m)
    return [np.asarray(v, np.int64) for _, v in sorted(by_size.items())]


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log p(tokens[t] | tokens[<t]) aligned with `tokens`; entry 0 of each row is 0.

    The same float operations as log_softmax followed by a gather, but neither the [B, T, V]
    log-softmax nor a shifted copy of the logits is formed, and the pick is a masked sum
    whose gradient fuses with the softmax's instead of scattering into a zero [B, T, V].
    """
    x = logits.astype(jnp.float32)
    shifted = x - jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    following = jnp.pad(tokens[:, 1:], ((0, 0), (0, 1)))  # the token each position predicts
    hit = jnp.arange(x.shape[-1]) == following[..., None]
    picked = jnp.sum(jnp.where(hit, shifted, 0.0), axis=-1)
    logp = picked - jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))
    return jnp.pad(logp[:, :-1], ((0, 0), (1, 0)))


def token_entropy(logits: jax.Array) -> jax.Array:
    """Entropy of the next-token distribution, aligned like `token_logprobs` (entry 0 is 0)."""
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return jnp.pad(ent, ((0, 0), (1, 0)))


def _per_token_advantages(advantages, mask):
    advantages = jnp.asarray(advantages, jnp.float32)
    if advantages.ndim == 1:
        advantages = advantages[:, None]
    if advantages.ndim != 2 or advantages.shape[0] != mask.shape[0]:
        raise ValueError(f"advantages must be [batch] or [batch, seq] matching the mask "
                         f"{mask.shape}, got shape {advantages.shape}")
    return advantages


def dual_clip_surrogate(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.2,
                        dual_clip=3.0):
    """Per-token dual-clipped surrogate S and whether the clip was active (for metrics).

    B = min(rho A, clip(rho, 1-clip_low, 1+clip_high) A); S = max(B, c A) where A < 0.
    """
    log_ratio = jnp.clip(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    b = jnp.minimum(unclipped, clipped)
    s = jnp.where(advantages < 0, jnp.maximum(b, dual_clip * advantages), b)
    return s, clipped < unclipped, (advantages < 0) & (dual_clip * advantages > b)


def k3_kl(logp, ref_logp):
    """k3 estimate exp(d) - d - 1 with d = ref - logp, as expm1(d) - d (exact near d = 0)."""
    delta = jnp.clip(ref_logp - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return jnp.clip(jnp.expm1(delta) - delta, 0.0, KL_CLAMP)


def grpo_terms(logp, old_logp, ref_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
               dual_clip=3.0, kl_coef=0.01):
    """(sum over policy tokens of -S + kl_coef D, number of policy tokens, stats).

    `advantages` is per sequence [B] or per token [B, T]; `mask` selects policy tokens.
    `stats` holds masked sums of the KL and of the clip indicators, for metrics.
    """
    mask = jnp.asarray(mask, jnp.float32)
    adv = _per_token_advantages(advantages, mask)
    s, clipped, dual = dual_clip_surrogate(logp, old_logp, adv, clip_low=clip_low,
                                           clip_high=clip_high, dual_clip=dual_clip)
    if ref_logp is None:
        if kl_coef:
            raise ValueError(f"kl_coef={kl_coef} needs reference log-probs, got ref_logp=None")
        kl = jnp.zeros_like(logp)
    else:
        kl = k3_kl(logp, ref_logp)
    per_token = jnp.where(mask > 0, -s + kl_coef * kl, 0.0)
    stats = {"kl": jnp.sum(jnp.where(mask > 0, kl, 0.0)),
             "clip": jnp.sum(jnp.where(mask > 0, clipped, False)),
             "dual_clip": jnp.sum(jnp.where(mask > 0, dual, False))}
    return jnp.sum(per_token * mask), jnp.sum(mask), stats


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, clip_low=0.2, clip_high=0.2,
              dual_clip=3.0, kl_coef=0.01) -> jax.Array:
    """L_GRPO: token mean over the policy mask of -S + kl_coef D (0 for an empty mask)."""
    total, count, _ = grpo_terms(logp, old_logp, ref_logp, advantages, mask, clip_low=clip_low,
                                 clip_high=clip_high, dual_clip=dual_clip, kl_coef=kl_coef)
    return _safe_div(total, count)


def prediction_terms(logp, target_mask):
    """(sum over target rows of the row's mean NLL, number of rows with a target).

    Each row of the prediction sub-batch holds one target reply (CToM eq. 2): its tokens
    are averaged first, then targets are averaged, so long replies do not dominate.
    """
    target_mask = jnp.asarray(target_mask, jnp.float32)
    n = jnp.sum(target_mask, axis=-1)
    row_sum = -jnp.sum(jnp.where(target_mask > 0, logp, 0.0) * target_mask, axis=-1)
    has = n > 0
    return jnp.sum(jnp.where(has, row_sum / jnp.maximum(n, 1.0), 0.0)), jnp.sum(has)


def prediction_nll(logp, target_mask) -> jax.Array:
    """L_pred: mean over targets of each target's mean token NLL (0 with no targets)."""
    total, count = prediction_terms(logp, target_mask)
    return _safe_div(total, count.astype(jnp.float32))


def decision_entropy_terms(entropy, decision_mask):
    """(sum of the policy's entropy at decision tokens, number of decision tokens)."""
    decision_mask = jnp.asarray(decision_mask, jnp.float32)
    return (jnp.sum(jnp.where(decision_mask > 0, entropy, 0.0) * decision_mask),
            jnp.sum(decision_mask))


def decision_entropy(logits, decision_mask) -> jax.Array:
    """Mean entropy of the distribution that chose each marked action-decision token."""
    total, count = decision_entropy_terms(token_entropy(logits), decision_mask)
    return _safe_div(total, count)
