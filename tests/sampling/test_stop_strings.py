"""The stop-string automaton against a brute-force string search."""

import numpy as np
from hypothesis import example, given, settings, strategies as st

from jaxtom.sampling.stop_strings import MATCHED, find_stop, stop_table

ALPHABET = "ab <>/"
TOKENS = ["a", "b", "ab", "ba", " ", "<", ">", "</", "a>", "b<", "aab", "", "/a", " <"]


def run_automaton(table, ids):
    state = 0
    for i, t in enumerate(ids):
        state = int(table[state, t])
        if state == MATCHED:
            return i
    return None


@settings(max_examples=200, deadline=None)
@given(stop=st.text(ALPHABET, min_size=1, max_size=5),
       ids=st.lists(st.integers(0, len(TOKENS) - 1), max_size=25))
@example(stop="ab", ids=[0, 11, 1])  # an empty token between the halves must not reset the match
def test_automaton_stops_exactly_where_the_text_first_contains_the_string(stop, ids):
    table = stop_table(stop, TOKENS)
    expected = next((i for i in range(len(ids))
                     if stop in "".join(TOKENS[t] for t in ids[:i + 1])), None)
    assert run_automaton(table, ids) == expected


def test_find_stop():
    assert find_stop("abc</x>def</y>", ["</y>", "</x>"]) == 7
    assert find_stop("abc", ["z"]) is None
    assert np.all(stop_table("q", TOKENS) == 0)
