"""The trainer: a toy task learns; SIGKILL + resume reproduces an uninterrupted run exactly
(one trainer process killed; the resume and the reference run in the test's process)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxtom import rl
from jaxtom.commands.train import build_model, build_task
from jaxtom.config import load_config
from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks
from jaxtom.rl.trainer import CompletionRollout, Trainer, TrainerConfig
from tests.rl.common import TINY, tiny_model

ROOT = Path(__file__).resolve().parents[2]


def test_toy_task_reward_rises(tmp_path):
    model = tiny_model(seed=2)
    tasks = toy_token_tasks(32, 4, TINY.vocab_size, seed=0)
    steps = 30
    cfg = TrainerConfig(workdir=str(tmp_path), total_steps=steps, group_size=4,
                        prompts_per_step=4, max_new_tokens=8, row_len=16,
                        checkpoint_every=steps, progress=False)
    trainer = Trainer(model, tasks, CompletionRollout(TargetTokenReward(3), cfg),
                      rl.StepConfig(learning_rate=1e-2, warmup_steps=3, kl_coef=0.01, weight_decay=0.0), cfg)
    trainer.run()
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    reward = np.array([r["reward_mean"] for r in rows])
    first, last = reward[:5].mean(), reward[-5:].mean()
    assert first < 0.2 and last > 0.5 and last > 3 * first, reward.round(2)
    assert (tmp_path / "tensorboard").is_dir()
    assert all(np.isfinite(v) for r in rows for v in r.values())


def test_shared_prompts_train_like_one_sequence_per_row(tmp_path):
    """`trainer.share_prompts` packs each group's prompt once: the same samples and rewards,
    and the same update to float32 rounding (one AdamW step: `adam_tol`), from rows that
    hold one group each."""
    import jax
    from jaxtom.rl.trainer import pack_rollout
    from tests.rl.common import adam_tol, params_array
    tasks = toy_token_tasks(16, 6, TINY.vocab_size, seed=1)
    step_cfg = rl.StepConfig(learning_rate=1e-2, kl_coef=0.0, weight_decay=0.0)
    runs = {}
    for share in (False, True):
        cfg = TrainerConfig(workdir=str(tmp_path / str(share)), total_steps=1, group_size=4,
                            prompts_per_step=4, max_new_tokens=6, row_len=16,
                            checkpoint_every=1, progress=False, share_prompts=share)
        rollout = CompletionRollout(TargetTokenReward(3), cfg)
        trainer = Trainer(tiny_model(seed=3), tasks, rollout, step_cfg, cfg)
        state = trainer.run()
        row = json.loads((tmp_path / str(share) / "metrics.jsonl").read_text().splitlines()[0])
        runs[share] = row, params_array(state)
        probe = rollout(tiny_model(seed=3), [dict(t, row=i) for i, t in enumerate(tasks[:4])],
                        jax.random.key(0), 0)
        batch = pack_rollout(probe, cfg)
        if share:
            assert batch.tokens.shape[0] == 4 and batch.parent_ids is not None
            assert batch.tokens.shape[1] % 64 == 0
        else:
            assert batch.tokens.shape == (16, 16) and batch.parent_ids is None
        assert int(batch.policy_mask.sum()) == sum(map(sum, probe.policy_masks))
    (plain, p_plain), (shared, p_shared) = runs[False], runs[True]
    assert plain["reward_mean"] == shared["reward_mean"]  # sampling ignores the packing
    assert plain["policy_tokens"] == shared["policy_tokens"]
    tol = adam_tol(p_plain, learning_rate=step_cfg.learning_rate, seq_len=64, tokens=64)
    np.testing.assert_allclose(p_shared, p_plain, rtol=0, atol=tol)
    assert np.abs(p_shared - params_array(Trainer(tiny_model(seed=3), tasks, CompletionRollout(
        TargetTokenReward(3), cfg), step_cfg, cfg).learner.init_state(tiny_model(seed=3))
    )).max() > 100 * tol  # the update itself is far larger than the tolerance


def _overrides(workdir, steps):
    return [f"trainer.workdir={workdir}", f"trainer.total_steps={steps}",
            "trainer.checkpoint_every=2", "trainer.progress=false",
            "trainer.keep_checkpoints=3", "task.name=tests.rl.slow_task:factory",
            "step.kl_coef=0.01"]


def _train_in_process(workdir, steps):
    from jaxtom.commands.train import train
    from jaxtom.config import load_config
    train(load_config(str(ROOT / "configs" / "toy_cpu.py"), _overrides(workdir, steps)),
          progress=False)


def _load(workdir, step):
    with ocp.CheckpointManager(Path(workdir) / "checkpoints") as mgr:
        out = mgr.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(), data=ocp.args.JsonRestore()))
    return {k: np.asarray(v) for k, v in out["state"].items()}, out["data"]


def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    """A `jaxtom train` process killed (SIGKILL) after its step-4 checkpoint, then the same
    run again, ends with the parameters, optimiser state and data-stream position of an
    uninterrupted run, bit for bit (the resume and the reference run in this process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    steps = 10
    full, killed = tmp_path / "full", tmp_path / "killed"
    cmd = [sys.executable, "-m", "jaxtom.cli", "train", str(ROOT / "configs" / "toy_cpu.py"),
           *_overrides(killed, steps)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    ckpt4 = killed / "checkpoints" / "4"
    deadline = time.time() + 300
    while not (ckpt4 / "_CHECKPOINT_METADATA").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = [json.loads(l)["step"] for l in (killed / "metrics.jsonl").read_text().splitlines()]
    assert max(written) < steps  # really killed mid-run
    _train_in_process(killed, steps)
    _train_in_process(full, steps)
    a, data_a = _load(full, steps)
    b, data_b = _load(killed, steps)
    assert a.keys() == b.keys() and len(a) > 10
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert data_a == data_b


def test_explore_kwargs_off_by_default_and_need_markers():
    from jaxtom.rl.trainer import explore_kwargs
    assert explore_kwargs(TrainerConfig()) == {}
    on = TrainerConfig(explore_temperature=2.0, explore_after=(5, 6))
    assert explore_kwargs(on) == {"explore_after": (5, 6), "explore_temperature": 2.0,
                                  "explore_tokens": ()}
    assert explore_kwargs(on, markers=[9], choices=[3])["explore_after"] == (9,)
    assert explore_kwargs(on, markers=[9], choices=[3])["explore_tokens"] == (3,)
    with pytest.raises(ValueError, match="needs marker tokens"):
        explore_kwargs(TrainerConfig(explore_temperature=2.0))


def test_process_shares_cover_the_batch_once():
    from jaxtom.rl.trainer import process_share
    for batch in range(1, 40):
        for n in range(1, batch + 1):
            shares = [process_share(batch, n, i) for i in range(n)]
            assert [lo for lo, _ in shares] == [0] + list(np.cumsum([k for _, k in shares]))[:-1]
            assert sum(k for _, k in shares) == batch
            assert max(k for _, k in shares) - min(k for _, k in shares) <= 1
            assert all(k >= 1 for _, k in shares)
    assert [process_share(10, 4, i) for i in range(4)] == [(0, 3), (3, 3), (6, 2), (8, 2)]


def test_task_stream_splits_any_batch_over_processes(monkeypatch):
    """10 prompts per step on 4 processes (10 % 4 != 0): each process's records, with their
    global `row`, concatenate to the one-process stream's batch, step after step."""
    import jax

    from jaxtom.rl.trainer import TaskStream
    tasks = [{"id": i} for i in range(23)]
    whole = TaskStream(tasks, 10, seed=3)
    want = [whole.next_local() for _ in range(3)]
    assert [t["row"] for t in want[0]] == list(range(10))
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    got = []
    for pid in range(4):
        monkeypatch.setattr(jax, "process_index", lambda pid=pid: pid)
        stream = TaskStream(tasks, 10, seed=3)
        got.append([stream.next_local() for _ in range(3)])
    assert [len(got[pid][0]) for pid in range(4)] == [3, 3, 2, 2]
    for step in range(3):
        assert [t for pid in range(4) for t in got[pid][step]] == want[step]
    with pytest.raises(ValueError, match="prompts_per_step=3 is fewer than the 4 processes"):
        TaskStream(tasks, 3, seed=3)


def test_compact_rows_reaches_the_sampler_with_and_without_exploration():
    """`trainer.compact_rows` is one of the sampler arguments every rollout takes from the
    trainer config (`compact_kwargs` / `explore_kwargs`), exploring or not; with it the
    prompts are padded to the run's prompt budget, row_len - max_new_tokens."""
    from jaxtom.rl.trainer import TrainerConfig, compact_kwargs, explore_kwargs
    on, off = TrainerConfig(compact_rows=True, row_len=64, max_new_tokens=8), TrainerConfig()
    compact = {"compact": True, "min_prompt_len": 56}
    assert compact_kwargs(on) == compact and compact_kwargs(off) == {}
    assert explore_kwargs(on) == compact and explore_kwargs(off) == {}
    explored = explore_kwargs(TrainerConfig(compact_rows=True, explore_temperature=2.0,
                                            row_len=64, max_new_tokens=8),
                              markers=[3], choices=[4, 5])
    assert explored == {"explore_after": (3,), "explore_temperature": 2.0,
                        "explore_tokens": (4, 5), **compact}


@pytest.mark.parametrize("steps", [10, 40])
def test_trainer_total_steps_is_the_schedule_length(tmp_path, steps):
    """One number sets both the loop and the learning-rate schedule: overriding
    `trainer.total_steps` moves where the cosine decay ends."""
    config = load_config("configs/toy_cpu.py", [f"trainer.workdir={tmp_path}",
                                                f"trainer.total_steps={steps}",
                                                "step.end_lr_ratio=0.1"])
    tasks, reward = build_task(config)
    trainer = Trainer(build_model(config, None), tasks, CompletionRollout(reward, config.trainer),
                      config.step, config.trainer)
    u, lr = config.step.updates_per_batch, config.step.learning_rate
    end = float(trainer.learner.schedule(steps * u))
    assert end == pytest.approx(0.1 * lr, rel=1e-5)
    assert float(trainer.learner.schedule(steps * u // 2)) > 0.2 * lr  # still decaying
