"""Plain NumPy (float64) reference for the GRPO / CToM losses: the tests' oracle.

Written straight from CToM appendix A.1 and eq. 2, loop by loop, sharing no code with
`jaxtom.rl`.
"""

import math

import numpy as np


def group_advantages(rewards, group_size, eps=1e-6, scale="group"):
    if scale != "group":
        centred = []
        for g in range(0, len(rewards), group_size):
            r = [float(x) for x in rewards[g:g + group_size]]
            mean = sum(r) / len(r)
            equal = all(x == r[0] for x in r)
            centred += [0.0 if equal else x - mean for x in r]
        if scale == "none":
            return np.asarray(centred)
        groups = len(rewards) // group_size
        std = math.sqrt(sum(c * c for c in centred) / (groups * (group_size - 1)))
        return np.asarray([c / (std + eps) for c in centred])
    out = []
    for g in range(0, len(rewards), group_size):
        r = [float(x) for x in rewards[g:g + group_size]]
        mean = sum(r) / len(r)
        if all(x == r[0] for x in r):
            out += [0.0] * len(r)
            continue
        std = math.sqrt(sum((x - mean) ** 2 for x in r) / (len(r) - 1))
        out += [(x - mean) / (std + eps) for x in r]
    return np.asarray(out)


def grpo_loss(logp, old, ref, adv, mask, clip_low=0.2, clip_high=0.2, c=3.0, kl_coef=0.01,
              clamp=20.0, kl_clamp=10.0):
    total, count = 0.0, 0.0
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if not mask[i, j]:
                continue
            a = float(adv[i]) if np.ndim(adv) == 1 else float(adv[i, j])
            rho = math.exp(min(max(logp[i, j] - old[i, j], -clamp), clamp))
            b = min(rho * a, min(max(rho, 1 - clip_low), 1 + clip_high) * a)
            s = max(b, c * a) if a < 0 else b
            d = min(max(ref[i, j] - logp[i, j], -clamp), clamp)
            kl = min(max(math.expm1(d) - d, 0.0), kl_clamp)
            total += mask[i, j] * (-s + kl_coef * kl)
            count += mask[i, j]
    return total / count if count else 0.0


def prediction_nll(logp, target_mask):
    per_target = []
    for i in range(logp.shape[0]):
        idx = [j for j in range(logp.shape[1]) if target_mask[i, j]]
        if idx:
            per_target.append(-sum(logp[i, j] for j in idx) / len(idx))
    return sum(per_target) / len(per_target) if per_target else 0.0


def decision_entropy(logits, decision_mask):
    vals = []
    for i in range(logits.shape[0]):
        for j in range(1, logits.shape[1]):
            if decision_mask[i, j]:
                z = logits[i, j - 1].astype(np.float64)
                p = np.exp(z - z.max())
                p /= p.sum()
                vals.append(-sum(q * math.log(q) for q in p if q > 0))
    return sum(vals) / len(vals) if vals else 0.0


def grpo_loss_grad(logp, old, ref, adv, mask, clip_low=0.2, clip_high=0.2, c=3.0,
                   kl_coef=0.01, clamp=20.0, kl_clamp=10.0):
    """d grpo_loss / d logp, token by token, from the piecewise form: a token whose ratio the
    clip (or the dual clip) holds contributes no surrogate gradient."""
    grad = np.zeros(logp.shape)
    count = float(np.sum(mask))
    if not count:
        return grad
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if not mask[i, j]:
                continue
            a = float(adv[i]) if np.ndim(adv) == 1 else float(adv[i, j])
            x = logp[i, j] - old[i, j]
            rho = math.exp(min(max(x, -clamp), clamp))
            d_rho = rho if -clamp < x < clamp else 0.0
            clipped = min(max(rho, 1 - clip_low), 1 + clip_high)
            inside = 1 - clip_low < rho < 1 + clip_high
            if rho * a <= clipped * a:  # the unclipped term is the min
                b, d_s = rho * a, d_rho * a
            else:
                b, d_s = clipped * a, (d_rho * a if inside else 0.0)
            if a < 0 and c * a > b:  # dual clip: S = c A, constant
                d_s = 0.0
            d = ref[i, j] - logp[i, j]
            kl = math.expm1(min(max(d, -clamp), clamp)) - min(max(d, -clamp), clamp)
            d_kl = -math.expm1(d) if (-clamp < d < clamp and 0.0 < kl < kl_clamp) else 0.0
            grad[i, j] = mask[i, j] * (-d_s + kl_coef * d_kl) / count
    return grad


def clip_counts(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, c=3.0):
    """(tokens where the ratio clip holds the surrogate, tokens where the dual clip does)."""
    clip = dual = 0
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            if not mask[i, j]:
                continue
            a = float(adv[i]) if np.ndim(adv) == 1 else float(adv[i, j])
            rho = math.exp(logp[i, j] - old[i, j])
            clipped = min(max(rho, 1 - clip_low), 1 + clip_high)
            b = min(rho * a, clipped * a)
            clip += clipped * a < rho * a
            dual += a < 0 and c * a > b
    return clip, dual
