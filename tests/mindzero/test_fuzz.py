"""Hypothesis fuzzing of the parser: >= 10,000 mutated completions never raise and always get a
finite reward (well-formed ones the ELBO, malformed ones the format penalty)."""
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jaxtom.mindzero import RewardConfig, elbo_reward, parse_particles, to_arrays

LABELS = ["brown square", "pink square", "red square", "blue square", "green square",
          "yellow square", "orange square", "purple square"]
N = 2

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                      st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
json_any = st.recursive(json_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=6), kids, max_size=3)),
    max_leaves=6)
label = st.one_of(st.sampled_from(LABELS), st.sampled_from(["cyan square", "red", "",
                                                            "RED SQUARE", "red  circle"]))
prob = st.one_of(st.floats(0, 1), st.floats(allow_nan=True, allow_infinity=True),
                 st.floats(-1e300, 1e300), st.integers(-10**40, 10**40), json_leaf)


@st.composite
def particle(draw):
    def obj():
        color, _, shape = draw(label).partition(" ")
        o = {"color": color, "shape": shape}
        if draw(st.integers(0, 9)) == 0:
            o[draw(st.text(max_size=4))] = draw(json_any)
        if draw(st.integers(0, 9)) == 0:
            o.pop(draw(st.sampled_from(["color", "shape"])))
        return o if draw(st.integers(0, 19)) else draw(json_any)

    entry = {"object1": obj(), "object2": obj(), "p": draw(prob)}
    if draw(st.integers(0, 9)) == 0:
        entry[draw(st.text(max_size=4))] = draw(json_any)
    if draw(st.integers(0, 14)) == 0:
        entry.pop(draw(st.sampled_from(sorted(entry))))
    return entry


@st.composite
def completion(draw):
    entries = draw(st.lists(particle(), min_size=0, max_size=4))
    if entries and draw(st.integers(0, 5)) == 0:  # duplicate a particle
        entries.append(dict(entries[0]))
    top = {"particles": entries}
    if draw(st.integers(0, 9)) == 0:
        top = draw(st.one_of(json_any, st.just({"particles": draw(json_any)})))
    text = json.dumps(top, separators=(",", ":") if draw(st.booleans()) else None)
    mutation = draw(st.integers(0, 6))
    if mutation == 1 and text:  # truncate
        text = text[: draw(st.integers(0, len(text)))]
    elif mutation == 2:  # fence and prose
        text = f"Here you go:\n```json\n{text}\n```\nHope this helps {{"
    elif mutation == 3 and text:  # splice random characters
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=6)) + text[i:]
    elif mutation == 4:
        text = draw(st.text(max_size=40))
    elif mutation == 5:
        text = ""
    return text


def run_fuzz(examples):
    seen = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(completion(), st.sampled_from(["train", "eval"]))
    def check(text, mode):
        result = parse_particles(text, LABELS, mode=mode, num_particles=N)
        if result.ok:
            assert 1 <= len(result.pairs) <= N or mode == "train" and len(result.pairs) == N
            q = np.asarray(result.q)
            assert np.all(np.isfinite(q)) and np.all(q > 0) and abs(q.sum() - 1) < 1e-9
            for a, b in result.pairs:
                assert a != b and 0 <= a < 8 and 0 <= b < 8
        seen.append(result)

    check()
    assert len(seen) >= examples
    goals, q, ok = to_arrays(seen, 8, N)
    rng = np.random.default_rng(0)
    steps = rng.integers(0, 40, len(seen))
    log_lik = -rng.exponential(30.0, (len(seen), 56)) * steps[:, None]
    for cfg in (RewardConfig(), RewardConfig(format_penalty=-27.63, entropy_weight=0.0)):
        reward, _ = elbo_reward(log_lik, goals, q, ok, steps, cfg=cfg)
        assert np.all(np.isfinite(np.asarray(reward)))
    assert 0.02 < ok.mean() < 0.98  # the fuzzer exercises both outcomes


def test_fuzz_quick():
    run_fuzz(2_000)


@pytest.mark.slow
def test_fuzz_10k_completions():
    run_fuzz(10_000)
