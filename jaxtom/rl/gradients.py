"""Rules the step applies to gradient and parameter pytrees: the CToM prediction-gradient
cap (eq. 7) and the compensated (Kahan) parameter update for low-precision parameters.

Kept apart from the step so that tests (and other trainers) can apply the exact rule the
step uses to gradients computed anywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtom.rl.batch import split_rows


def global_norm(tree) -> jax.Array:
    """L2 norm over every leaf of a pytree, accumulated in float32."""
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.float32(0.0)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


def prediction_scale(grpo_norm, pred_norm, lambda_pred) -> jax.Array:
    """eta = min(1, |g_grpo| / (2 lambda_pred |g_pred|)), 1 when lambda_pred |g_pred| = 0.

    Held fixed (stop-gradient): eta scales a gradient, it is not part of the objective.
    """
    denom = 2.0 * lambda_pred * pred_norm
    safe = jnp.where(denom > 0, denom, 1.0)
    eta = jnp.where(denom > 0, jnp.minimum(1.0, grpo_norm / safe), 1.0)
    return jax.lax.stop_gradient(eta.astype(jnp.float32))


def combine_gradients(g_grpo, g_pred, lambda_pred):
    """(g_grpo + eta * lambda_pred * g_pred, eta), with `g_pred` the unscaled grad of L_pred."""
    eta = prediction_scale(global_norm(g_grpo), global_norm(g_pred), lambda_pred)
    scale = eta * lambda_pred
    combined = jax.tree.map(lambda a, b: a + (scale * b).astype(a.dtype), g_grpo, g_pred)
    return combined, eta


def compensated_add(params, compensation, updates):
    """(params + updates, new compensation) with Kahan summation, leaf by leaf.

    `compensation` (same dtypes as `params`) holds what earlier roundings of the parameters
    lost. A bfloat16 weight near 1e-2 is spaced ~6e-5 apart, so a 1e-6 update added plainly
    rounds away every time; here it accumulates in the compensation until it moves the
    stored weight, so params + compensation follows the exact (float32) sum.
    """
    def one(p, c, u):
        y = u.astype(jnp.float32) + c.astype(jnp.float32)
        t = p.astype(jnp.float32) + y
        new = t.astype(p.dtype)
        return new, (t - new.astype(jnp.float32)).astype(c.dtype)

    pairs = jax.tree.map(one, params, compensation, updates)
    is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
    return (jax.tree.map(lambda x: x[0], pairs, is_leaf=is_pair),
            jax.tree.map(lambda x: x[1], pairs, is_leaf=is_pair))


def as_float32(tree):
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def accumulate(fn, tree, micro: int):
    """The sum of `fn` over `micro` interleaved row splits of `tree` (a scan; no loop for 1)."""
    if micro == 1:
        return fn(tree)
    parts = split_rows(tree, micro)
    shapes = jax.eval_shape(fn, jax.tree.map(lambda x: x[0], parts))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def body(acc, part):
        return jax.tree.map(jnp.add, acc, fn(part)), None

    return jax.lax.scan(body, zeros, parts)[0]
