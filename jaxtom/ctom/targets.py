"""Prediction targets (section 4.2) and the GRPO batch of a CToM rollout.

Every draft's prediction gets a target: the user's real reply for the shown draft, and for
each discarded draft d(k) a counterfactual simulator reply, queried after the rollout (all at
once) with the visible history, the round's earlier drafts and predictions, and d(k): the same
context as the prediction (section 4.2; `counterfactual_request`). The target's context is exactly the token
prefix the policy saw when it predicted, ending with the [ANTICIPATED] slot.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from jaxtom.ctom.controller import Conversation
from jaxtom.ctom.protocol import PREDICTION_END
from jaxtom.ctom.simulators import SimRequest, UserSimulator


@dataclasses.dataclass(frozen=True)
class PredictionTarget:
    conversation: int
    round: int
    k: int
    context: list[int]  # the token prefix the prediction was sampled from
    target: str
    counterfactual: bool
    query: object = None  # the SimRequest that produced a counterfactual target (else None)


def counterfactual_request(conv: Conversation, rnd, k: int) -> SimRequest:
    """Section 4.2's query for draft d(k) of round `rnd`: the visible history h_t, the
    round's earlier drafts with the assistant's predictions of the replies to them, then
    d(k) -- everything the prediction u^(k) it supervises was conditioned on."""
    history = tuple(conv.visible[:rnd.history_len]) + (("assistant", rnd.drafts[k]),)
    earlier = tuple(zip(rnd.drafts[:k], rnd.predictions[:k]))
    return SimRequest(conv.task, history, earlier=earlier)


def prediction_targets(convs: Sequence[Conversation], simulator: UserSimulator, *,
                       seed: int = 0) -> list[PredictionTarget]:
    """Targets for every prediction of every non-failed conversation.

    A shown draft without a reply (the math answer-gated end, or the last round) has no
    target; a counterfactual query that fails is dropped, not fatal.
    """
    real, queries = [], []
    for ci, conv in enumerate(convs):
        if conv.failed is not None:
            continue
        for rnd in conv.rounds:
            seg = conv.sequences[rnd.index]
            for k, prefix in enumerate(rnd.prediction_prefix):
                ctx = seg.tokens[:prefix]
                if k == len(rnd.drafts) - 1:
                    if rnd.reply is not None:
                        real.append(PredictionTarget(ci, rnd.index, k, ctx, rnd.reply, False))
                    continue
                queries.append(((ci, rnd.index, k, ctx), counterfactual_request(conv, rnd, k)))
    out = list(real)
    if queries:
        replies = simulator.reply([q for _, q in queries], seed=seed)
        for ((ci, t, k, ctx), query), rep in zip(queries, replies):
            if rep.error is None:
                out.append(PredictionTarget(ci, t, k, ctx, rep.text, True, query))
    return sorted(out, key=lambda x: (x.conversation, x.round, x.k))


def group_advantages_np(rewards: Sequence[float], groups: Sequence[int],
                        eps: float = 1e-6) -> np.ndarray:
    """Eq. 5 per group (sample std, G-1); equal rewards or a lone member -> 0."""
    rewards = np.asarray(rewards, np.float64)
    groups = np.asarray(groups)
    adv = np.zeros_like(rewards)
    for g in np.unique(groups):
        idx = np.nonzero(groups == g)[0]
        r = rewards[idx]
        if len(idx) < 2 or np.all(r == r[0]):
            continue
        adv[idx] = (r - r.mean()) / (r.std(ddof=1) + eps)
    return adv.astype(np.float32)


def rollout_batch(convs: Sequence[Conversation], groups: Sequence[int],
                  targets: Sequence[PredictionTarget], tok, *, num_rows: int, row_len: int,
                  pred_rows: int, pred_row_len: int, pad_id: int = 0):
    """The `jaxtom.rl.Batch` (with its prediction sub-batch) for one update.

    Failed conversations are left out and excluded from their group's statistics. Every
    round's sequence carries its conversation's advantage.
    """
    from jaxtom.rl import pack_sequences, prediction_batch

    keep = [i for i, c in enumerate(convs) if c.failed is None]
    adv = group_advantages_np([convs[i].reward for i in keep], [groups[i] for i in keep])
    seqs, masks, decisions, advs, gids = [], [], [], [], []
    for a, i in zip(adv, keep):
        for seg in convs[i].sequences:
            seqs.append(seg.tokens)
            masks.append(seg.policy)
            decisions.append(seg.decision)
            advs.append(float(a))
            gids.append(int(groups[i]))
    batch = pack_sequences(seqs, masks, advs, gids, num_rows=num_rows, row_len=row_len,
                           pad_id=pad_id, decision_masks=decisions)
    closing = tok.encode(PREDICTION_END)
    kept_targets = [t for t in targets if convs[t.conversation].failed is None][:pred_rows]
    contexts = [t.context for t in kept_targets]
    replies = [tok.encode(t.target)[:max(0, pred_row_len - len(t.context) - len(closing))]
               + closing for t in kept_targets]
    fits = [(c, r) for c, r in zip(contexts, replies) if len(c) + len(r) <= pred_row_len]
    if fits:
        pred = prediction_batch([c for c, _ in fits], [r for _, r in fits],
                                num_rows=pred_rows, row_len=pred_row_len, pad_id=pad_id)
        batch = batch.replace(prediction=pred)
    return batch
