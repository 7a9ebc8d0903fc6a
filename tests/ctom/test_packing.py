"""The packing domain (CToM's CPU task): generated tasks, the simulated user, the score, and
the label-free teacher of the format warm-up."""

import dataclasses

import jax
import numpy as np
import pytest

from jaxtom.ctom import packing, tiny
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.policies import ScriptedPolicy
from jaxtom.ctom.prompts import ANSWER_MARKER
from jaxtom.ctom.satisfaction import END_SIGNAL, is_satisfied
from jaxtom.ctom.simulators import ScriptedSimulator, SimRequest
from jaxtom.ctom.teacher import PackingTeacher
from jaxtom.ctom.experiments import tiny_config


def test_tasks_split_by_combination_cover_every_cue_and_follow_the_seed():
    train, held = packing.make_tasks(0, 200, 50)
    assert len(train) == 200 and len(held) == 50
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert {w for t in train for w in t.prompt.split()} >= set(packing.CUES)
    again, _ = packing.make_tasks(0, 200, 50)
    other, _ = packing.make_tasks(1, 200, 50)
    assert [t.prompt for t in again] == [t.prompt for t in train]
    assert [t.prompt for t in other] != [t.prompt for t in train]
    for t in train[:20]:  # the needed items are the cues' items, in slot order
        cues = [w for w in t.prompt.replace(".", " ").split() if w in packing.CUE_ITEM]
        assert packing.required(t) == [packing.CUE_ITEM[c] for c in cues]
    with pytest.raises(ValueError, match="cue combinations"):
        packing.make_tasks(0, 10_000, 1)


def test_user_names_the_single_most_important_mismatch_or_only_which_slot():
    task = packing.make_task("t", ["beach", "cold", "reading", "dog"])  # towel coat book leash
    cases = {  # shown -> (mismatch rule, which rule)
        "map coat rod leash": ("i need beach towel .", "the place item is wrong ."),
        "towel coat book": ("i need dog leash .", "the company item is missing ."),
        "towel fan rod cards": ("i need cold coat .", "the weather item is wrong ."),
        "map towel coat book leash": ("i need beach towel .", "the place item is wrong ."),
        "what do you need ?": ("i need beach towel .", "the place item is missing ."),
        "": ("i need beach towel .", "the place item is missing ."),
    }
    for shown, (mismatch, which) in cases.items():
        assert packing.user_reply(task, shown) == mismatch, shown
        assert packing.user_reply(task, shown, "which") == which, shown
    for rule in packing.DISCLOSURES:  # a fully right list is accepted, extras or not
        assert packing.user_reply(task, "leash book coat towel", rule) == packing.ACCEPT
        assert packing.user_reply(task, "towel coat book leash map", rule) == packing.ACCEPT
    assert is_satisfied(packing.ACCEPT)
    assert not any(is_satisfied(r) for pair in cases.values() for r in pair)
    assert packing.need_phrase(["coat", "leash"]) == "i need cold coat dog leash ."
    with pytest.raises(ValueError, match="at least one item"):
        packing.need_phrase([])
    with pytest.raises(ValueError, match="disclosure"):
        packing.user_reply(task, "towel", "everything")


def _revealed(reply: str, task, visible) -> set[str]:
    """Needed items `reply` names that no earlier visible message had shown."""
    shown = {i for _, text in visible for i in packing.items_in(text)}
    return (set(packing.items_in(reply)) & set(packing.required(task))) - shown


@pytest.mark.parametrize("disclosure", packing.DISCLOSURES)
def test_no_reply_real_or_counterfactual_reveals_more_than_one_needed_item(disclosure):
    """Random drafts (all-wrong and all-right ones among them), shown or discarded, through
    the scripted user the trainer uses: every reply reveals at most one needed item the
    visible conversation had not shown, and the replies depend on the draft."""
    from jaxtom.ctom.controller import Conversation, Round
    from jaxtom.ctom.targets import counterfactual_request
    rng = np.random.default_rng(0)
    sim = ScriptedSimulator(packing_disclosure=disclosure)
    tasks = packing.make_tasks(1, 200, 0)[0]
    requests, visibles = [], []
    for n, task in enumerate(tasks):
        need = dict(zip(packing.SLOT_NAMES, packing.required(task)))
        drafts = []
        for k in range(3):
            kind = (n + k) % 4  # random, all wrong, all right, right but for one slot
            slots = {s: packing.SLOTS[s][rng.integers(10)][1] for s in packing.SLOT_NAMES}
            if kind == 1:
                slots = {s: next(i for _, i in packing.SLOTS[s] if i != need[s])
                         for s in packing.SLOT_NAMES}
            elif kind >= 2:
                slots = dict(need)
                if kind == 3:
                    s = packing.SLOT_NAMES[rng.integers(4)]
                    slots[s] = next(i for _, i in packing.SLOTS[s] if i != need[s])
            drafts.append(packing.labelled(slots))
        visible = [("user", task.prompt)]
        if n % 2:  # a later round: an earlier list and the user's reply to it are visible
            earlier = drafts[0]
            visible += [("assistant", earlier), ("user", packing.user_reply(task, earlier,
                                                                             disclosure))]
        conv = Conversation(task=task, visible=list(visible))
        rnd = Round(0, "", "DRAFT", "DRAFT", drafts=drafts, predictions=["x"] * 3,
                    history_len=len(visible))
        for k in range(3):  # counterfactual queries for discarded drafts, real for the shown
            requests.append(counterfactual_request(conv, rnd, k) if k < 2 else
                            SimRequest(task, tuple(visible) + (("assistant", drafts[k]),)))
            visibles.append(visible)
    replies = [r.text for r in sim.reply(requests)]
    counts = [len(_revealed(rep, req.task, vis)) for rep, req, vis in
              zip(replies, requests, visibles)]
    assert max(counts) <= 1
    assert counts.count(1) > 100 if disclosure == "mismatch" else max(counts) == 0
    assert packing.ACCEPT in replies  # the all-right drafts
    # the target is a function of the draft: one task's drafts get different replies
    per_task = {}
    for req, rep in zip(requests, replies):
        per_task.setdefault(req.task.id, set()).add(rep)
    assert np.mean([len(v) > 1 for v in per_task.values()]) > 0.5


def test_know_nothing_prediction_is_the_template_and_the_request():
    task = packing.make_task("t", ["beach", "cold", "reading", "dog"])
    guess = packing.know_nothing_prediction(task)
    assert guess == "i need beach cold reading dog ." and not packing.items_in(guess)
    assert not packing.items_in(packing.know_nothing_prediction(task, "which"))


def test_score_is_the_share_of_right_slots_whatever_wraps_them():
    task = packing.make_task("t", ["beach", "cold", "reading", "dog"])
    assert packing.score("towel coat book leash", task) == 1.0
    assert packing.score(f"{ANSWER_MARKER} place towel weather coat activity book", task) == 0.75
    # leaving out or adding items gains nothing: each slot's first listed item counts
    assert packing.score("towel coat", task) == 0.5
    assert packing.score("towel coat rope leash map", task) == 0.75
    assert packing.score("map towel coat book leash", task) == 0.75
    assert packing.score("", task) == 0.0 and packing.score(None, task) == 0.0
    # the simulated user reads only the visible list: a COMMIT and a direct submission of the
    # same list end the same way
    sim = ScriptedSimulator()
    ctom = SimRequest(task, (("user", task.prompt), ("assistant", "towel coat book leash")),
                      final=True)
    assert sim.reply([ctom])[0].text == END_SIGNAL


@pytest.fixture(scope="module")
def tok():
    settings = dataclasses.replace(tiny_config().ctom, num_tasks=64, eval_tasks=8)
    train, _ = packing.make_tasks(0, 64, 8)
    return tiny.bpe(tiny.corpus(train, settings, 0), 768), settings


def test_teacher_is_label_free(tok):
    """Two users with the same request and different needs get the same first round: the
    teacher reads the conversation, never the hidden field."""
    tok, settings = tok
    a = packing.make_task("a", ["beach", "cold", "reading", "dog"])
    b = packing.Task(id="b", domain="packing", prompt=a.prompt, hidden="map fan rod cards",
                     reference="map fan rod cards")
    for mode, ctrl in tiny.controllers(settings).items():
        ctrl = ControllerConfig(**{**ctrl.__dict__, "max_rounds": 1})
        runs = [run_conversations([t], ScriptedPolicy(tok, PackingTeacher(
            np.random.default_rng(3))), ScriptedSimulator(), tok, ctrl,
            key=jax.random.key(0))[0] for t in (a, b)]
        assert runs[0].sequences[0].tokens == runs[1].sequences[0].tokens, mode
        assert runs[0].rounds[0].shown == runs[1].rounds[0].shown


def test_teacher_plays_both_prompts_and_uses_replies(tok):
    tok, settings = tok
    tasks = packing.make_tasks(0, 64, 8)[0][:16]
    for mode, ctrl in tiny.controllers(settings).items():
        convs = tiny.teacher_conversations(tasks, tok, ctrl, np.random.default_rng(0))
        for c in convs:
            assert c.failed is None and c.score == packing.score(c.submission, c.task)
            # two visible lists; the first gets the user's reply unless it solved the task,
            # and the second list acts on that reply
            roles = [r for r, _ in c.visible]
            assert roles in (["user", "assistant"], ["user", "assistant", "user", "assistant"])
            if len(roles) == 4:
                assert c.visible[2][1] == packing.user_reply(c.task, c.visible[1][1])
                for item in packing.items_in(c.visible[2][1]):
                    assert packing.first_items(c.visible[3][1])[packing.ITEM_SLOT[item]] == item
        if mode == "ctom":
            revised = [r for c in convs for r in c.rounds if len(r.drafts) > 1]
            assert revised
            for r in revised:  # a revision takes in every item its prediction named
                for pred, draft in zip(r.predictions, r.drafts[1:]):
                    assert set(packing.items_in(pred)) <= set(packing.items_in(draft))
            for c in convs:  # a guessed reply is worded as the user words one: one item
                cues = packing.cues_in(c.task.prompt)  # after the request's cue
                for r in c.rounds:
                    for pred in r.predictions:
                        if pred != packing.ACCEPT:
                            [item] = packing.items_in(pred)
                            cue = cues[packing.ITEM_SLOT[item]]
                            assert pred == packing.NEED.format(needs=f"{cue} {item}"), pred


def test_warmup_reply_rows_target_the_users_reply_to_the_draft_before_it(tok):
    """Each row is a draft's prediction context and, as its only target, what the scripted
    user says to that draft (real or counterfactual)."""
    from jaxtom.ctom import protocol as P
    from jaxtom.ctom.teacher import _DRAFT
    tok, settings = tok
    tasks = packing.make_tasks(0, 64, 8)[0][:8]
    convs = tiny.teacher_conversations(tasks, tok, tiny.controllers(settings)["ctom"],
                                       np.random.default_rng(0))
    rows = tiny.reply_rows(convs, tok, 12, 2048, np.random.default_rng(1))
    assert len(rows) == 12
    kinds = set()
    for tokens, mask in rows:
        start = mask.index(1.0)
        assert len(tokens) == len(mask) and all(mask[start:]) and not any(mask[:start])
        context, reply = tok.decode(tokens[:start]), tok.decode(tokens[start:])
        assert context.rstrip().endswith(P.ANTICIPATED) and reply.endswith(P.PREDICTION_END)
        cues = packing.cues_in(context.split("trip :", 1)[1].split(".", 1)[0])
        task = packing.make_task("t", [cues[s] for s in packing.SLOT_NAMES])
        draft = _DRAFT.findall(context)[-1]
        assert reply[:-len(P.PREDICTION_END)] == packing.user_reply(task, draft)
        kinds.add(reply.split()[1])
    assert "need" in kinds  # the teacher's guessed lists mostly miss a need
    short = tiny.reply_rows(convs, tok, 3, 64, np.random.default_rng(1))
    assert len(short) == 3 and all(len(t) <= 64 for t, _ in short)  # cut to the row


def test_warmup_reply_rows_is_validated():
    from jaxtom.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="ctom.warmup.reply_rows"):
        load_config("configs/ctom_tiny.py", ["ctom.warmup.reply_rows=-1"])


def test_random_draws_are_down_weighted_and_copies_are_not(tok):
    tok, _ = tok
    items = tiny.item_ids(tok)
    ids = tok.encode("i plan towel coat . towel map")
    mask = [1.0] * len(ids)
    weights = tiny.weighted_mask(ids, mask, items, 0.1)
    texts = [tok.decode([i]) for i in ids]
    for text, w, i in zip(texts, weights, range(len(ids))):
        first = ids[i] not in ids[:i]
        assert w == (0.1 if ids[i] in items and first else 1.0), text
    assert weights[texts.index(" map")] == 0.1
    assert sum(w == 0.1 for w in weights) == 3  # towel, coat, map; the second towel copies


def test_the_cpu_defaults_rows_hold_the_longest_conversation(tok):
    """Every round of a conversation whose assistant always writes to its caps (direct mode at
    the equal budget: the longest rounds) fits one of the default's rows."""
    tok, settings = tok
    task = packing.make_tasks(0, 64, 8)[0][0]
    ramble = " ".join(item for _, item in packing.SLOTS["place"]) * 20
    for mode, ctrl in tiny.controllers(settings).items():
        for rounds in (ctrl.max_rounds, 4):  # the default's, and more (an override)
            policy = ScriptedPolicy(tok, lambda ctx, kind: (
                ramble if kind in ("response", "draft", "prediction") else
                PackingTeacher(np.random.default_rng(0))(ctx, kind)))
            [conv] = run_conversations([task], policy, ScriptedSimulator(), tok,
                                       dataclasses.replace(ctrl, max_rounds=rounds),
                                       key=jax.random.key(0))
            longest = max(len(s.tokens) for s in conv.sequences)
            assert len(conv.sequences) == rounds, mode
            assert longest <= tiny_config().trainer.row_len, (mode, rounds, longest)
            if mode == "direct" and rounds == 4:  # past the 256 tokens that once crashed
                assert longest > 256, longest
