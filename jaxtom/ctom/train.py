"""CToM training on the shared GRPO trainer: the rollout is the controller's multi-phase,
multi-round conversation instead of one completion, and the batch carries the prediction
sub-batch (real + counterfactual replies) for the eta-capped NLL of the update step.

A CToM config file defines `get_config() -> jaxtom.config.Config` whose `ctom` section is a
`CToMSettings` (domain, tasks, simulator, controller caps); override it by dotted path,
e.g. `ctom.simulator=llm`, `ctom.controller.mode=direct`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np

from jaxtom.ctom import lockstep
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.data import load_tasks
from jaxtom.ctom.policies import SamplerPolicy
from jaxtom.ctom.simulators import HTTPSimulator, ScriptedSimulator
from jaxtom.ctom.targets import prediction_targets, reply_targets, rollout_batch
from jaxtom.rl.batch import bucketed_rows, first_fit_rows
from jaxtom.rl.trainer import Rollout, Trainer, TrainerConfig


@dataclasses.dataclass(frozen=True)
class WarmupSettings:
    """The format warm-up of a from-scratch model (`jaxtom.ctom.tiny`); steps 0 skips it."""
    # long enough for a decoder initialised at std 0.1 to learn to copy items from the context
    steps: int = 600
    batch_size: int = 4  # tasks per step, each played by the teacher in both modes
    learning_rate: float = 3e-3
    random_weight: float = 0.1  # loss weight of the teacher's random draws (tiny.weighted_mask)
    # rows per step predicting the user's replies (tiny.reply_rows): 0, so the warm-up is
    # label-free and what the model knows of the user comes from RL's replies (with reply
    # rows the warm-up learns most items and leaves CToM's NLL little to teach)
    reply_rows: int = 0


@dataclasses.dataclass(frozen=True)
class CToMSettings:
    domain: str = "math"
    tasks: str = "builtin"  # or a path in the paper's format; packing: generated from the seed
    num_tasks: int = 0  # 0: all (packing: the number of training tasks to generate)
    simulator: str = "scripted"  # scripted | http | llm
    simulator_url: str = ""  # http: the OpenAI-compatible /v1 base URL
    simulator_model: str = ""  # http: served model name; llm: a .gguf file or HF model dir
    simulator_temperature: float = 0.7  # table 4
    simulator_max_tokens: int = 512
    simulator_dtype: str = "float32"  # llm: dtype of the loaded simulator model
    controller: dict = dataclasses.field(default_factory=dict)  # ControllerConfig overrides
    pred_rows: int = 0  # 0: one prediction row per target (all trained); N: at most N rows
    pred_row_len: int = 2048
    eval_tasks: int = 0  # 0: the training tasks (packing: held-out tasks, never trained on)
    eval_conversations: int = 2  # per task
    # packing's simulated user: "mismatch" names the first wrong slot's item, "which" only the
    # slot (jaxtom.ctom.packing: the coding/writing and the math users' rules of Table 8)
    disclosure: str = "mismatch"
    # direct mode only: the label-matched control (Naive GRPO + reply NLL), the eta-capped
    # NLL of step.lambda_pred on the user's real replies to its visible messages
    reply_nll: bool = False
    warmup: WarmupSettings = WarmupSettings()  # a from-scratch model's (model.path "")
    # keep each conversation's KV cache between phases and rounds (prefill only new tokens);
    # False re-prefills every phase's whole context (same transcripts under greedy decoding)
    reuse_cache: bool = True
    # pad every sampler call to at least this many rows and cache slots (0: bucketed): a tiny
    # model's calls cost less than compiling each new (rows, slots) shape
    sampler_min_rows: int = 0
    sampler_min_slots: int = 0


    def validate(self, config) -> None:
        """Raises `jaxtom.config.ConfigError` naming the first wrong `ctom.` field."""
        from jaxtom.config import ConfigError
        if self.domain not in ("math", "coding", "writing", "packing"):
            raise ConfigError("ctom.domain", "'math', 'coding', 'writing' or 'packing'",
                              self.domain)
        if self.simulator not in ("scripted", "http", "llm"):
            raise ConfigError("ctom.simulator", "'scripted', 'http' or 'llm'", self.simulator)
        if self.disclosure not in ("mismatch", "which"):
            raise ConfigError("ctom.disclosure", "'mismatch' or 'which'", self.disclosure)
        if self.reply_nll and self.controller.get("mode", "ctom") != "direct":
            raise ConfigError("ctom.reply_nll", "false unless ctom.controller.mode=direct "
                              "(CToM's NLL trains its predictions)", self.reply_nll)
        if not (isinstance(self.warmup.reply_rows, int) and self.warmup.reply_rows >= 0):
            raise ConfigError("ctom.warmup.reply_rows", "an int >= 0", self.warmup.reply_rows)
        for name in ("num_tasks", "pred_rows", "eval_tasks"):
            if getattr(self, name) < 0:
                raise ConfigError(f"ctom.{name}", "an int >= 0", getattr(self, name))
        if self.pred_row_len < 1 or self.eval_conversations < 1:
            raise ConfigError("ctom.pred_row_len", "positive ctom.pred_row_len and "
                              "ctom.eval_conversations", (self.pred_row_len,
                                                          self.eval_conversations))
        fields = {f.name for f in dataclasses.fields(ControllerConfig)} - {"domain"}
        unknown = set(self.controller) - fields
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(f"ctom.controller.{name}", f"a ControllerConfig field: "
                              f"{sorted(fields)}", name)
        try:
            ControllerConfig.for_domain(self.domain, **self.controller)
        except (TypeError, ValueError) as err:
            raise ConfigError("ctom.controller", "valid controller settings", str(err)) from None
        if config.trainer.group_size < 2:
            raise ConfigError("trainer.group_size", "an int >= 2", config.trainer.group_size)
        # the conversation rollout packs its own rows and samples through the controller
        if config.trainer.share_prompts:
            raise ConfigError("trainer.share_prompts", "false for a CToM config (its "
                              "conversations pack their own rows)", True)
        if config.trainer.compact_rows:
            raise ConfigError("trainer.compact_rows", "false for a CToM config (the "
                              "controller resumes each conversation from its kept cache)", True)
        if config.trainer.explore_temperature:
            raise ConfigError("trainer.explore_temperature", "0 for a CToM config (the "
                              "controller's sampler has no exploration point)",
                              config.trainer.explore_temperature)


def load_ctom_config(path: str | Path, overrides: Sequence[str] = ()):
    """(Config, its CToMSettings) from a configs/ctom_*.py file; `ctom.field=value` and
    `ctom.controller.field=value` overrides set the CToM section (e.g.
    `ctom.controller.mode=direct` for Prompting Base / Naive GRPO, `ctom.controller.w_effort=0`
    for CToM w/o effort)."""
    from jaxtom.config import ConfigError, load_config
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
        from jaxtom.ctom.simulators_llm import LLMSimulator
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
    from jaxtom.config import resolve_model_path
    from jaxtom.models import from_pretrained
    from jaxtom.tokenizer import Tokenizer
    from jaxtom import storage
    path = storage.path(resolve_model_path(str(path)))  # local or gs://
    if path.suffix != ".gguf" and not (path / "tokenizer.json").exists():
        from jaxtom.errors import BadInputError
        raise BadInputError(f"{what}={path} must be a .gguf file or an HF dir with "
                            "tokenizer.json: CToM needs a real tokenizer and chat template")
    model = from_pretrained(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)
    tok = Tokenizer.from_gguf(path) if path.suffix == ".gguf" else Tokenizer.from_file(path)
    return model, tok


def load_model_and_tokenizer(config, mesh=None):
    """The policy and its tokenizer; read straight into its shards on `mesh` when given."""
    from jaxtom.models import add_lora
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
    those of one process. `padded_rows(rows)` (the learner's row count for the processes;
    `CToMTrainer` sets it) pads at the end, so that `Learner.put_batch` adds no padding
    between the processes' blocks (`lockstep.process_rows`).
    """

    def __init__(self, tok, settings: CToMSettings, cfg: TrainerConfig, simulator=None,
                 padded_rows: Callable[[int], int] | None = None, mesh=None):
        self.tok, self.settings, self.cfg = tok, settings, cfg
        # an in-process LLM simulator is read into the run's mesh: on several processes it is
        # a collective that every process calls alike (see lockstep.shared_simulator)
        self.simulator = simulator or make_simulator(settings, mesh=mesh)
        self.controller = ControllerConfig.for_domain(settings.domain, **settings.controller)
        self.padded_rows = padded_rows

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


class CToMTrainer(Trainer):
    """The one trainer with CToM's conversation rollout."""

    def __init__(self, model, tok, tasks, step_cfg, cfg, settings: CToMSettings, *,
                 simulator=None, mesh=None):
        rollout = ConversationRollout(tok, settings, cfg, simulator, mesh=mesh)
        super().__init__(model, task_records(tok, tasks), rollout, step_cfg, cfg, mesh=mesh,
                         desc="ctom")
        nproc = jax.process_count()
        rollout.padded_rows = lambda rows: self.learner.row_split(rows, multiple_of=nproc)[0]
        self.tok, self.settings = tok, settings


def packing_tasks(settings: CToMSettings, seed: int):
    """(training, held-out) packing tasks of a run: generated from its seed."""
    from jaxtom.ctom.packing import make_tasks
    return make_tasks(seed, settings.num_tasks or 256, settings.eval_tasks or 64)


def training_tasks(settings: CToMSettings, seed: int = 0):
    if settings.domain == "packing":
        return packing_tasks(settings, seed)[0]
    tasks = load_tasks(settings.domain,
                       None if settings.tasks == "builtin" else settings.tasks)
    return tasks[:settings.num_tasks] if settings.num_tasks else tasks


def evaluation_tasks(settings: CToMSettings, seed: int = 0):
    """What `jaxtom eval` scores: packing's held-out tasks; else the first `eval_tasks`
    (or `num_tasks`) of the task set."""
    if settings.domain == "packing":
        return packing_tasks(settings, seed)[1]
    tasks = load_tasks(settings.domain, None if settings.tasks == "builtin" else settings.tasks)
    return tasks[:settings.eval_tasks or settings.num_tasks or len(tasks)]


def policy_and_tokenizer(config, mesh=None):
    """The policy a run starts from: a checkpoint (`model.path`), or a tiny decoder trained
    from scratch after its format warm-up (`jaxtom.ctom.tiny`, `model.path` "")."""
    if not config.model.path:
        from jaxtom.ctom.tiny import model_and_tokenizer
        return model_and_tokenizer(config, mesh)
    return load_model_and_tokenizer(config, mesh)


def train(config, mesh=None):
    """Trains a CToM config (`jaxtom train`); returns the final TrainState."""
    model, tok = policy_and_tokenizer(config, mesh)
    trainer = CToMTrainer(model, tok, training_tasks(config.ctom, config.trainer.seed),
                          config.step, config.trainer, config.ctom, mesh=mesh)
    del model  # the trainer lets the loaded model go once its (sharded) state is built
    return trainer.run()


def train_from_config(path: str | Path, overrides: Sequence[str] = ()):
    """Loads a CToM config file and trains it; returns the final TrainState."""
    config, _ = load_ctom_config(path, overrides)
    return train(config)
