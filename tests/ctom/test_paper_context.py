"""Sections 4.1-4.2 with a recording simulator (issue 11): what the simulated user is sent.

The scripted simulator answers the same whatever context it gets, so these tests record every
request and its rendered C.3 prompt and compare them with what the policy saw:
  * COMMIT submits the last shown draft, with the marker, in both controller modes;
  * each counterfactual query holds h_t, d(0), u^(0), ..., d(k-1), u^(k-1), d(k): the same
    context, token for token, as the prediction it supervises."""

import re

from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.prompts import ANSWER_MARKER, system_prompt
from jaxtom.ctom.simulators import ScriptedSimulator, simulator_prompt
from jaxtom.ctom.targets import prediction_targets

from .scripted import TOK, run_scripted

WRITE = builtin_tasks("writing")[0]
CODE = builtin_tasks("coding")[0]


class RecordingSimulator:
    """Replies like the scripted simulator and keeps every request and its rendered prompt."""

    def __init__(self):
        self.inner = ScriptedSimulator(run_code=False)
        self.requests, self.prompts = [], []

    def reply(self, requests, seed=0):
        for r in requests:
            self.requests.append(r)
            self.prompts.append(simulator_prompt(r))
        return self.inner.reply(requests, seed)


def per_round_script(rounds):
    """rounds[t] = (decision, drafts, predictions); t = visible assistant turns so far."""
    def script(ctx, kind):
        start = ctx.rindex(P.PLAN_START)
        t = ctx[:start].count("<|start_header_id|>assistant") - 1
        decision, drafts, preds = rounds[min(t, len(rounds) - 1)]
        k = ctx[start:].count(P.DRAFT_START) - 1
        return {"plan": "Plan." + P.PLAN_END, "decision": decision,
                "ask": "Who is it for?" + P.ASK_END}.get(kind) or (
            drafts[k] + P.DRAFT_END if kind == "draft" else preds[k] + P.PREDICTION_END)
    return script


def cfg_for(domain, **kw):
    return ControllerConfig.for_domain(domain, plan_cap=32, draft_cap=256, revision_cap=256,
                                       prediction_cap=64, **kw)


def test_commit_submits_the_last_shown_draft_with_the_marker():
    shown = "The Riverside bakery opened its doors on Main Street and sells fresh bread daily."
    rounds = [("A", ["A first draft about the bakery that the user never sees.", shown],
               ["Please add the street.", "ok"]),
              ("C", [], [])]
    sim = RecordingSimulator()
    [conv], _ = run_scripted(per_round_script(rounds), [WRITE], cfg_for("writing"), sim)
    assert conv.actions == ["DRAFT", "COMMIT"] and conv.end == "commit"
    assert conv.submission == shown
    final = sim.requests[-1]
    assert final.final and final.history[-1] == ("assistant", shown)
    # the user's last reply precedes the submission; no new visible message was added
    assert final.history[:-1] == tuple(conv.visible) and conv.visible[-1][0] == "user"
    history = sim.prompts[-1].split("## Conversation so far", 1)[1]
    assert f"**Assistant**: {ANSWER_MARKER}\n{shown}" in history
    assert history.index(conv.visible[-1][1]) < history.index(ANSWER_MARKER)
    assert ANSWER_MARKER not in "".join(sim.prompts[:-1])  # only the COMMIT request has it


def test_direct_mode_submission_carries_the_marker_too():
    code = "def task_func(words):\n    return {}"

    def script(ctx, kind):
        assert kind == "response"
        return f"{ANSWER_MARKER} {code}"
    sim = RecordingSimulator()
    [conv], _ = run_scripted(script, [CODE], cfg_for("coding", mode="direct"), sim)
    assert conv.end == "commit" and conv.submission == code
    [final] = sim.requests
    assert final.final and final.history[-1] == ("assistant", code)
    assert f"**Assistant**: {ANSWER_MARKER}\n{code}" in sim.prompts[-1]


def _round_parts(context_text):
    """Drafts and predictions of the round a prediction context belongs to."""
    body = context_text[context_text.rindex(P.PLAN_START):]
    drafts = [d.strip() for d in re.findall(re.escape(P.DRAFT_START) + "(.*?)"
                                            + re.escape(P.DRAFT_END), body, re.DOTALL)]
    preds = [u.strip() for u in re.findall(re.escape(P.ANTICIPATED) + "(.*?)"
                                           + re.escape(P.PREDICTION_END), body, re.DOTALL)]
    return drafts, preds


def test_counterfactual_queries_have_the_prediction_context_token_for_token():
    rounds = [("B", [], []),  # ASK first, so h_t holds more than the opening request
              ("A", ["draft zero " * 3, "draft one " * 3, "The bakery opened in 1998 " * 2],
               ["You forgot the year.", "Still missing the owner.", "ok"]),
              ("A", ["second round draft a", "second round draft b"],
               ["Too short.", "ok"])]
    sim = RecordingSimulator()
    cfg = cfg_for("writing", max_rounds=3)
    convs, _ = run_scripted(per_round_script(rounds), [WRITE, WRITE], cfg, sim)
    n_live = len(sim.requests)
    targets = prediction_targets(convs, sim)
    counterfactual = [t for t in targets if t.counterfactual]
    assert [c.actions for c in convs] == [["ASK", "DRAFT", "DRAFT"]] * 2
    assert len(counterfactual) == 2 * 3  # two conversations x (2 + 1) discarded drafts
    assert len(sim.requests) - n_live == len(counterfactual)
    system = system_prompt("writing", categorical=cfg.categorical)
    for t in counterfactual:
        q = t.query
        assert any(q is r for r in sim.requests[n_live:])  # this exact request was sent
        assert len(q.earlier) == t.k and not q.final
        text = TOK.decode(t.context)
        # h_t: the visible history the policy's round started from
        assert text.startswith(P.render_history(TOK, system, list(q.history[:-1])))
        assert text.endswith(P.ANTICIPATED + "\n")
        drafts, preds = _round_parts(text)
        sent_drafts = [d for d, _ in q.earlier] + [q.history[-1][1]]
        sent_preds = [u for _, u in q.earlier]
        assert [TOK.encode(d) for d in drafts] == [TOK.encode(d) for d in sent_drafts]
        assert [TOK.encode(u) for u in preds] == [TOK.encode(u) for u in sent_preds]
        prompt = sim.prompts[next(i for i, r in enumerate(sim.requests) if r is q)]
        order = [prompt.index(x) for pair in q.earlier for x in pair] + [
            prompt.rindex(q.history[-1][1])]
        assert order == sorted(order)  # earlier steps come before d(k) in the prompt
    real = [t for t in targets if not t.counterfactual]
    assert real and all(t.query is None for t in real)


def test_malformed_final_or_counterfactual_requests_are_refused():
    import pytest

    from jaxtom.ctom.simulators import SimRequest
    with pytest.raises(ValueError, match="COMMIT"):
        simulator_prompt(SimRequest(WRITE, (("user", WRITE.prompt),), final=True))
    with pytest.raises(ValueError, match="counterfactual"):
        simulator_prompt(SimRequest(WRITE, (("user", WRITE.prompt),), earlier=(("d", "u"),)))
