"""Plain NumPy (float64) reference for the GRPO / CToM losses: the tests' oracle.

Written straight from CToM appendix A.1 and eq. 2, loop by loop, sharing no code with
`jaxtom.rl`.
"""

import math

import numpy as np


def group_advantages(rewards, group_size, eps=1e-6):
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
