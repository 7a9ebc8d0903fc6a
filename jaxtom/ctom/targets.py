"""Prediction targets (section 4.2) and the GRPO batch of a CToM rollout.

Every draft's prediction gets a target: the user's real reply for the shown draft, and for
each discarded draft d(k) a counterfactual simulator reply, queried after the rollout (all at
once) with the visible history, the round's earlier drafts and predictions, and d(k): the same
context as the prediction (section 4.2; `counterfactual_request`). The target's context is exactly the token
prefix the policy saw when it predicted, ending with the [ANTICIPATED] slot.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

import numpy as np

from jaxtom.ctom.controller import Conversation
from jaxtom.ctom.protocol import PREDICTION_END, ChatGlue
from jaxtom.ctom.simulators import SimRequest, UserSimulator
from jaxtom.rl import group_advantages, pack_sequences, prediction_batch

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PredictionTarget:
    conversation: int
    round: int
    k: int
    context: list[int]  # the token prefix the prediction was sampled from
    target: str
    counterfactual: bool
    query: object = None  # the SimRequest that produced a counterfactual target (else None)
    closing: str = PREDICTION_END  # what ends the supervised reply


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


def reply_targets(convs: Sequence[Conversation], tok) -> list[PredictionTarget]:
    """The label-matched control's targets (direct mode): each visible message's real reply as
    the user's next chat turn, i.e. context = the round's tokens through the response and the
    opening of the user turn, target = the reply and its end of turn. The same NLL as CToM's
    predictions on the same kind of label, without a prediction slot or a revision."""
    glue = ChatGlue.from_tokenizer(tok)
    opening = tok.encode(glue.assistant_to_user)
    end_of_turn = tok.decode(tok.encode(glue.user_to_assistant)[:1])
    eos = set(tok.eos_token_ids)
    out = []
    for ci, conv in enumerate(convs):
        if conv.failed is not None:
            continue
        for rnd in conv.rounds:
            if rnd.reply is None or rnd.action == "COMMIT":
                continue
            tokens = list(conv.sequences[rnd.index].tokens)
            while tokens and tokens[-1] in eos:
                tokens.pop()
            out.append(PredictionTarget(ci, rnd.index, 0, tokens + opening, rnd.reply, False,
                                        closing=end_of_turn))
    return out


def spread_allocation(counts: Sequence[int], budget: int) -> list[int]:
    """How many targets each conversation keeps when only `budget` rows exist: as equal as
    the counts allow (round-robin), so no conversation loses all of its supervision while
    another keeps everything."""
    alloc = [0] * len(counts)
    left = max(0, int(budget))
    while left > 0 and any(a < c for a, c in zip(alloc, counts)):
        for i, c in enumerate(counts):
            if left and alloc[i] < c:
                alloc[i] += 1
                left -= 1
    return alloc


def _evenly(m: int, q: int) -> list[int]:
    """q of range(m), evenly spaced (first and last included when q >= 2)."""
    if q >= m:
        return list(range(m))
    if q <= 0:
        return []
    if q == 1:
        return [m // 2]
    return sorted({int(round(x)) for x in np.linspace(0, m - 1, q)})


def fit_target(context: Sequence[int], reply: Sequence[int], closing: Sequence[int],
               row_len: int) -> tuple[list[int], list[int], bool, bool] | None:
    """(context, target tokens, context cut, reply cut) for one row of `row_len`, or None.

    The reply (with its closing tag) is what is supervised, so it is kept whole whenever
    row_len allows, and the context keeps its LAST tokens (the nearest: the draft the
    prediction answers and the [ANTICIPATED] slot). A reply too long even then keeps its
    beginning, without the closing tag (the real reply did not end there), and the context
    keeps at least half the row. None when not even one context token and one reply token
    fit.
    """
    context, reply, closing = list(context), list(reply), list(closing)
    if not context or row_len < 2:
        return None
    full = reply + closing
    if len(full) + 1 <= row_len:
        keep = row_len - len(full)
        return context[-keep:], full, len(context) > keep, False
    keep = min(len(context), max(1, row_len // 2))
    room = row_len - keep
    if room < 1 or not reply:
        return None
    return context[-keep:], reply[:room], len(context) > keep, True


def rollout_batch(convs: Sequence[Conversation], groups: Sequence[int],
                  targets: Sequence[PredictionTarget], tok, *, num_rows: int, row_len: int,
                  pred_rows: int | None, pred_row_len: int, pad_id: int = 0,
                  pred_rows_multiple: int = 1, return_metrics: bool = False,
                  advantage_scale: str = "group", advantage_std_floor: float = 0.0):
    """The `jaxtom.rl.Batch` (with its prediction sub-batch) for one update.

    Failed conversations are left out and excluded from their group's statistics (ragged
    groups of `jaxtom.rl.group_advantages`, scaled by `advantage_scale` /
    `advantage_std_floor` as `trainer.*` says). Every round's sequence carries its
    conversation's advantage.

    Prediction rows (one target per row: the loss averages each row's tokens, then rows, as
    eq. 2 does): `pred_rows` None or 0 sizes the sub-batch from the data, one row per target
    (rounded up to `pred_rows_multiple` with empty rows, to bound recompilation); a fixed,
    smaller `pred_rows` keeps targets spread across conversations (`spread_allocation`) and
    evenly across each conversation's rounds. A target longer than `pred_row_len` keeps its
    reply and the nearest context (`fit_target`). Every drop and cut is counted: with
    `return_metrics=True` the result is (batch, metrics) where
      prediction_targets = trained + dropped_rows + dropped_failed + dropped_length,
    and truncated_context / truncated_reply count trained targets that were cut.
    """

    keep = [i for i, c in enumerate(convs) if c.failed is None]
    adv = np.asarray(group_advantages([convs[i].reward for i in keep],
                                      groups=[groups[i] for i in keep], scale=advantage_scale,
                                      std_floor=advantage_std_floor))
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
    metrics = {"prediction_targets": float(len(targets)), "prediction_targets_trained": 0.0,
               "prediction_targets_dropped_rows": 0.0, "prediction_targets_dropped_failed": 0.0,
               "prediction_targets_dropped_length": 0.0,
               "prediction_targets_truncated_context": 0.0,
               "prediction_targets_truncated_reply": 0.0}
    live = [t for t in targets if convs[t.conversation].failed is None]
    metrics["prediction_targets_dropped_failed"] = float(len(targets) - len(live))
    rows = []
    for t in live:
        fitted = fit_target(t.context, tok.encode(t.target), tok.encode(t.closing), pred_row_len)
        if fitted is None:
            metrics["prediction_targets_dropped_length"] += 1
            continue
        rows.append((t, fitted))
    if pred_rows and len(rows) > pred_rows:
        by_conv: dict[int, list] = {}
        for item in rows:
            by_conv.setdefault(item[0].conversation, []).append(item)
        convs_order = sorted(by_conv)
        alloc = spread_allocation([len(by_conv[c]) for c in convs_order], pred_rows)
        chosen = [by_conv[c][j] for c, q in zip(convs_order, alloc)
                  for j in _evenly(len(by_conv[c]), q)]
        metrics["prediction_targets_dropped_rows"] = float(len(rows) - len(chosen))
        rows = sorted(chosen, key=lambda item: (item[0].conversation, item[0].round, item[0].k))
    for _, (_, _, cut_ctx, cut_reply) in rows:
        metrics["prediction_targets_truncated_context"] += cut_ctx
        metrics["prediction_targets_truncated_reply"] += cut_reply
    metrics["prediction_targets_trained"] = float(len(rows))
    dropped = len(targets) - len(rows)
    # a fixed `pred_rows` drops targets by design (counted in the metrics); warn about the rest
    unplanned = dropped - metrics["prediction_targets_dropped_rows"]
    if unplanned or metrics["prediction_targets_truncated_reply"]:
        logger.warning("CToM prediction targets: %d of %d dropped (%d for rows, %d too long, "
                       "%d of failed conversations), %d replies cut", dropped, len(targets),
                       metrics["prediction_targets_dropped_rows"],
                       metrics["prediction_targets_dropped_length"],
                       metrics["prediction_targets_dropped_failed"],
                       metrics["prediction_targets_truncated_reply"])
    if rows:
        step = max(1, int(pred_rows_multiple))
        n_rows = pred_rows or -(-len(rows) // step) * step
        pred = prediction_batch([f[0] for _, f in rows], [f[1] for _, f in rows],
                                num_rows=n_rows, row_len=pred_row_len, pad_id=pad_id)
        batch = batch.replace(prediction=pred)
    return (batch, metrics) if return_metrics else batch
