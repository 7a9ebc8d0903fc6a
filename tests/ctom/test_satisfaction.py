"""The lexical satisfaction classifier on replies written for these tests (appendix A.3)."""

import pytest

from jaxtom.ctom import is_satisfied
from jaxtom.ctom.satisfaction import END_SIGNAL, satisfaction_label

SATISFIED = [
    "", "   ", "ok", "Ok.", "okay", "OK thanks", "ok!", "Looks good.", "looks good to me",
    "Perfect, thanks.", "That's right.", "That’s right, thank you.", "Correct.", "Yes, correct.",
    "Yes", "yep", "Great, that's exactly it.", "Exactly what I wanted.", "Thanks!",
    "Thank you, that works.", "That works for me.", "LGTM", "Spot on.", "Nice, thanks.",
    "Good.", "Good job.", "Great work.", "Excellent.", "Fine by me.", "That matches.",
    "That matches my notes.", "All set, thanks.", "Done, thank you.", "Agreed.",
    "Sounds good.", "Got it, thanks.", "Awesome, thanks a lot.", "Right, that's it.",
    "That's it.", "I'm happy with this.", "Satisfied.", "Approved.", "Nothing to add, thanks.",
    "Looks great — nothing else to add.", "ok, no changes needed", "Perfect.",
    END_SIGNAL, f"{END_SIGNAL}", "yeah that's right", "Okay, great.",
    "Yes, that is the answer I expected.", "Great, that's the result.", "good, thanks",
    "Thanks, this is fine.", "Ok, that looks good.", "Correct, thanks!", "Yes exactly.",
    "ok.", "Thank you!", "That looks right to me.",
]

UNSATISFIED = [
    "That's wrong.", "Hmm, that doesn't look right.", "I think the answer is wrong.",
    "Still not right.", "You still have the same mistake.", "Could you double-check step 2?",
    "Please double check the arithmetic.", "Could you make it shorter?", "Can you add a title?",
    "Add the date of the event.", "Use metres instead of feet.", "Instead of a list, return a dict.",
    "Are you sure?", "Is that right?", "Why did you divide by 3?", "What about negative inputs?",
    "The second step is incorrect.", "That's not quite it.", "Not sure that's correct.",
    "I'm not sure about the last step.", "There's a mistake in the expansion.",
    "There is an error in line 3.", "You made a sign error.", "Recheck the denominator.",
    "Check again, the total seems off.", "The answer isn't simplified.",
    "The function doesn't handle empty input.", "It should raise ValueError for negative n.",
    "It needs to return a sorted list.", "It must return None when the file is missing.",
    "You forgot the conclusion.", "The intro is missing the founding year.",
    "Mention that the event is free.", "Include the venue name.", "Remove the second paragraph.",
    "Drop the bullet points.", "Change the tone to be more formal.", "Fix the typo in the title.",
    "Rewrite the opening.", "Please revise the ending.", "Shorten it to about 200 words.",
    "It's too long.", "Way too short.", "Too vague, give more detail.", "Make it more specific.",
    "Explain why the limit is 0.", "Clarify the second case.", "ok, but add a summary.",
    "Looks good but the date is wrong.", "Good, however the name should be Maria.",
    "Thanks, although the budget is 5000, not 500.", "Actually I wanted a CSV, not JSON.",
    "I asked for three examples.", "I said the deadline is Friday.", "I meant the median.",
    "I need the result in dollars.", "I'd like a friendlier tone.", "Wait, where is the boxed answer?",
    "Put the final answer in a box.", "The keys should be lowercase.", "Return a tuple rather than a list.",
    "Sort by date, descending.", "The title should be shorter.", "Hm, the second root looks off by one.",
    "No, the radius is 4.", "The column names are not what I expected.", "Less jargon please.",
    "Could you also handle the timezone?", "Would you cite the source?", "This misses the key point about funding.",
]


@pytest.mark.parametrize("label,replies", [("satisfied", SATISFIED), ("unsatisfied", UNSATISFIED)])
def test_each_class_has_many_written_replies(label, replies):
    assert len(replies) >= 50


def test_accuracy_on_written_replies():
    data = [(r, True) for r in SATISFIED] + [(r, False) for r in UNSATISFIED]
    assert len(data) >= 100
    wrong = [r for r, want in data if is_satisfied(r) != want]
    accuracy = 1 - len(wrong) / len(data)
    assert accuracy >= 0.95, (accuracy, wrong)


def test_question_mark_alone_is_pushback():
    assert not is_satisfied("ok?")
    assert not is_satisfied("Looks good?")


def test_pushback_beats_acceptance_and_default_is_unsatisfied():
    assert not is_satisfied("Great, but add a conclusion.")
    assert satisfaction_label("The total is 12 apples.") == "unsatisfied"  # not an acceptance
    assert is_satisfied(None)
    assert is_satisfied("  " + END_SIGNAL + "  ")


def test_whole_word_matching():
    # "address", "stillness", "wronged" contain pushback words only as substrings
    assert is_satisfied("Great, the address section works.")
    assert not is_satisfied("The address is wrong.")


# ---------------------------------------------------------------------------------------
# the labelled set of jaxtom/ctom/data/satisfaction_replies.jsonl (issue 11): written for
# this project in the register of the C.3 simulator prompts; the rules were tuned on the
# "tune" part only, the "heldout" part measures them
# ---------------------------------------------------------------------------------------

import json  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import jaxtom.ctom  # noqa: E402

DATA = Path(jaxtom.ctom.__file__).parent / "data" / "satisfaction_replies.jsonl"
KINDS = {"end": "satisfied", "accept_plain": "satisfied", "accept_soft": "satisfied",
         "pushback": "unsatisfied", "mixed": "unsatisfied", "question": "unsatisfied"}
ISSUE_ACCEPTANCES = ["Great, that's exactly what I needed.", "That's exactly what I wanted",
                     "Good, it should work now", "nothing else to change"]


def _rows(split=None):
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]


def per_class_table(rows) -> tuple[float, str]:
    """Accuracy and a text table: precision/recall per label, recall per kind of reply."""
    got = [satisfaction_label(r["text"]) for r in rows]
    lines = ["| class | n | precision | recall |", "|---|---|---|---|"]
    for label in ("satisfied", "unsatisfied"):
        tp = sum(g == label and r["label"] == label for g, r in zip(got, rows))
        pred = sum(g == label for g in got)
        true = sum(r["label"] == label for r in rows)
        lines.append(f"| {label} | {true} | {tp / max(pred, 1):.3f} | {tp / max(true, 1):.3f} |")
    for kind in KINDS:
        sel = [g == r["label"] for g, r in zip(got, rows) if r["kind"] == kind]
        lines.append(f"| {kind} (-> {KINDS[kind]}) | {len(sel)} | | {sum(sel) / len(sel):.3f} |")
    accuracy = sum(g == r["label"] for g, r in zip(got, rows)) / len(rows)
    return accuracy, "\n".join(lines)


def test_labelled_set_is_large_balanced_and_consistent():
    rows = _rows()
    assert len(rows) >= 300
    assert all(KINDS[r["kind"]] == r["label"] for r in rows)
    kinds = Counter(r["kind"] for r in rows)
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 20
    heldout = Counter(r["kind"] for r in rows if r["split"] == "heldout")
    assert set(heldout) == set(KINDS) and sum(heldout.values()) >= 100
    texts = [(r["text"], r["split"]) for r in rows]
    assert not {t for t, s in texts if s == "tune"} & {t for t, s in texts if s == "heldout"}


def test_heldout_accuracy_and_per_class_table():
    accuracy, table = per_class_table(_rows("heldout"))
    print(f"\nheld-out accuracy {accuracy:.3f}\n{table}")
    assert accuracy >= 0.97, table


@pytest.mark.parametrize("reply", ISSUE_ACCEPTANCES)
def test_acceptances_quoted_in_issue_11(reply):
    assert is_satisfied(reply)


@pytest.mark.parametrize("reply", [
    "That's exactly what I needed, but add a title.",  # pushback still wins (paper's order)
    "It's not what I asked for.", "Not what I wanted.", "This isn't what I meant.",
    "It should work now? It crashes on empty input.", "Nothing else to change except the date.",
    "I don't see any mention of the venue.",
])
def test_neutralised_phrases_do_not_hide_pushback(reply):
    assert not is_satisfied(reply)
