"""Every prediction target of a batch is trained or counted (issue 11, eq. 2): the prediction
sub-batch is sized from the data, a smaller fixed size keeps targets spread across
conversations, and long targets keep their reply and nearest context."""

import numpy as np
import pytest

from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.simulators import ScriptedSimulator
from jaxtom.ctom.targets import (PredictionTarget, fit_target, prediction_targets,
                                 rollout_batch, spread_allocation)

from .scripted import TOK, run_scripted

TASKS = builtin_tasks("math")[:4]
CLOSING = TOK.encode(P.PREDICTION_END)


def script(ctx, kind):
    """Round 0: a wrong draft, revised to another wrong one (shown, real reply); round 1: a
    wrong draft revised to the right answer (shown, answer-gated end): 3 targets each."""
    task = next(t for t in TASKS if t.prompt in ctx)
    start = ctx.rindex(P.PLAN_START)
    t = ctx[:start].count("<|start_header_id|>assistant") - 1
    k = ctx[start:].count(P.DRAFT_START) - 1
    if kind == "plan":
        return "p" + P.PLAN_END
    if kind == "decision":
        return "A"
    if kind == "draft":
        answer = task.reference if (t, k) == (1, 1) else str(100 + 10 * t + k)
        return rf"x = \boxed{{{answer}}}" + P.DRAFT_END
    return ("ok" if k == 1 else "That's wrong.") + P.PREDICTION_END


@pytest.fixture(scope="module")
def rollout():
    cfg = ControllerConfig.for_domain("math", max_rounds=3, plan_cap=8, draft_cap=32,
                                      revision_cap=32, prediction_cap=16)
    convs, _ = run_scripted(script, TASKS, cfg)
    targets = prediction_targets(convs, ScriptedSimulator())
    return convs, targets


def _trained(batch, targets, spans=None):
    """Which targets ended up in prediction rows (matched by context + reply tokens); the
    (context length, reply length) of each row go to `spans` when given."""
    pred = batch.prediction
    found = []
    for row, mask in zip(np.asarray(pred.tokens), np.asarray(pred.target_mask)):
        if not mask.any():
            continue
        start = int(np.argmax(mask > 0))
        n = int(mask.sum())
        ctx, reply = row[:start].tolist(), row[start:start + n].tolist()
        hits = [i for i, t in enumerate(targets) if t.context[-len(ctx):] == ctx
                and reply == TOK.encode(t.target) + CLOSING and i not in found]
        assert hits, "a prediction row matches no target"
        found.append(hits[0])
        if spans is not None:
            spans.append((len(ctx), n))
    return found


def _batch(convs, targets, **kw):
    return rollout_batch(convs, [0, 0, 1, 1], targets, TOK, num_rows=8, row_len=1024,
                         return_metrics=True, **kw)


def _balanced(m):
    return m["prediction_targets"] == (m["prediction_targets_trained"]
                                       + m["prediction_targets_dropped_rows"]
                                       + m["prediction_targets_dropped_failed"]
                                       + m["prediction_targets_dropped_length"])


def test_rollout_has_twelve_targets_three_per_conversation(rollout):
    convs, targets = rollout
    assert [c.end for c in convs] == ["solved"] * 4
    assert len(targets) == 12
    assert [sum(t.conversation == c for t in targets) for c in range(4)] == [3] * 4


@pytest.mark.parametrize("pred_rows", [None, 0])
def test_rows_sized_from_the_data_train_every_target(rollout, pred_rows):
    convs, targets = rollout
    batch, m = _batch(convs, targets, pred_rows=pred_rows, pred_row_len=2048)
    assert batch.prediction.tokens.shape[0] == len(targets) == 12
    assert sorted(_trained(batch, targets)) == list(range(12))
    assert m["prediction_targets_trained"] == 12 and _balanced(m)
    assert m["prediction_targets_truncated_context"] == 0


def test_rows_round_up_to_a_multiple_with_empty_rows(rollout):
    convs, targets = rollout
    batch, m = _batch(convs, targets, pred_rows=None, pred_row_len=2048, pred_rows_multiple=8)
    assert batch.prediction.tokens.shape[0] == 16
    assert int(np.asarray(batch.prediction.target_mask).any(axis=1).sum()) == 12


def test_a_smaller_fixed_size_spreads_kept_targets_across_conversations(rollout):
    convs, targets = rollout
    batch, m = _batch(convs, targets, pred_rows=6, pred_row_len=2048)
    kept = _trained(batch, targets)
    per_conv = [sum(targets[i].conversation == c for i in kept) for c in range(4)]
    assert sorted(per_conv) == [1, 1, 2, 2]  # the old "first 6 in order" gave [3, 3, 0, 0]
    assert m["prediction_targets_trained"] == 6 and m["prediction_targets_dropped_rows"] == 6
    assert _balanced(m)


def test_long_targets_keep_reply_and_nearest_context_and_are_counted(rollout):
    convs, targets = rollout
    longest = max(len(t.context) for t in targets)
    row_len = longest // 2
    batch, m = _batch(convs, targets, pred_rows=None, pred_row_len=row_len)
    assert sorted(_trained(batch, targets)) == list(range(12))  # all still trained...
    assert m["prediction_targets_truncated_context"] == sum(
        len(t.context) + len(TOK.encode(t.target)) + len(CLOSING) > row_len for t in targets) > 0
    spans = []
    for i, (ctx_len, reply_len) in zip(_trained(batch, targets, spans), spans):
        t = targets[i]
        if len(t.context) + reply_len > row_len:  # cut: the nearest context fills the row
            assert ctx_len + reply_len == row_len and ctx_len < len(t.context)
        else:
            assert ctx_len == len(t.context)
    assert _balanced(m)


def test_fit_target_cases():
    ctx, reply, close = list(range(100, 140)), [1, 2, 3], [9]
    assert fit_target(ctx, reply, close, 64) == (ctx, [1, 2, 3, 9], False, False)
    c, r, cut_c, cut_r = fit_target(ctx, reply, close, 20)
    assert c == ctx[-16:] and r == [1, 2, 3, 9] and cut_c and not cut_r
    long_reply = list(range(30))
    c, r, cut_c, cut_r = fit_target(ctx, long_reply, close, 20)
    assert c == ctx[-10:] and r == long_reply[:10] and cut_c and cut_r  # no closing tag
    assert fit_target([], reply, close, 20) is None and fit_target(ctx, reply, close, 1) is None


def test_unfittable_and_failed_targets_are_counted(rollout):
    convs, targets = rollout
    odd = PredictionTarget(0, 0, 0, [5], "x", False)
    _, m = _batch(convs, list(targets) + [odd], pred_rows=None, pred_row_len=1)
    assert m["prediction_targets_dropped_length"] == 13 and m["prediction_targets_trained"] == 0
    assert _balanced(m)


def test_spread_allocation():
    assert spread_allocation([3, 3, 3, 3], 6) == [2, 2, 1, 1]
    assert spread_allocation([1, 5, 0], 4) == [1, 3, 0]
    assert spread_allocation([2, 2], 10) == [2, 2]
    assert spread_allocation([2, 2], 0) == [0, 0]
