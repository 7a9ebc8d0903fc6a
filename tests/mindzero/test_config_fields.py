"""No config field silently ignored on the MindZero gridworld paths (issue 32): each field
either changes what its rollout or warm-up does (checked here on direct calls, no training
run) or is refused at config validation with one `config error:` line naming it and the
task."""
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from jaxtom.mindzero import driver
from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero import goals_text, task
from jaxtom.mindzero import vl_train
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.reward import cumulative_log_likelihoods

GOALS = "configs/mindzero_gridworld_tiny.py"
VL = "configs/mindzero_gridworld_qwen3vl_tiny.py"
QA = "configs/mindzero_qa_tiny.py"


class _Codec:
    """One token per character (0 is eos); the exploration markers are fixed ids."""
    eos_ids, pad_id = (0,), 0
    probability_markers = ((7,), (8, 9))
    decision_ids = frozenset()

    def prompt_ids(self, text):
        return [1 + (ord(c) % 50) for c in text[:20]]

    def completion_ids(self, text):
        return [ord(c) for c in text] + [0]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)


@pytest.fixture(scope="module")
def view(episodes):
    return HostEpisodes.from_episodes(episodes)


@pytest.fixture(scope="module")
def table(episodes, params):
    return np.asarray(cumulative_log_likelihoods(episodes.trajectories, params))


def _particle_advantages(view, table, *overrides):
    """The goal rollout's advantages and group ids for two prompts of four teacher samples
    each (distinct particle sets, so distinct rewards) under `overrides`."""
    cfg = load_config(GOALS, ["trainer.group_size=4", "mindzero.data.num_particles=2",
                              *overrides])
    codec = _Codec()
    rollout = goals_text.ParticleRollout(cfg, codec, view, table)
    tasks = [{"episode": 0, "t": 5, "row": 0}, {"episode": 3, "t": 9, "row": 1}]
    texts = [data_lib.warmup_target(view, task["episode"], 2, np.random.default_rng(g),
                                    task["t"], "random") for task in tasks for g in range(4)]
    rollout.generate = lambda model, prompts, tasks, key: [codec.completion_ids(x)
                                                           for x in texts]
    out = rollout(None, tasks, jax.random.key(0), 0)
    return np.asarray(out.advantages).reshape(2, 4)


def test_goal_rollout_advantages_follow_advantage_scale_and_std_floor(view, table):
    none = _particle_advantages(view, table, "trainer.advantage_scale=none")
    group = _particle_advantages(view, table)
    batch = _particle_advantages(view, table, "trainer.advantage_scale=batch")
    floor = _particle_advantages(view, table, "trainer.advantage_std_floor=1000.0")
    assert np.all(np.ptp(none, axis=1) > 0)  # the samples' rewards differ
    np.testing.assert_allclose(none.sum(axis=1), 0, atol=1e-3 * np.abs(none).max())
    std = none.std(axis=1, ddof=1, keepdims=True)
    np.testing.assert_allclose(group, none / std, rtol=1e-4)
    np.testing.assert_allclose(batch, none / np.sqrt((none ** 2).sum() / 6), rtol=1e-4)
    np.testing.assert_allclose(floor, none / np.maximum(std, 1000.0), rtol=1e-4)


def test_vl_sampler_receives_the_explore_temperature(view, monkeypatch):
    seen = []
    monkeypatch.setattr(vl_train, "generate_vl_rows",
                        lambda model, prompts, keys, rows, **kw: seen.append(kw) or
                        [[0]] * len(prompts))
    tasks = [{"episode": 0, "t": 3, "row": 0}]
    pictures = SimpleNamespace(image=lambda e, t: None, num_patches=4)
    for temperature in (2.5, 0.0):
        cfg = load_config(VL, [f"trainer.explore_temperature={temperature}"])
        rollout = vl_train.VLParticleRollout(cfg, _Codec(), view, None, pictures)
        rollout.generate(None, [[1, 2]] * cfg.trainer.group_size, tasks, jax.random.key(0))
    assert seen[0]["explore_temperature"] == 2.5
    assert seen[0]["explore_after"] == (7,) and seen[0]["explore_tokens"] == (8, 9)
    assert "explore_temperature" not in seen[1]  # 0: off, as on the text path


def test_vl_configs_do_not_share_prompts_and_refuse_it_in_one_line():
    assert not load_config(VL).trainer.share_prompts  # the tiny config it derives from shares
    assert load_config(GOALS).trainer.share_prompts
    with pytest.raises(ConfigError) as err:
        load_config(VL, ["trainer.share_prompts=true"])
    msg = str(err.value)
    assert msg.startswith("config error: trainer.share_prompts:") and "image" in msg
    assert "\n" not in msg
    # the picture's style reaches image runs only; elsewhere it is refused, not ignored
    assert load_config(VL, ["mindzero.data.image_style=cells"]).mindzero.data.image_style == \
        "cells"
    for path, override in ((GOALS, "mindzero.data.image_style=cells"),
                           ("configs/mindzero_household_tiny.py", "mindzero.warmup.read_steps=5")):
        with pytest.raises(ConfigError, match=override.split("=")[0].split(".", 1)[1]):
            load_config(path, [override])


def test_vl_warmup_is_the_checked_warmup_with_a_vl_rebuild(tmp_path, monkeypatch, episodes):
    """Image observations run the goal path's checked warm-up (retries, check_at, min_lead,
    min_distinct act), rebuilding a Qwen3-VL for a retry; the VL tokenizer has the "0."
    token that `trainer.explore_temperature` explores after."""
    from jaxtom.models import Qwen3VL
    few = episodes.take([0, 1])  # a small BPE corpus
    monkeypatch.setattr(goals_text, "make_episodes", lambda config: (few, few))
    seen = {}

    class Stop(Exception):
        pass

    def checked(config, model, run_dir, monitor, mesh, **kw):
        seen.update(kw, config=config)
        raise Stop

    monkeypatch.setattr(driver, "checked_warm_up", checked)
    cfg = load_config(VL, [f"trainer.workdir='{tmp_path}'", "model.vocab_size=1024",
                           "mindzero.warmup.retries=2", "mindzero.warmup.min_lead=0.5",
                           "mindzero.data.observation=image_short",
                           "mindzero.data.image_style=cells", "mindzero.data.num_particles=4"])
    with pytest.raises(Stop):
        driver.train(cfg, progress=False)
    assert isinstance(seen["rollout"], vl_train.VLWarmupRollout)
    assert seen["config"].mindzero.warmup.retries == 2
    assert isinstance(seen["rebuild"](seen["config"]), Qwen3VL)
    codec = seen["rollout"].codec
    markers, digits = codec.probability_markers
    assert markers and len(digits) == 10
    # every hypothesis's digit is a token of its own, as exploration samples it (the BPE had
    # merged a digit with the next hypothesis's opening or with the answer's end)
    from jaxtom.mindzero.particles import format_particles
    answer = format_particles(
        [(0, 1), (0, 2), (0, 3)], [0.4, 0.3, 0.3], HostEpisodes.from_episodes(few).labels[0],
        decimals=1)
    ids = codec.tokenizer.encode(answer)
    after = [codec.decode([ids[i + 1]]) for i, x in enumerate(ids[:-1]) if x in markers]
    assert after == ["4", "3", "3"]
    # the answer's fixed text is one token per piece: a hypothesis costs its 4 label words,
    # the 5 pieces around them, "0.", its digit and the separator or the close (24 tokens
    # before the pieces)
    words = sum(len(codec.tokenizer.encode(w)) for w in answer.replace('"', " ").split()
                if w.isalpha() and w not in ("color", "shape", "object", "p", "particles"))
    assert len(ids) == 1 + 3 * (5 + 3) + words, [codec.decode([i]) for i in ids]
    assert codec.decode(ids) == answer


@pytest.mark.parametrize("field, value", [
    ("mindzero.warmup.retries", 1), ("mindzero.warmup.check_at", 5),
    ("mindzero.warmup.min_lead", 0.5), ("mindzero.warmup.min_distinct", 4),
    ("mindzero.warmup.read_steps", 5), ("trainer.explore_temperature", 2.0)])
def test_qa_refuses_what_it_cannot_use_in_one_line(field, value):
    with pytest.raises(ConfigError) as err:
        task.get(load_config(QA, [f"{field}={value}"]))
    msg = str(err.value)
    assert msg.startswith(f"config error: {field}:") and "'qa'" in msg
    assert "\n" not in msg
    task.get(load_config(QA, [f"{field}=0"]))  # off is fine


@pytest.mark.parametrize("config, field, value", [
    (GOALS, "mindzero.reward.likelihood_floor", "1e-8"),
    ("configs/mindzero_household_tiny.py", "mindzero.reward.q_floor", "1e-8"),
])
def test_each_domain_refuses_the_other_domains_reward_floor(config, field, value):
    """One RewardConfig, two named floors: the gridworld floors q (`q_floor`), the household
    likelihood x prior (`likelihood_floor`); setting the one a domain does not use is a
    one-line error naming it, and the one it uses is accepted."""
    with pytest.raises(ConfigError) as err:
        load_config(config, [f"{field}={value}"])
    assert field in str(err.value) and "\n" not in str(err.value)
    other = "q_floor" if "likelihood" in field else "likelihood_floor"
    assert getattr(load_config(config, [f"mindzero.reward.{other}={value}"]).mindzero.reward,
                   other) == float(value)
