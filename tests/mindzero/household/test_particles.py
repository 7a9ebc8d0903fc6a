"""Household particles (Figure 9): the lenient parser, its strict content rules, the formatter
round trip, and adversarial completions that must give a defined result."""

import json
import math
import time

import pytest
from hypothesis import given, settings, strategies as st

from jaxtom.household.catalog import GOAL_OBJECT_TYPES, TARGETS, TASKS
from jaxtom.household.goals import Goal
from jaxtom.mindzero.particles import ParseFailure
from jaxtom.mindzero.household.particles import (HouseholdParticles, format_particles,
                                        parse_particles, to_arrays)

TABLE = Goal.make("setup_table", {"plate": 2, "cutleryfork": 2, "waterglass": 2},
                  "kitchentable")
FRIDGE = Goal.make("put_fridge", {"apple": 1, "salmon": 2}, "fridge")
WASHER = Goal.make("put_dishwasher", {"plate": 3}, "dishwasher")


def entry(task="setup_table", objects=(("plate", 2),), target="kitchentable", p=0.5, **extra):
    return {"task_name": task, "objects": [{"type": t, "count": c} for t, c in objects],
            "target": {"type": target}, "p": p, **extra}


def doc(*entries):
    return json.dumps({"particles": list(entries)})


def test_round_trip_minified_and_pretty():
    text = format_particles([TABLE, FRIDGE, WASHER], [0.5, 0.3, 0.2])
    assert " " not in text and text.startswith('{"particles":[')
    got = parse_particles(text, num_particles=3)
    assert got.ok and got.goals == (TABLE, FRIDGE, WASHER)
    assert got.probs == pytest.approx((0.5, 0.3, 0.2))
    pretty = json.dumps(json.loads(text), indent=2)
    wrapped = f"Let me think.\n```json\n{pretty}\n```\nThese are my guesses."
    assert parse_particles(wrapped, num_particles=3).goals == got.goals
    prose = f"Answer: {text} -- hope {{this}} helps"
    assert parse_particles(prose, num_particles=3).goals == got.goals
    trailing = text.replace("}]}", "},]}")
    assert parse_particles(trailing, num_particles=3).goals == got.goals
    schema = '```json\n{"$defs": {"Object": {"type": "object"}}}\n```'
    echoed = f"The schema is {schema}; my answer: {text}"
    assert parse_particles(echoed, num_particles=3).goals == got.goals


def test_key_and_name_variations():
    text = json.dumps({"Particles": [{"Task Name": "Setup-Table", "Items": [
        {"Name": "Plates", "Number": 2.0}, {"object": "cutlery fork", "quantity": "2"}],
        "Target Location": "Kitchen Table", "Probability": "0.9"}]})
    got = parse_particles(text, num_particles=1)
    assert got.ok, got
    assert got.goals == (Goal.make("setup_table", {"plate": 2, "cutleryfork": 2},
                                   "kitchentable"),)
    # a list around the object (json_repair keeps the last object)
    assert parse_particles(f"[{text}]", num_particles=1).ok


def test_duplicates_merge_and_normalise():
    same = entry(objects=(("cutleryfork", 2), ("plate", 2)), p=0.2)
    reordered = entry(objects=(("plate", 1), ("cutleryfork", 2), ("plate", 1)), p=0.3)
    got = parse_particles(doc(same, reordered, entry(task="put_fridge", objects=(("apple", 1),),
                                                     target="fridge", p=0.5)),
                          num_particles=2)
    assert got.ok and len(got) == 2
    assert got.probs == pytest.approx((0.5, 0.5))
    # exactly n after merging (the public reward): 3 entries, 2 distinct goals, n=3 fails
    failed = parse_particles(doc(same, reordered, entry(p=0.1)), num_particles=3)
    assert not failed.ok and "expected 3" in failed.reason
    # n is configurable and can be switched off
    assert parse_particles(doc(same), num_particles=None).ok
    zeros = parse_particles(doc(entry(p=0), entry(target="coffeetable", p=0)),
                            num_particles=2)
    assert zeros.probs == pytest.approx((0.5, 0.5))  # all zero: uniform, not all-zero q


@pytest.mark.parametrize("bad, reason", [
    (entry(objects=(("banana", 1),)), "unknown object type 'banana'"),
    (entry(target="bathtub"), "unknown target 'bathtub'"),
    (entry(task="cook_dinner"), "unknown task 'cook_dinner'"),
    (entry(objects=(("plate", -2),)), "count -2 is outside"),
    (entry(objects=(("plate", 0),)), "count 0 is outside"),
    (entry(objects=(("plate", 2.5),)), "not a whole number"),
    (entry(objects=(("plate", True),)), "count is not a number"),
    (entry(objects=(("plate", 10 ** 30),)), "outside 1..64"),
    (entry(objects=()), "objects is not a non-empty list"),
    (entry(p=1.5), "outside [0, 1]"),
    (entry(p=-0.1), "outside [0, 1]"),
    (entry(p="lots"), "p is not a number"),
    (entry(p=None), "p is not a number"),
    (entry(p=0.5, prob=0.5), "names 'p' twice"),
    ({"task_name": "setup_table", "objects": [{"type": "plate", "count": 1}], "p": 0.5},
     "lacks target"),
    ("not a particle", "not a JSON object"),
    ([1, 2], "not a JSON object"),
    (entry(objects=(("plate", 1),), target={"nested": {"junk": [1]}}), "unknown target"),
])
def test_invalid_entries_are_named(bad, reason):
    got = parse_particles(doc(bad), num_particles=1)
    assert isinstance(got, ParseFailure) and reason in got.reason, got
    # eval mode drops it (p > 1 is only a weight there); a valid one beside it survives
    kept = parse_particles(doc(bad, entry()), mode="eval", num_particles=5)
    assert kept.ok and kept.goals == (Goal.make("setup_table", {"plate": 2}, "kitchentable"),)
    if isinstance(bad, dict) and bad.get("p") == 1.5:
        assert not kept.dropped
    else:
        assert len(kept.dropped) == 1 and reason in kept.dropped[0]


@pytest.mark.parametrize("text, reason", [
    ("", "no JSON object"),
    ("no json here", "no JSON object"),
    ('{"particles": [', "no decodable JSON"),
    ('{"goals_list": []}', "no 'particles' key"),
    ('{"particles": []}', "non-empty list"),
    ('{"particles": 3}', "non-empty list"),
    ('{"particles": [], "goals": []}', "several particle lists"),
    ("[" * 100_000, "nested too deeply"),
    ("{" * 100_000, "no decodable JSON"),
    ('{"particles": [{"task_name": "setup_table", "p": 0.1, "p": 0.2}]}', "ambiguous"),
    ('{"particles": [{"objects": [{"type": "plate", "count": ' + "9" * 5000 + "}]}]}",
     "no decodable JSON"),
    ("3.5", "not an object"),
])
def test_adversarial_documents_fail_cleanly(text, reason):
    got = parse_particles(text, num_particles=1)
    assert isinstance(got, ParseFailure) and reason in got.reason, got


def test_non_finite_and_huge_numbers():
    for p in ("NaN", "Infinity", "-Infinity", "1e999"):
        text = doc(entry()).replace('"p": 0.5', f'"p": {p}')
        got = parse_particles(text, num_particles=1)
        assert not got.ok and "finite" in got.reason, (p, got)
    huge = parse_particles(doc(entry(p=1e300), entry(target="coffeetable", p=1e300)),
                           mode="eval", num_particles=2)
    assert huge.probs == pytest.approx((0.5, 0.5)) and all(map(math.isfinite, huge.probs))
    assert not parse_particles(None, num_particles=1).ok  # not text at all
    # a duplicated key with the same value is harmless
    same = doc(entry()).replace('"p": 0.5', '"p": 0.5, "p": 0.5')
    assert parse_particles(same, num_particles=1).ok


def test_many_particles_are_bounded():
    many = [entry(objects=((GOAL_OBJECT_TYPES[i % 11], 1 + i // 11 % 60),), p=0.0001)
            for i in range(10_000)]
    t0 = time.perf_counter()
    got = parse_particles(doc(*many), num_particles=10)
    assert not got.ok and "more than 1000" in got.reason
    ok = parse_particles(doc(*many[:600]), mode="eval", num_particles=10, max_entries=1000)
    assert ok.ok and len(ok) == 10
    assert time.perf_counter() - t0 < 5.0


def test_modes_and_bad_arguments():
    text = doc(entry(), entry(objects=(("banana", 1),)))
    assert not parse_particles(text, num_particles=1).ok
    got = parse_particles(text, mode="eval", num_particles=1)
    assert got.ok and len(got.dropped) == 1
    top = parse_particles(doc(entry(p=0.1), entry(target="coffeetable", p=0.7),
                              entry(target="stove", task="prepare_food", p=0.2)),
                          mode="eval", num_particles=2)
    assert [g.target for g in top.goals] == ["coffeetable", "stove"]
    assert top.probs == pytest.approx((7 / 9, 2 / 9))
    with pytest.raises(ValueError, match="mode"):
        parse_particles("{}", mode="lenient")
    with pytest.raises(ValueError, match="num_particles"):
        parse_particles("{}", num_particles=0)
    with pytest.raises(ValueError, match="goals but"):
        format_particles([TABLE], [0.5, 0.5])


def test_to_arrays_pads():
    ok = parse_particles(format_particles([TABLE, FRIDGE], [0.6, 0.4]), num_particles=2)
    bad = parse_particles("junk", num_particles=2)
    goals, q, valid = to_arrays([ok, bad], max_particles=3)
    assert goals == [(TABLE, FRIDGE), ()]
    assert q.tolist() == [[pytest.approx(0.6), pytest.approx(0.4), 0.0], [0.0, 0.0, 0.0]]
    assert valid.tolist() == [True, False]
    with pytest.raises(ValueError, match="max_particles"):
        to_arrays([ok], max_particles=1)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["particles", "task_name", "objects", "type", "count", "target", "p",
                         "x"]), inner, max_size=5),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(_json_values, st.sampled_from(["train", "eval"]))
def test_fuzz_never_raises(value, mode):
    text = json.dumps({"particles": value} if not isinstance(value, dict) else value)
    got = parse_particles(text, mode=mode, num_particles=None)
    if got.ok:
        assert isinstance(got, HouseholdParticles)
        assert sum(got.probs) == pytest.approx(1.0)
        assert all(g.task_name in TASKS and g.target in TARGETS for g in got.goals)
    else:
        assert isinstance(got.reason, str) and got.reason


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TASKS), st.sampled_from(TARGETS),
                          st.dictionaries(st.sampled_from(GOAL_OBJECT_TYPES),
                                          st.integers(1, 64), min_size=1, max_size=4),
                          st.floats(0, 1)), min_size=1, max_size=12))
def test_fuzz_round_trip(items):
    goals = [Goal.make(t, objs, tgt) for t, tgt, objs, _ in items]
    probs = [p for *_, p in items]
    got = parse_particles(format_particles(goals, probs, decimals=6), num_particles=None)
    assert got.ok
    assert set(got.goals) == set(goals)


def test_training_can_reject_duplicates_instead_of_merging():
    """`mindzero.reward.duplicates=reject` (the household rollout passes it): a repeated goal
    fails the completion instead of adding its p."""
    text = doc(entry(p=0.4), entry(p=0.2), entry(task="put_fridge", objects=(("apple", 1),),
                                                  target="fridge", p=0.4))
    assert parse_particles(text, num_particles=2).ok  # merge, the default
    failed = parse_particles(text, num_particles=2, duplicates="reject")
    assert not failed.ok and "duplicate" in failed.reason
    with pytest.raises(ValueError, match="duplicates"):
        parse_particles(text, duplicates="keep")
