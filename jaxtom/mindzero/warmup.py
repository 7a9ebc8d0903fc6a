"""MindZero's format warm-up: label-free teacher particles as supervised completions on the one
trainer, checked on the held-out monitor and retried from a fresh initialisation when the
model writes the format without reading its observation (`checked_warm_up`, shared by the
goal, image and household tasks)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np

from jaxtom import storage
from jaxtom.mindzero import data as data_lib
from jaxtom.mindzero.data import PromptCache
from jaxtom.models.orbax_io import save_model
from jaxtom.mindzero.observation import HostEpisodes, approach_order
from jaxtom.mindzero.observation import ranked_partner
from jaxtom.mindzero.particles import format_particles
from jaxtom.mindzero.policy import Codec
from jaxtom.rl import StepConfig
from jaxtom.rl.trainer import Rollout, Trainer, completion_rows


def warmup_step_config(config) -> StepConfig:
    """The warm-up's optimiser: supervised (no KL, no weight decay), the SSRL step otherwise.
    It trains the whole model: `step.freeze_vision` holds the vision tower during SSRL only,
    since the warm-up is where a from-scratch tower learns to read the picture (frozen
    there, it would stay at its random initialisation)."""
    w = config.mindzero.warmup
    return dataclasses.replace(
        config.step, learning_rate=w.learning_rate, kl_coef=0.0, weight_decay=0.0,
        warmup_steps=min(10, w.steps), lambda_entropy=0.0,
        end_lr_ratio=0.0, reference="none", freeze_vision=False)


def warmup_trainer_config(config):
    w = config.mindzero.warmup
    return dataclasses.replace(
        config.trainer, workdir=str(storage.path(config.trainer.workdir) / "warmup_train"),
        total_steps=w.steps, prompts_per_step=w.batch_size, eval_every=0,
        share_prompts=False,  # one target per prompt: nothing to share
        checkpoint_every=max(1, min(config.trainer.checkpoint_every, w.steps)),
        seed=config.trainer.seed + 1)


def longest_teacher_target(config, codec, view, samples: int = 256) -> int:
    """A bound on the warm-up's target length: the longest of `samples` teacher targets
    plus a quarter (probabilities and labels vary in token count)."""
    d, w = config.mindzero.data, config.mindzero.warmup
    rng = np.random.default_rng(config.trainer.seed)
    records = data_lib.timestep_records(view)
    pick = rng.choice(len(records), min(samples, len(records)), replace=False)
    longest = max(len(codec.completion_ids(data_lib.warmup_target(
        view, e, d.num_particles, rng, t, w.teacher))) for e, t in (records[i] for i in pick))
    return longest + longest // 4 + 1


class WarmupRollout:
    """Teacher particles as supervised completions (advantage 1, one sequence per prompt).
    A record's target is drawn from `default_rng([seed, step, row])`: the same on any
    number of processes and after a resume."""

    def __init__(self, config, codec: Codec, view: HostEpisodes):
        self.config, self.codec, self.view = config, codec, view
        self.prompts = PromptCache(config, codec, view)
        # the picture outlines the ranked partner and the teacher's first pair names it:
        # `read_share` rows then read it too (`lead_opening(with_partner=True)`)
        self.marks_partner = (config.mindzero.data.image_style == "cells_ranked"
                              and config.mindzero.warmup.teacher in ("listed", "pictured"))

    def __call__(self, model, tasks, key, step) -> Rollout:
        d, w = self.config.mindzero.data, self.config.mindzero.warmup
        if step < w.read_steps:  # the answer's opening, the lead (`WarmupSpec.read_steps`)
            return teacher_rollout(tasks, step, self.config.trainer.seed, self.codec,
                                   self.prompts, lambda e, t, rng: lead_opening(self.view, e, t))

        def target(e, t, rng):
            reading = bool(w.read_share) and rng.random() < w.read_share
            ids = self.codec.completion_ids(data_lib.warmup_target(
                self.view, e, d.num_particles, rng, t, w.teacher, w.order, w.evidence_order))
            if not reading:
                return ids
            return opening_ids(self.codec, ids, lead_opening(
                self.view, e, t, with_partner=self.marks_partner
                and ranked_partner(self.view, e, t) >= 0))
        return teacher_rollout(tasks, step, self.config.trainer.seed, self.codec, self.prompts,
                               target, encoded=True)


def lead_name(view: HostEpisodes, e: int, t: int) -> str:
    """The label of the observation's lead object (what the teachers write as object1)."""
    return view.labels[e][approach_order(view, e, t)[0]]


def lead_opening(view: HostEpisodes, e: int, t: int, with_partner: bool = False) -> str:
    """An answer's opening up to its first object1, naming the lead (the reading phase's
    target), or up to its first object2 (`with_partner`: the listed first partner, where
    the picture outlines it). In the answer's own format, not the bare label: a reading phase
    on bare labels ("brown square") teaches answers that write the label's words inside the
    JSON ('"color":"brown"square"square...'), which do not parse."""
    order = approach_order(view, e, t)
    full = format_particles([(order[0], order[1])], np.array([1.0]), view.labels[e],
                            decimals=1)
    return full[:full.index(',"p"' if with_partner else ',"object2"')]


def opening_ids(codec: Codec, ids: list[int], opening: str) -> list[int]:
    """The first tokens of the answer `ids` that spell `opening` (a `read_share` row): cut
    from the answer's own tokens, not encoded apart, since the BPE merges the opening's
    last characters with what follows ('"}' + ',"'), and a row ending in a token the answers
    never use teaches answers that do not parse."""
    for k in range(1, len(ids) + 1):
        if len(codec.decode(ids[:k])) >= len(opening):
            if not codec.decode(ids[:k]).startswith(opening):
                raise ValueError(f"the answer does not open with {opening!r}")
            return ids[:k]
    raise ValueError(f"the answer is shorter than its opening {opening!r}")


def teacher_rollout(tasks, step: int, seed: int, codec: Codec, prompt, target,
                    encoded: bool = False) -> Rollout:
    """A warm-up batch: `prompt(e, t)` ids with the teacher's `target(e, t, rng)` text as a
    supervised completion (advantage 1), rng = `default_rng([seed, step, row])`; `encoded`:
    the target returns token ids, its own end token included or not."""
    prompts, targets = [], []
    for task in tasks:
        e, t = int(task["episode"]), int(task["t"])
        rng = np.random.default_rng([seed, step, int(task["row"])])
        prompts.append(prompt(e, t))
        ids = target(e, t, rng)
        targets.append(ids if encoded else codec.completion_ids(ids))
    seqs, masks = completion_rows(prompts, targets)
    return Rollout(seqs, masks, [1.0] * len(seqs), [int(t["row"]) for t in tasks],
                   count=len(seqs),
                   metrics={"target_tokens": float(np.mean([len(x) for x in targets]))})


class WarmupCollapsed(RuntimeError):
    """The warm-up ended input-independent; SSRL from it would only move a constant."""


def check_warmup(scores: dict, min_distinct: int, min_lead: float = 0.0,
                 label: str = "warm-up") -> dict:
    """The warm-up model's held-out monitor scores, printed; raises `WarmupCollapsed` when its
    greedy completions number fewer than `min_distinct` distinct strings, or when fewer than
    `min_lead` of them name the observation's lead first (it writes the format without
    reading its observation)."""
    lead = scores.get("lead_first")
    print(f"{label}, held-out monitor: top-1 {scores['top1']:.3f}, log score "
          f"{scores['log_score']:.2f}, {scores['distinct_completions']:.0f} distinct completions"
          + ("" if lead is None else f", lead named first {lead:.2f}"))
    if scores["distinct_completions"] < min_distinct:
        raise WarmupCollapsed(
            f"the warm-up model gives {scores['distinct_completions']:.0f} distinct completions "
            f"on the held-out monitor's prompts (expected >= {min_distinct}): it ignores its "
            "observation. Train it longer (mindzero.warmup.steps) or at another "
            "mindzero.warmup.learning_rate, or disable the check with "
            "mindzero.warmup.min_distinct=0.")
    if min_lead and (lead is None or lead < min_lead):
        raise WarmupCollapsed(
            f"the warm-up model names the observation's lead first in {lead} of the held-out "
            f"monitor's answers (expected >= {min_lead}): it writes the format without copying "
            "from its observation. Train it longer (mindzero.warmup.steps), at another "
            "mindzero.warmup.learning_rate or from another initialisation "
            "(mindzero.warmup.retries, model.seed), or disable the check with "
            "mindzero.warmup.min_lead=0.")
    return scores


class EarlyWarmupCheck:
    """A warm-up eval hook: at step `warmup.check_at` the held-out monitor's checks
    (`check_warmup`) run on the model so far; a failing attempt is marked abandoned in its
    directory (with the scores) and stopped, so a rerun skips it the same way."""
    MARKER = "abandoned.json"

    def __init__(self, monitor, spec, workdir: Path):
        self.monitor, self.spec, self.workdir = monitor, spec, workdir

    def __call__(self, step: int, model) -> dict:
        if step != self.spec.check_at:
            return {}
        scores = self.monitor(step, model)
        try:
            return check_warmup(scores, self.spec.min_distinct, self.spec.min_lead,
                                label=f"warm-up step {step}")
        except WarmupCollapsed as failed:
            if jax.process_index() == 0:
                storage.write_json(storage.path(self.workdir) / self.MARKER,
                                   {"step": step, "scores": scores, "reason": str(failed)},
                                   indent=1)
            raise

    @classmethod
    def raise_if_abandoned(cls, workdir) -> None:
        marker = storage.path(workdir) / cls.MARKER
        if marker.exists():
            record = json.loads(marker.read_text())
            raise WarmupCollapsed(f"warm-up attempt in {workdir} was abandoned at step "
                                  f"{record['step']}: {record['reason']}")


def checked_warm_up(config, model, run_dir: Path, monitor, mesh, *, tasks, rollout,
                    trainer_config, rebuild):
    """The format warm-up of every MindZero task: `rollout` on `tasks` under
    `trainer_config`, saved to `run_dir/warmup`; returns (model, monitor scores or None).
    Tasks that check their warm-up (goals, images, household: `rebuild` given) check it on
    the held-out `monitor` when `warmup.min_distinct`, `warmup.min_lead` or
    `trainer.eval_every` ask for it; QA's (`rebuild` None) is not checked. A warm-up that
    fails its check starts again from a fresh initialisation (`rebuild(config)` with model
    seed + k, under `warmup_train_k`) up to `warmup.retries` times, then the run stops;
    with `warmup.check_at` an attempt is also
    checked at that step and abandoned there if it fails (`EarlyWarmupCheck`). Every
    attempt is step-based and resumable, so a rerun takes the same path."""
    w, wcfg = config.mindzero.warmup, trainer_config
    checked = rebuild is not None and bool(config.trainer.eval_every or w.min_distinct
                                           or w.min_lead)
    early = rebuild is not None and bool(0 < w.check_at < w.steps
                                         and (w.min_distinct or w.min_lead))
    scores = None
    for attempt in range(w.retries + 1):
        if attempt:
            print(f"warm-up: retry {attempt} of {w.retries} from init seed +{attempt}")
            model = rebuild(dataclasses.replace(config, model=dataclasses.replace(
                config.model, seed=config.model.seed + attempt)))
        cfg = wcfg if not attempt else dataclasses.replace(
            wcfg, workdir=f"{wcfg.workdir}_{attempt}")
        hooks = []
        if early:
            cfg = dataclasses.replace(cfg, eval_every=w.check_at)
            hooks = [EarlyWarmupCheck(monitor, w, storage.path(cfg.workdir))]
        try:
            EarlyWarmupCheck.raise_if_abandoned(cfg.workdir)
            warm = Trainer(model, tasks, rollout, warmup_step_config(config), cfg, mesh=mesh,
                           eval_hooks=hooks, desc="warm-up")
            model = warm.learner.model(warm.run())
            if not checked:
                break
            scores = check_warmup(monitor(0, model), w.min_distinct, w.min_lead)
            break
        except WarmupCollapsed:
            if attempt == w.retries:
                raise
    save_model(model, run_dir / "warmup")
    return model, scores
