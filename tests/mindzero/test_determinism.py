"""One machine, one config, one seed: the same run twice gives the same numbers, every step.

The README's main job promises an identical table when rerun; this checks the property it
rests on, on a micro config that still goes through every stage (episodes, BPE, warm-up,
SSRL sampling, rewards, updates, the held-out monitor)."""
import json

import jax
import numpy as np
from flax import nnx

from jaxtom.config import load_config
from jaxtom.mindzero.driver import train
from jaxtom.mindzero.goals_text import load_model

MICRO = ["mindzero.data.train_episodes=8", "mindzero.data.eval_episodes=2",
         "mindzero.warmup.steps=3", "mindzero.warmup.min_distinct=0", "mindzero.warmup.min_lead=0", "mindzero.warmup.batch_size=4", "trainer.total_steps=3",
         "trainer.prompts_per_step=2", "trainer.group_size=4", "trainer.max_new_tokens=24",
         "trainer.eval_every=3", "model.vocab_size=320", "mindzero.data.val_episodes=2",
         "mindzero.data.keep=best"]


def _run(workdir):
    cfg = load_config("configs/mindzero_gridworld_tiny.py",
                      [f"trainer.workdir='{workdir}'", *MICRO])
    train(cfg, progress=False)
    lines = [json.loads(x) for x in (workdir / "ssrl" / "metrics.jsonl").read_text().split("\n")
             if x]
    # every logged value but the wall times ("time/"), which no two runs share
    lines = [{k: v for k, v in line.items() if not k.startswith("time/")} for line in lines]
    model, _ = load_model(cfg, workdir / "checkpoint")
    params = [np.asarray(x) for x in jax.tree.leaves(nnx.state(model))]
    return lines, params, (workdir / "tokenizer.json").read_text()


def test_two_runs_of_one_config_give_identical_metrics_and_parameters(tmp_path):
    first, params_a, tok_a = _run(tmp_path / "a")
    second, params_b, tok_b = _run(tmp_path / "b")
    assert tok_a == tok_b
    kept = [json.loads((tmp_path / d / "best.json").read_text()) for d in "ab"]
    assert kept[0] == kept[1] and kept[0]["step"] in (0, 3)  # the warm-up or the one monitor
    assert len(first) == 3 and "eval/top1" in first[-1]
    assert first == second  # every logged float, bit for bit (JSON round-trips floats exactly)
    assert all(np.array_equal(a, b) for a, b in zip(params_a, params_b))
    # and the metrics are live: a run that trains moves its parameters and its loss
    assert any(first[0][k] != first[-1][k] for k in ("loss_grpo", "reward_mean"))
