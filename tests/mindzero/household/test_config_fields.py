"""No config field silently ignored on the household path (issue 32): `trainer.advantage_*`
and `mindzero.reward.duplicates` change what its rollout returns, the warm-up's retries
act, and `mindzero.warmup.min_lead` (no observation lead to name) is refused in one line."""
import jax
import numpy as np
import pytest

from jaxtom.mindzero import driver
from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero.household import train as ht
from jaxtom.household.goals import Goal
from jaxtom.mindzero.household.particles import format_particles
from jaxtom.mindzero.warmup import WarmupCollapsed

TINY = "configs/mindzero_household_tiny.py"
TABLE = Goal.make("setup_table", {"plate": 2, "cutleryfork": 2}, "kitchentable")
FRIDGE = Goal.make("put_fridge", {"apple": 1, "salmon": 2}, "fridge")
WASHER = Goal.make("put_dishwasher", {"plate": 3}, "dishwasher")
SINK = Goal.make("put_fridge", {"apple": 2}, "fridge")


class _Codec:
    """One token per character; 0 is eos."""
    eos_ids, pad_id, chat = (0,), 0, False

    def completion_ids(self, text):
        return [ord(c) for c in text] + [0]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)


def _terms(episode, t, goals, groups, width):
    """Log-likelihoods that differ by sample and hypothesis, no prior."""
    ll = np.zeros((len(goals), width))
    for b, gs in enumerate(goals):
        ll[b, :len(gs)] = -1.0 - np.arange(len(gs)) - 0.7 * (b % 4)
    return ll, None


# sample 0 repeats a goal (4 entries, 3 distinct); the others are 3 distinct goals
TEXTS = ([format_particles([TABLE, TABLE, FRIDGE, WASHER], [0.3, 0.3, 0.2, 0.2])]
         + [format_particles([TABLE, FRIDGE, [WASHER, SINK][g % 2]], [0.5, 0.1 * g, 0.2])
            for g in range(1, 8)])


def _rollout(monkeypatch, *overrides):
    cfg = load_config(TINY, ["trainer.group_size=4", *overrides])
    codec = _Codec()
    monkeypatch.setattr(ht, "generate_rows", lambda model, prompts, rows, **kw: [
        codec.completion_ids(x) for x in TEXTS])
    rollout = ht.ParticleRollout(cfg, codec, lambda e, t: [1, 2, 3], _terms)
    tasks = [{"episode": 0, "t": 5, "row": 0}, {"episode": 1, "t": 7, "row": 1}]
    return rollout(None, tasks, jax.random.key(0), 0)


def test_household_rollout_advantages_follow_advantage_scale(monkeypatch):
    none = np.reshape(_rollout(monkeypatch, "trainer.advantage_scale=none").advantages, (2, 4))
    group = np.reshape(_rollout(monkeypatch).advantages, (2, 4))
    batch = np.reshape(_rollout(monkeypatch, "trainer.advantage_scale=batch").advantages,
                       (2, 4))
    floor = np.reshape(_rollout(monkeypatch, "trainer.advantage_std_floor=100.0").advantages,
                       (2, 4))
    assert np.all(np.ptp(none, axis=1) > 0)
    std = none.std(axis=1, ddof=1, keepdims=True)
    np.testing.assert_allclose(group, none / std, rtol=1e-4)
    np.testing.assert_allclose(batch, none / np.sqrt((none ** 2).sum() / 6), rtol=1e-4)
    np.testing.assert_allclose(floor, none / np.maximum(std, 100.0), rtol=1e-4)


def test_household_rollout_follows_reward_duplicates(monkeypatch):
    merge = _rollout(monkeypatch, "mindzero.reward.duplicates=merge")
    reject = _rollout(monkeypatch, "mindzero.reward.duplicates=reject")
    assert merge.metrics["valid"] == 1.0 and reject.metrics["valid"] == 7 / 8
    # the repeated goal's sample: scored when merged, the format penalty when rejected
    assert reject.advantages[0] < merge.advantages[0]
    assert reject.advantages[0] == min(reject.advantages[:4])


def test_household_rollout_reports_prompt_lengths_for_shared_prompts(monkeypatch):
    """`trainer.share_prompts` acts on the household: each group's prompt is packed once."""
    import dataclasses

    from jaxtom.rl.trainer import pack_rollout
    out = _rollout(monkeypatch, "trainer.row_len=512")
    assert out.prompt_lens == [3] * 8
    cfg = load_config(TINY, ["trainer.group_size=4", "trainer.row_len=512"]).trainer
    shared = pack_rollout(out, dataclasses.replace(cfg, share_prompts=True))
    assert shared.parent_ids is not None and shared.tokens.shape[0] == 2  # one row per group


@pytest.mark.parametrize("override, field", [
    ("mindzero.warmup.min_lead=0.5", "mindzero.warmup.min_lead"),
    ("trainer.explore_temperature=2.0", "trainer.explore_temperature")])
def test_household_refuses_what_it_cannot_use_in_one_line(override, field):
    with pytest.raises(ConfigError) as err:
        load_config(TINY, [override])
    msg = str(err.value)
    assert msg.startswith(f"config error: {field}:") and "'household'" in msg
    assert "\n" not in msg


def test_household_warmup_is_the_checked_warmup_with_a_household_rebuild(tmp_path,
                                                                          monkeypatch):
    """The household runs the gridworld's checked warm-up (retries, check_at and
    min_distinct act), rebuilding its own model from the run's tokenizer for a retry."""
    seen = {}

    class Stop(Exception):
        pass

    def checked(config, model, run_dir, monitor, mesh, **kw):
        seen.update(kw, config=config, model=model)
        raise Stop

    monkeypatch.setattr(driver, "checked_warm_up", checked)
    cfg = load_config(TINY, [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=2",
        "mindzero.data.eval_episodes=1", "mindzero.warmup.retries=2",
        "mindzero.warmup.check_at=100", "model.vocab_size=320"])
    with pytest.raises(Stop):
        driver.train(cfg, progress=False)
    assert isinstance(seen["rollout"], ht.WarmupRollout)
    assert seen["config"].mindzero.warmup.retries == 2
    fresh = seen["rebuild"](seen["config"])
    assert type(fresh) is type(seen["model"])


@pytest.mark.slow  # ~30 s of CPU: two warm-up attempts and their monitors
def test_a_failed_household_warmup_is_retried_then_stops(tmp_path):
    """warmup.retries acts on the household as on the gridworld: a check out of reach
    (min_distinct 999) runs a second attempt from init seed +1, then stops the run."""
    cfg = load_config(TINY, [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=2",
        "mindzero.data.eval_episodes=1", "mindzero.warmup.steps=1",
        "mindzero.warmup.batch_size=2", "mindzero.warmup.min_distinct=999",
        "mindzero.warmup.retries=1", "mindzero.household.monitor_rows=2",
        "trainer.max_new_tokens=4", "trainer.eval_every=0", "model.vocab_size=320"])
    with pytest.raises(WarmupCollapsed, match="distinct completions"):
        driver.train(cfg, progress=False)
    for d in ("warmup_train", "warmup_train_1"):
        assert (tmp_path / d / "checkpoints").is_dir(), d
    assert not (tmp_path / "warmup").exists() and not (tmp_path / "ssrl").exists()


def test_balance_episodes_gives_every_episode_the_same_rows():
    """`mindzero.household.balance_episodes` (on in the CPU default) reaches the prompts the
    warm-up and SSRL read."""
    from jaxtom.mindzero.household import data as hd
    over = ["mindzero.data.train_episodes=6"]
    plain = load_config(TINY, over + ["mindzero.household.balance_episodes=false"])
    even = load_config(TINY, over)  # the default balances
    episodes = hd.make_episodes(plain, "train")
    per_step = ht.task_records(episodes, plain)
    rows = ht.task_records(episodes, even)
    lengths = np.bincount([r["episode"] for r in per_step])
    counts = np.bincount([r["episode"] for r in rows])
    assert lengths.min() < lengths.max()  # the episodes differ, so balancing changes them
    assert set(counts) == {int(np.median(lengths))}
    assert {(r["episode"], r["t"]) for r in rows} <= {(r["episode"], r["t"]) for r in per_step}
    for e in range(len(episodes)):  # first and last timestep of every episode kept
        ts = [r["t"] for r in per_step if r["episode"] == e]
        kept = [r["t"] for r in rows if r["episode"] == e]
        assert kept[0] == ts[0] and kept[-1] == ts[-1]
    with pytest.raises(ConfigError, match="balance_episodes"):
        load_config(TINY, ["mindzero.household.balance_episodes=1"])
