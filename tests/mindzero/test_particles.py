import json

import pytest

from jaxtom.mindzero import (
    ParseFailure, format_particles, normalise, parse_particles, parse_choice, to_arrays,
)

LABELS = ["brown star", "orange star", "yellow star", "pink star", "green star", "red star",
          "purple star", "blue star"]


def obj(label):
    c, s = label.split()
    return {"color": c, "shape": s}


def completion(parts, **extra):
    return json.dumps({"particles": [{"object1": obj(a), "object2": obj(b), "p": p}
                                     for a, b, p in parts], **extra})


def test_round_trip_and_normalisation():
    text = format_particles([(0, 5), (2, 3)], [0.6, 0.2], LABELS)
    r = parse_particles(text, LABELS, num_particles=2)
    assert r.ok and r.pairs == ((0, 5), (2, 3))
    assert r.q == pytest.approx((0.75, 0.25))


def test_code_fence_beats_braces_and_prose():
    text = ("Sure! {not json} ```json\n" + completion([("red star", "blue star", 1.0)])
            + "\n``` done }")
    r = parse_particles(text, LABELS)
    assert r.ok and r.pairs == ((5, 7),)


def test_first_to_last_brace():
    text = "answer: " + completion([("red star", "blue star", 0.5)]) + " thanks"
    assert parse_particles(text, LABELS).ok


def test_zero_probabilities_use_floor():
    r = parse_particles(completion([("red star", "blue star", 0.0),
                                    ("pink star", "blue star", 0.0)]), LABELS)
    assert r.ok and r.q == pytest.approx((0.5, 0.5))
    assert normalise([1.0, 0.0], 1e-3) == pytest.approx((1 / 1.001, 1e-3 / 1.001))


@pytest.mark.parametrize("text, reason", [
    ("", "no JSON"),
    ("{", "no JSON"),
    ('{"particles": []}', "non-empty"),
    ('{"particles": [1]}', "not a JSON object"),
    (completion([("red star", "red star", 1.0)]), "same object"),
    (completion([("red star", "cyan star", 1.0)]), "unknown object"),
    (completion([("red star", "blue star", -0.1)]), "outside"),
    (completion([("red star", "blue star", 1.5)]), "outside"),
    (completion([("red star", "blue star", "0.5")]), "not a number"),
    (completion([("red star", "blue star", True)]), "not a number"),
    (completion([("red star", "blue star", 0.5), ("blue star", "red star", 0.5)]), "duplicate"),
    (completion([("red star", "blue star", 0.5)], note="hi"), "extra"),
    ('{"particles": [{"object1": {"color": "red", "shape": "star"}, "object2": '
     '{"color": "blue", "shape": "star"}, "p": NaN}]}', "finite"),
    ('{"particles": [{"object1": {"color": "red", "shape": "star"}, "object2": '
     '{"color": "blue", "shape": "star"}, "p": 1' + "0" * 400 + '}]}', "finite"),
])
def test_train_rejects(text, reason):
    r = parse_particles(text, LABELS, mode="train")
    assert isinstance(r, ParseFailure) and not r.ok
    assert reason in r.reason


def test_train_enforces_count_eval_caps_it():
    text = completion([("red star", "blue star", 0.5), ("pink star", "blue star", 0.3),
                       ("green star", "blue star", 0.2)])
    assert not parse_particles(text, LABELS, num_particles=2).ok
    r = parse_particles(text, LABELS, mode="eval", num_particles=2)
    assert r.ok and r.pairs == ((5, 7), (3, 7)) and r.q == pytest.approx((0.625, 0.375))


def test_eval_is_lenient_and_merges_duplicates():
    entries = [{"object1": {"color": "Red", "shape": " star"}, "object2": obj("blue star"),
                "p": 0.25, "why": "close"},
               {"object1": obj("red star"), "object2": obj("blue star"), "p": 0.25},
               {"object1": obj("red star"), "object2": obj("cyan star"), "p": 0.9},
               {"object1": obj("pink star"), "object2": obj("blue star"), "p": 0.5}]
    text = json.dumps({"particles": entries, "comment": 1})
    assert not parse_particles(text, LABELS, mode="train").ok
    r = parse_particles(text, LABELS, mode="eval")
    assert r.ok and r.pairs == ((5, 7), (3, 7)) and r.q == pytest.approx((0.5, 0.5))


def test_training_can_merge_duplicates_instead_of_failing():
    text = completion([("red star", "blue star", 0.5), ("red star", "blue star", 0.25)])
    assert parse_particles(text, LABELS, num_particles=2).reason == "duplicate goal pair"
    r = parse_particles(text, LABELS, num_particles=2, duplicates="merge")
    assert r.ok and r.pairs == ((5, 7),) and r.q == pytest.approx((1.0,))
    swapped = completion([("red star", "blue star", 0.5), ("blue star", "red star", 0.5)])
    r = parse_particles(swapped, LABELS, num_particles=2, duplicates="merge")
    assert r.ok and r.pairs == ((5, 7), (7, 5))  # two different ordered goals
    bad = completion([("red star", "blue star", 0.5), ("red star", "red star", 0.5)])
    assert not parse_particles(bad, LABELS, num_particles=2, duplicates="merge").ok
    with pytest.raises(ValueError, match="duplicates"):
        parse_particles(text, LABELS, duplicates="keep")


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="mode"):
        parse_particles("{}", LABELS, mode="lenient")
    with pytest.raises(TypeError, match="scene"):
        parse_particles("{}", 42)


def test_scene_from_state():
    import jax
    from jaxtom.gridworld import EnvParams, reset
    _, state = reset(jax.random.key(0), EnvParams())
    from jaxtom.gridworld.text import object_labels
    labels = object_labels(state)
    text = format_particles([(1, 4)], [1.0], labels)
    assert parse_particles(text, state).pairs == ((1, 4),)


def test_to_arrays():
    ok = parse_particles(format_particles([(0, 1), (2, 3)], [0.5, 0.5], LABELS), LABELS)
    goals, q, valid = to_arrays([ok, ParseFailure("x")], 8, 3)
    assert valid.tolist() == [True, False]
    assert goals[0, :2].tolist() == [0, 16] and q[0, 2] == 0 and q[1].sum() == 0
    with pytest.raises(ValueError, match="max_particles"):
        to_arrays([ok], 8, 1)


@pytest.mark.parametrize("text, mode, want", [
    ("a", "train", 0), (" (b) ", "train", 1), ("B.", "train", 1), ("ab", "train", -1),
    ("The answer is (b).", "train", -1), ("The answer is (b).", "eval", 1), ("", "eval", -1),
    (None, "train", -1)])
def test_parse_choice(text, mode, want):
    assert parse_choice(text, mode=mode) == want
