"""CToM training on the shared GRPO trainer: the rollout is the controller's multi-phase,
multi-round conversation instead of one completion, and the batch carries the prediction
sub-batch (real + counterfactual replies) for the eta-capped NLL of the update step.

A CToM config file defines `get_config() -> jaxtom.config.Config` whose `ctom` section is a
`CToMSettings` (domain, tasks, simulator, controller caps); override it by dotted path,
e.g. `ctom.simulator=llm`, `ctom.controller.mode=direct`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from jaxtom import storage
from jaxtom.config import ConfigError, load_config, resolve_model_path
from jaxtom.ctom import lockstep
from jaxtom.ctom.config import CToMSettings
from jaxtom.ctom.controller import run_conversations
from jaxtom.ctom.policies import SamplerPolicy
from jaxtom.ctom.simulators import HTTPSimulator, ScriptedSimulator
from jaxtom.ctom.simulators_llm import LLMSimulator
from jaxtom.ctom.targets import prediction_targets, reply_targets, rollout_batch
from jaxtom.ctom.task_sets import training_tasks
from jaxtom.ctom.tiny import model_and_tokenizer
from jaxtom.errors import BadInputError
from jaxtom.models import add_lora, from_pretrained
from jaxtom.rl.batch import bucketed_rows, first_fit_rows, update_rows
from jaxtom.rl.step_config import StepConfig
from jaxtom.rl.trainer import Rollout, Trainer, TrainerConfig
from jaxtom.tokenizer import Tokenizer


def load_ctom_config(path: str | Path, overrides: Sequence[str] = ()):
    """(Config, its CToMSettings) from a configs/ctom_*.py file; `ctom.field=value` and
    `ctom.controller.field=value` overrides set the CToM section (e.g.
    `ctom.controller.mode=direct` for Prompting Base / Naive GRPO, `ctom.controller.w_effort=0`
    for CToM w/o effort)."""
    config = load_config(path, list(overrides))
    if config.ctom is None:
        raise ConfigError(str(path), "a CToM config (a Config with a ctom section)", "none")
    return config, config.ctom


def make_simulator(s: CToMSettings, model=None, tokenizer=None, mesh=None):
    """The configured user simulator; `llm` uses (model, tokenizer) when given, else loads
    `simulator_model` (a separate frozen model: the policy's weights change during training)
    into its shards on `mesh` when given."""
    if s.simulator == "scripted":
        return ScriptedSimulator(packing_disclosure=s.disclosure)
    if s.simulator == "http":
        if not s.simulator_url:
            raise ValueError("simulator='http' needs simulator_url (an OpenAI-compatible /v1)")
        return HTTPSimulator(s.simulator_url, s.simulator_model or "default",
                             temperature=s.simulator_temperature,
                             max_tokens=s.simulator_max_tokens)
    if s.simulator == "llm":
        if model is None:
            if not s.simulator_model:
                raise ValueError("simulator='llm' needs simulator_model: a .gguf file or an HF "
                                 "model dir with tokenizer.json")
            model, tokenizer = _load_model_and_tokenizer(s.simulator_model, s.simulator_dtype,
                                                         "simulator_model", mesh=mesh)
        if tokenizer is None:
            raise ValueError("make_simulator(model=...) for simulator='llm' needs tokenizer=")
        return LLMSimulator(model, tokenizer, temperature=s.simulator_temperature,
                            max_tokens=s.simulator_max_tokens)
    raise ValueError(f"simulator must be 'scripted', 'http' or 'llm', got {s.simulator!r}")


def _load_model_and_tokenizer(path: str | Path, dtype: str, what: str = "model.path",
                              compute_dtype: str | None = None, mesh=None):
    path = storage.path(resolve_model_path(str(path)))  # local or gs://
    if path.suffix != ".gguf" and not (path / "tokenizer.json").exists():
        raise BadInputError(f"{what}={path} must be a .gguf file or an HF dir with "
                            "tokenizer.json: CToM needs a real tokenizer and chat template")
    model = from_pretrained(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)
    tok = Tokenizer.from_gguf(path) if path.suffix == ".gguf" else Tokenizer.from_file(path)
    return model, tok


def load_model_and_tokenizer(config, mesh=None):
    """The policy and its tokenizer; read straight into its shards on `mesh` when given."""
    m = config.model
    model, tok = _load_model_and_tokenizer(m.path, m.param_dtype, compute_dtype=m.compute_dtype,
                                           mesh=mesh)
    if m.lora_rank:
        add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha or m.lora_rank)
    return model, tok


class ConversationRollout:
    """CToM's rollout: `group_size` conversations per task through the controller (plan,
    ASK / DRAFT / COMMIT, draft-predict-revise), real and counterfactual prediction targets,
    packed with the prediction sub-batch for the eta-capped NLL.

    On several processes every process runs the step's whole set of conversations in
    lockstep (the sampler is a collective), shares host results that could differ (simulator
    replies, coding scores), builds the step's whole batch and keeps its block of rows: see
    `jaxtom.ctom.lockstep` for why and what it costs. The samples, metrics and batch are
    those of one process. The batch is padded at the end to the row count the update uses
    for the processes (`padded_rows`: the learner's arithmetic for `step_cfg` on `mesh`), so
    that `Learner.put_batch` adds no padding between the processes' blocks
    (`lockstep.process_rows`).
    """

    def __init__(self, tok, settings: CToMSettings, cfg: TrainerConfig, step_cfg: StepConfig,
                 simulator=None, mesh=None):
        self.tok, self.settings, self.cfg = tok, settings, cfg
        # an in-process LLM simulator is read into the run's mesh: on several processes it is
        # a collective that every process calls alike (see lockstep.shared_simulator)
        self.simulator = simulator or make_simulator(settings, mesh=mesh)
        self.controller = settings.controller_config()
        self.data_parallel = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
        self.step_cfg = step_cfg

    def padded_rows(self, rows: int) -> int:
        """`rows` padded as the update pads them (`RowPlacement.row_split`), to a multiple of
        the process count."""
        s = self.step_cfg
        return update_rows(rows, self.data_parallel, s.ppo_mini_batches, s.micro_batches,
                           multiple_of=jax.process_count())[0]

    def __call__(self, model, tasks, key, step) -> Rollout:
        cfg, s = self.cfg, self.settings
        tasks = lockstep.global_tasks(tasks)  # every process: the step's whole set
        group = [r["task"] for r in tasks for _ in range(cfg.group_size)]
        groups = [int(r["row"]) for r in tasks for _ in range(cfg.group_size)]
        # conversation i (the policy's row id) is the global sampler row r * G + g
        policy = sampler_policy(model, self.tok, s, temperature=cfg.temperature,
                                top_p=cfg.top_p)
        simulator = lockstep.shared_simulator(self.simulator)
        convs = run_conversations(group, policy, simulator, self.tok, self.controller,
                                  key=key, seed=step, host_map=lockstep.shared_map)
        targets = (reply_targets(convs, self.tok) if s.reply_nll else
                   prediction_targets(convs, simulator, seed=step))
        ok = [c for c in convs if c.failed is None]
        metrics = {"conversations_failed": float(len(convs) - len(ok)),
                   "prediction_targets": float(len(targets)),
                   "counterfactual_targets": float(sum(t.counterfactual for t in targets))}
        if ok:
            metrics.update(reward_mean=float(np.mean([c.reward for c in ok])),
                           reward_sq=float(np.mean([c.reward ** 2 for c in ok])),
                           score_mean=float(np.mean([c.score for c in ok])),
                           effort_mean=float(np.mean([c.effort for c in ok])),
                           visible_rounds=float(np.mean([len(c.rounds) for c in ok])))
        # an all-failed step still gets a (masked, no-op) batch: every process must update
        # the rows first-fit fills (rounds of several conversations share a row), not one
        # row per round: most of those would be padding the update computes anyway
        num_rows = cfg.num_rows or bucketed_rows(first_fit_rows(
            [len(seg.tokens) for c in ok for seg in c.sequences], cfg.row_len))
        batch, counts = rollout_batch(convs, groups, targets, self.tok, num_rows=num_rows,
                                      row_len=cfg.row_len, pred_rows=s.pred_rows,
                                      pred_row_len=s.pred_row_len, pad_id=cfg.pad_id,
                                      pred_rows_multiple=8, return_metrics=True,
                                      advantage_scale=cfg.advantage_scale,
                                      advantage_std_floor=cfg.advantage_std_floor)
        metrics.update({f"pred/{k}": float(v) for k, v in counts.items()})
        # every process holds the whole step's metrics: the same values with the same count
        # make the trainer's count-weighted mean over processes those values
        return Rollout(batch=lockstep.process_rows(batch, self.padded_rows), metrics=metrics,
                       count=max(len(ok), 1))


def sampler_policy(model, tok, s: CToMSettings, **kwargs) -> SamplerPolicy:
    """The controller's policy on `model`, as the settings ask (kept caches, fixed shapes)."""
    return SamplerPolicy(model, tok, reuse_cache=s.reuse_cache, min_rows=s.sampler_min_rows,
                         min_slots=s.sampler_min_slots, **kwargs)


def task_records(tok, tasks) -> list[dict]:
    return [{"prompt": tok.encode(t.prompt), "task": t} for t in tasks]


def conversation_trainer(model, tok, tasks, step_cfg, cfg, settings: CToMSettings, *,
                         simulator=None, mesh=None) -> Trainer:
    """The one trainer with CToM's conversation rollout."""
    rollout = ConversationRollout(tok, settings, cfg, step_cfg, simulator, mesh=mesh)
    return Trainer(model, task_records(tok, tasks), rollout, step_cfg, cfg, mesh=mesh,
                   desc="ctom")


def policy_and_tokenizer(config, mesh=None):
    """The policy a run starts from: a checkpoint (`model.path`), or a tiny decoder trained
    from scratch after its format warm-up (`jaxtom.ctom.tiny`, `model.path` "")."""
    if not config.model.path:
        return model_and_tokenizer(config, mesh)
    return load_model_and_tokenizer(config, mesh)


def train(config, mesh=None):
    """Trains a CToM config (`jaxtom train`); returns the final TrainState."""
    model, tok = policy_and_tokenizer(config, mesh)
    trainer = conversation_trainer(model, tok, training_tasks(config.ctom, config.trainer.seed),
                          config.step, config.trainer, config.ctom, mesh=mesh)
    del model  # the trainer lets the loaded model go once its (sharded) state is built
    return trainer.run()


def train_from_config(path: str | Path, overrides: Sequence[str] = ()):
    """Loads a CToM config file and trains it; returns the final TrainState."""
    config, _ = load_ctom_config(path, overrides)
    return train(config)
