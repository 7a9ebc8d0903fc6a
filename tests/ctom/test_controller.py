"""The controller with a scripted stand-in policy: every path (ASK, DRAFT with 0-3
revisions, COMMIT before any draft, budget exhaustion, answer-gated end), the visible
transcript, hidden drafts, policy-token mask and prediction targets."""

from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.simulators import ScriptedSimulator, SimReply
from jaxtom.ctom.targets import prediction_targets

from .scripted import TOK, masked_text, run_scripted

MATH = builtin_tasks("math")[1]  # answer 8
WRITE = builtin_tasks("writing")[0]


def scripted(plan_by_prompt):
    """plan_by_prompt[task prompt] = list of (decision, [drafts], [predictions]) per round."""
    def script(ctx, kind):
        prompt = next(p for p in plan_by_prompt if p in ctx)
        rounds = plan_by_prompt[prompt]
        # visible assistant turns before this round's [PLAN_START] = rounds already shown
        start = ctx.rindex(P.PLAN_START)  # the system prompt mentions the tags too
        t = ctx[:start].count("<|start_header_id|>assistant") - 1
        decision, drafts, preds = rounds[min(t, len(rounds) - 1)]
        k = ctx[start:].count(P.DRAFT_START) - 1
        if kind == "plan":
            return "Think briefly." + P.PLAN_END
        if kind == "decision":
            return decision
        if kind == "ask":
            return "What should it cover?" + P.ASK_END
        if kind == "draft":
            return drafts[k] + P.DRAFT_END
        return preds[k] + P.PREDICTION_END
    return script


def run(plan, tasks, cfg=None, sim=None):
    cfg = cfg or ControllerConfig.for_domain(tasks[0].domain, plan_cap=64, draft_cap=256,
                                             revision_cap=256, prediction_cap=64)
    return run_scripted(scripted(plan), tasks, cfg, sim)


def test_draft_with_revisions_then_answer_gated_end():
    plan = {MATH.prompt: [("A", [r"\boxed{5}", r"\boxed{6}", r"x = \boxed{8}"],
                           ["That's wrong.", "Still wrong?", "ok, that's right."])]}
    [conv], _ = run(plan, [MATH])
    [rnd] = conv.rounds
    assert rnd.action == "DRAFT" and rnd.drafts == [r"\boxed{5}", r"\boxed{6}", r"x = \boxed{8}"]
    assert conv.visible == [("user", MATH.prompt), ("assistant", r"x = \boxed{8}")]
    assert conv.end == "solved" and conv.score == 1.0 and rnd.reply is None
    seg = conv.sequences[0]
    policy_text = masked_text(seg, 1.0)
    first = seg.policy.index(1.0)  # controller text after the rendered history + [PLAN_START]
    controller_text = TOK.decode([t for t, m in zip(seg.tokens[first:], seg.policy[first:])
                                  if m == 0.0])
    assert TOK.decode(seg.tokens[:first]).endswith(MATH.prompt + "<|eot_id|>"
                                                   "<|start_header_id|>assistant<|end_header_id|>"
                                                   "\n\n[PLAN_START]")
    for piece in ("Think briefly.", "[PLAN_END]", r"\boxed{5}", "[DRAFT_END]", "That's wrong.",
                  "[PREDICTION_END]"):
        assert piece in policy_text and piece not in controller_text
    for piece in ("[DECISION]", "[DRAFT_START]", "[ANTICIPATED]"):
        assert piece in controller_text and piece not in policy_text
    assert sum(seg.decision) == 1.0 and TOK.decode([seg.tokens[seg.decision.index(1.0)]]) == "A"
    assert conv.score == 1.0 and conv.reward == 1.0 - 0.01 * conv.effort  # the same float64 ops


def test_revision_cap_shows_last_draft_and_counterfactual_targets():
    drafts = [rf"\boxed{{{i}}}" for i in (1, 2, 3, 4, 9)]
    plan = {MATH.prompt: [("A", drafts, ["wrong"] * 5)]}
    [conv], _ = run(plan, [MATH])
    rnd = conv.rounds[0]
    assert len(rnd.drafts) == 4 and rnd.shown == r"\boxed{4}"  # K_max = 3 revisions
    assert rnd.reply.startswith("That's wrong")
    targets = prediction_targets([conv], ScriptedSimulator())
    slots = [t for t in targets if t.round == 0]
    assert [t.k for t in slots] == [0, 1, 2, 3]
    assert [t.counterfactual for t in slots] == [True, True, True, False]
    assert slots[3].target == rnd.reply  # the shown draft's target is the real reply
    seg = conv.sequences[0]
    for t in slots:  # each context ends with the [ANTICIPATED] slot of its own draft
        ctx = TOK.decode(t.context)
        assert ctx.rstrip().endswith(P.ANTICIPATED)
        assert ctx[ctx.rindex(P.PLAN_START):].count(P.DRAFT_START) == t.k + 1
        assert t.context == seg.tokens[:len(t.context)]


def test_zero_revisions_ask_commit_and_coding_end():
    code = builtin_tasks("coding")[8]
    plan = {code.prompt: [("B", [], []), ("A", [code.reference], ["ok"]), ("C", [], [])]}
    [conv], _ = run(plan, [code])
    assert conv.actions == ["ASK", "DRAFT", "COMMIT"]
    assert conv.rounds[1].drafts == [code.reference.strip()]  # satisfied at once: 0 revisions
    assert conv.rounds[0].shown == "What should it cover?" and not conv.rounds[0].drafts
    assert conv.end == "commit" and conv.submission == code.reference.strip()
    assert conv.score == 1.0 and conv.rounds[2].reply == "[[TERMINATE CHAT]]"
    assert [r for r, _ in conv.visible] == ["user", "assistant", "user", "assistant", "user"]


def test_commit_before_any_draft_is_coerced_and_budget_ends():
    plan = {WRITE.prompt: [("C", ["The library opens at 8am."], ["Add the hours."]),
                           ("A", ["The library opens at 8am."], ["Add the hours."])]}
    cfg = ControllerConfig.for_domain("writing", max_rounds=2, max_revisions=0, plan_cap=64,
                                      draft_cap=128, revision_cap=128, prediction_cap=64)
    [conv], _ = run(plan, [WRITE], cfg)
    assert conv.rounds[0].raw_decision == "COMMIT" and conv.rounds[0].action == "DRAFT"
    assert conv.end == "budget" and len(conv.rounds) == 2
    assert conv.submission == "The library opens at 8am." and 0 < conv.score < 1
    # one reply between the two rounds, none after the last
    assert [r for r, _ in conv.visible] == ["user", "assistant", "user", "assistant"]


def test_malformed_decision_defaults_to_draft():
    plan = {MATH.prompt: [("zz", [r"\boxed{8}"], ["ok"])]}
    [conv], _ = run(plan, [MATH])
    assert conv.rounds[0].raw_decision is None and conv.rounds[0].action == "DRAFT"


def test_batch_of_conversations_finishing_at_different_times():
    plan = {MATH.prompt: [("A", [r"\boxed{8}"], ["ok"])],
            WRITE.prompt: [("B", [], []), ("A", ["x"], ["ok"])]}
    math_cfg = ControllerConfig.for_domain("math", plan_cap=64, draft_cap=128,
                                           revision_cap=128, prediction_cap=64)
    convs, policy = run(plan, [MATH, MATH, MATH], math_cfg)
    assert all(c.end == "solved" for c in convs)
    assert ("plan", 3) in policy.calls and ("draft", 3) in policy.calls  # batched phases


class FailingSim:
    def reply(self, requests, seed=0):
        return [SimReply("", "user simulator failed after 4 attempts: HTTP 500")] * len(requests)


def test_simulator_failure_marks_conversation_failed():
    plan = {MATH.prompt: [("A", [r"\boxed{1}"], ["ok"])]}
    [conv], _ = run(plan, [MATH], sim=FailingSim())
    assert conv.end == "failed" and "HTTP 500" in conv.failed
