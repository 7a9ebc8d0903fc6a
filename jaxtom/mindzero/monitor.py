"""The validation monitor of a MindZero run: a fixed sample of held-out (episode, t) prompts
scored as the evaluation scores them, and `BestModel`, which keeps the model of the best
monitor log score. Labels are read only here, for logging and the kept-model choice."""

from __future__ import annotations

import json

import jax
import numpy as np

from jaxtom import storage
from jaxtom.eval.metrics import goal_scores
from jaxtom.gridworld import goal_index
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero.evaluate import dense
from jaxtom.mindzero.observation import HostEpisodes, approach_order, get_observation
from jaxtom.mindzero.particles import parse_particles
from jaxtom.mindzero.policy import Codec, sample_completions
from jaxtom.models.orbax_io import restore_params, save_model


def heldout_monitor(config, view: HostEpisodes, codec: Codec, num_rows: int = 128):
    """An eval hook scoring the model on a fixed sample of held-out (episode, t): top-1 goal
    accuracy and mean log score of the true goal (queried as the evaluation does, 1% uniform
    mix), and how many distinct completions it gives (1 = it ignores its observation). Labels
    are read only here, for logging; training never sees them."""
    d, e_cfg = config.mindzero.data, config.mindzero.eval
    render = get_observation(d.observation)
    rows, true = monitor_rows(config, view, num_rows)
    n = d.num_particles
    prompts = [codec.prompt_ids(render(view, e, t, n)) for e, t in rows]

    def score(step, model) -> dict:
        texts, _, _ = sample_completions(model, codec, prompts,
                                         key=jax.random.key(config.trainer.seed),
                                         temperature=e_cfg.temperature,
                                         max_new_tokens=config.trainer.max_new_tokens)
        return monitor_scores(texts, rows, true, view, n, e_cfg.score_mix)
    return score


def monitor_rows(config, view: HostEpisodes, num_rows: int):
    """The held-out monitor's fixed sample of (episode, t) and their true goal indices."""
    records = data_lib.timestep_records(view)
    pick = np.random.default_rng(config.trainer.seed + 11).choice(
        len(records), min(num_rows, len(records)), replace=False)
    rows = [records[i] for i in np.sort(pick)]
    return rows, np.array([int(goal_index(*view.goal[e], 8)) for e, _ in rows])


def monitor_scores(texts, rows, true, view: HostEpisodes, num_particles: int,
                   score_mix: float) -> dict:
    """Top-1, mean log score of the true goal and distinct completions of the monitor's
    completions (malformed ones score as the evaluation scores them), and `lead_first`: the
    share whose first hypothesis names the observation's lead (`approach_order`'s first
    object) as object1, the slot a model that reads its observation copies."""
    parsed = [parse_particles(x, view.labels[e], mode="eval", num_particles=num_particles)
              for x, (e, _) in zip(texts, rows)]
    beliefs = np.stack([dense(p, 8) for p in parsed])
    s = goal_scores(beliefs, true, np.full_like(beliefs, 1.0 / beliefs.shape[1]), score_mix)
    lead = [bool(p.ok) and p.pairs[0][0] == approach_order(view, e, t)[0]
            for p, (e, t) in zip(parsed, rows)]
    return {"top1": float(np.mean(s["top1"])), "log_score": float(np.mean(s["log_score"])),
            "distinct_completions": float(len(set(texts))), "lead_first": float(np.mean(lead))}


class BestModel:
    """An SSRL eval hook that keeps the model of the best validation monitor log score, the
    warm-up's (step 0) included, because RL on the ELBO can walk off a good policy and end
    below where it passed. Only with validation episodes (`data.val_episodes`): choosing on
    the eval episodes would score the choice on what chose it. The record (`best.json`) and
    the model (`best_<step>`) live in the run directory, so a resumed run chooses from the
    same history."""

    def __init__(self, monitor, run_dir, start_model, start_scores: dict):
        self.monitor, self.run_dir, self.start_model = monitor, storage.path(run_dir), start_model
        self.path = self.run_dir / "best.json"
        if self.path.exists():
            self.record = json.loads(self.path.read_text())
        else:
            self._write({"step": 0, "log_score": float(start_scores["log_score"])})

    def _write(self, record: dict) -> None:
        self.record = record
        if jax.process_index() == 0:
            storage.write_json(self.path, record)

    def __call__(self, step: int, model) -> dict:
        scores = self.monitor(step, model)
        if scores["log_score"] > self.record["log_score"]:  # ties keep the earlier step
            old = self.record["step"]
            save_model(model, self.run_dir / f"best_{step}")
            self._write({"step": step, "log_score": float(scores["log_score"])})
            if old and jax.process_index() == 0:
                old_dir = self.run_dir / f"best_{old}"
                if old_dir.exists():
                    old_dir.rmtree()
        return {**scores, "kept_step": self.record["step"]}

    def chosen(self, last_model):
        """The kept model (`last_model` only gives its structure, unless it is the kept)."""
        step = self.record["step"]
        if step == 0:
            return self.start_model
        return restore_params(last_model, self.run_dir / f"best_{step}")
