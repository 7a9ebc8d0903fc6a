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
