"""Held-out reply prediction: a fixed set of (context, reply) pairs and each pair's NLL under a
model, so that models trained differently are compared on the same replies (paired).

A pair is what eq. 2 supervises: the token prefix a prediction u^(k) was sampled from (ending
with the [ANTICIPATED] slot) and the reply the simulated user gave to that draft, real or
counterfactual, closed by [PREDICTION_END], fitted to a row as the trainer fits it.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.protocol import PREDICTION_END
from jaxtom.ctom.targets import fit_target, prediction_targets
from jaxtom.rl.batch import prediction_batch
from jaxtom.rl.losses import token_logprobs


@dataclasses.dataclass
class Pairs:
    contexts: list[list[int]]
    replies: list[list[int]]  # reply tokens + the closing tag
    tasks: list[str]  # each pair's task id (the cluster of eq. 10)
    counterfactual: list[bool]

    def __len__(self) -> int:
        return len(self.contexts)


def heldout_pairs(policy, simulator, tok, tasks, cfg: ControllerConfig, *, conversations: int,
                  row_len: int, seed: int) -> Pairs:
    """Pairs from `policy`'s conversations on `tasks` (`conversations` each): every draft's
    prediction context with the user's real or counterfactual reply to that draft."""
    convs = run_conversations([t for t in tasks for _ in range(conversations)], policy,
                              simulator, tok, cfg, key=jax.random.key(seed), seed=seed)
    targets = prediction_targets(convs, simulator, seed=seed)
    closing = tok.encode(PREDICTION_END)
    out = Pairs([], [], [], [])
    for t in targets:
        fitted = fit_target(t.context, tok.encode(t.target), closing, row_len)
        if fitted is not None:
            out.contexts.append(fitted[0])
            out.replies.append(fitted[1])
            out.tasks.append(convs[t.conversation].task.id)
            out.counterfactual.append(t.counterfactual)
    return out


def pair_nll(model, pairs: Pairs, row_len: int, rows_per_call: int = 64) -> np.ndarray:
    """Mean per-token NLL of each pair's reply given its context, [len(pairs)]."""
    graph, state = nnx.split(model)

    @jax.jit
    def nll_rows(state, tokens, positions, segments, target):
        m = nnx.merge(graph, state)
        logp = token_logprobs(m(tokens, positions, segments), tokens)
        return -(logp * target).sum(-1) / jnp.maximum(target.sum(-1), 1.0)

    out = []
    for i in range(0, len(pairs), rows_per_call):
        ctx, rep = pairs.contexts[i:i + rows_per_call], pairs.replies[i:i + rows_per_call]
        b = prediction_batch(ctx, rep, num_rows=rows_per_call, row_len=row_len)
        vals = nll_rows(state, b.tokens, b.positions, b.segment_ids, b.target_mask)
        out.extend(np.asarray(vals)[:len(ctx)].tolist())
    return np.asarray(out, np.float64)


def mean_se(x) -> tuple[float, float]:
    """Mean and standard error over independent values."""
    x = np.asarray(x, np.float64)
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
