"""CToM training on the shared GRPO trainer: the rollout is the controller's multi-phase,
multi-round conversation instead of one completion, and the batch carries the prediction
sub-batch (real + counterfactual replies) for the eta-capped NLL of the update step.

A CToM config file defines `get_config() -> jaxtom.config.Config` (model, step, trainer,
mesh) and `ctom_settings() -> CToMSettings` (domain, tasks, simulator, controller caps).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Sequence

import jax
import numpy as np

from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.data import load_tasks
from jaxtom.ctom.policies import SamplerPolicy
from jaxtom.ctom.simulators import HTTPSimulator, ScriptedSimulator
from jaxtom.ctom.targets import prediction_targets, rollout_batch
from jaxtom.rl.trainer import Trainer


@dataclasses.dataclass(frozen=True)
class CToMSettings:
    domain: str = "math"
    tasks: str = "builtin"  # or a path in the paper's format for the domain
    num_tasks: int = 0  # 0: all
    simulator: str = "scripted"  # scripted | http | llm
    simulator_url: str = ""  # http: the OpenAI-compatible /v1 base URL
    simulator_model: str = ""  # http: served model name; llm: a .gguf file or HF model dir
    simulator_temperature: float = 0.7  # table 4
    simulator_max_tokens: int = 512
    simulator_dtype: str = "float32"  # llm: dtype of the loaded simulator model
    controller: dict = dataclasses.field(default_factory=dict)  # ControllerConfig overrides
    pred_rows: int = 16
    pred_row_len: int = 2048
    eval_tasks: int = 0  # 0: the training tasks
    eval_conversations: int = 2  # per task


def load_ctom_config(path: str | Path, overrides: Sequence[str] = ()):
    """(Config, CToMSettings) from a configs/ctom_*.py file.

    Overrides starting with `ctom.` set CToMSettings fields (`ctom.simulator=llm`) or
    controller fields (`ctom.controller.mode=direct`, `ctom.controller.w_effort=0`); the rest
    are the usual `section.field=value` overrides of the Config.
    """
    from jaxtom.config import load_config
    ours = [o for o in overrides if o.strip().startswith("ctom.")]
    config = load_config(path, [o for o in overrides if o not in ours])
    spec = importlib.util.spec_from_file_location(f"ctom_cfg_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "ctom_settings"):
        raise ValueError(f"{path} defines no ctom_settings() -> CToMSettings; not a CToM config")
    return config, apply_settings_overrides(module.ctom_settings(), ours)


def _coerce_setting(key: str, raw: str, hint) -> object:
    from jaxtom.config import ConfigError
    kinds = {"str": str, "int": int, "float": float, "bool": bool}
    name = hint if isinstance(hint, str) else getattr(hint, "__name__", str(hint))
    if name not in kinds:
        raise ConfigError(key, "a str, int, float or bool field", raw)
    if name == "bool":
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ConfigError(key, "true or false", raw)
        return raw.lower() in ("true", "1")
    try:
        return kinds[name](raw)
    except ValueError:
        raise ConfigError(key, f"a {name}", raw) from None


def apply_settings_overrides(s: CToMSettings, overrides: Sequence[str]) -> CToMSettings:
    """Applies `ctom.field=value` / `ctom.controller.field=value`; unknown names are errors.

    This is the switch for baselines and ablations: `ctom.controller.mode=direct` runs
    Prompting Base (eval) / Naive GRPO (train), `ctom.controller.w_effort=0` CToM w/o effort.
    """
    from jaxtom.config import ConfigError
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "an override of the form ctom.field=value", item)
        key, raw = (x.strip() for x in item.split("=", 1))
        parts = key.split(".")[1:]
        if len(parts) == 2 and parts[0] == "controller":
            hints = {f.name: f.type for f in dataclasses.fields(ControllerConfig)}
            if parts[1] not in hints or parts[1] == "domain":
                raise ConfigError(key, f"a ControllerConfig field: "
                                  f"{sorted(set(hints) - {'domain'})}", parts[1])
            value = _coerce_setting(key, raw, hints[parts[1]])
            s = dataclasses.replace(s, controller={**s.controller, parts[1]: value})
            continue
        hints = {f.name: f.type for f in dataclasses.fields(CToMSettings)}
        if len(parts) != 1 or parts[0] not in hints or parts[0] == "controller":
            raise ConfigError(key, "ctom.<CToMSettings field> or ctom.controller.<field>; "
                              f"fields: {sorted(set(hints) - {'controller'})}", key)
        s = dataclasses.replace(s, **{parts[0]: _coerce_setting(key, raw, hints[parts[0]])})
    ControllerConfig.for_domain(s.domain, **s.controller)  # fail now on a bad mode or field
    return s


def make_simulator(s: CToMSettings, model=None, tokenizer=None):
    """The configured user simulator; `llm` uses (model, tokenizer) when given, else loads
    `simulator_model` (a separate frozen model: the policy's weights change during training)."""
    if s.simulator == "scripted":
        return ScriptedSimulator()
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
                                                         "simulator_model")
        if tokenizer is None:
            raise ValueError("make_simulator(model=...) for simulator='llm' needs tokenizer=")
        return LLMSimulator(model, tokenizer, temperature=s.simulator_temperature,
                            max_tokens=s.simulator_max_tokens)
    raise ValueError(f"simulator must be 'scripted', 'http' or 'llm', got {s.simulator!r}")


def _load_model_and_tokenizer(path: str | Path, dtype: str, what: str = "model.path"):
    from jaxtom.models import from_pretrained
    from jaxtom.tokenizer import Tokenizer
    path = Path(path)
    if path.suffix != ".gguf" and not (path / "tokenizer.json").exists():
        raise ValueError(f"{what}={path} must be a .gguf file or an HF dir with "
                         "tokenizer.json: CToM needs a real tokenizer and chat template")
    model = from_pretrained(path, dtype=dtype)
    tok = Tokenizer.from_gguf(path) if path.suffix == ".gguf" else Tokenizer.from_file(path)
    return model, tok


def load_model_and_tokenizer(config):
    from jaxtom.models import add_lora
    model, tok = _load_model_and_tokenizer(config.model.path, config.model.dtype)
    if config.model.lora_rank:
        add_lora(model, rank=config.model.lora_rank,
                 alpha=config.model.lora_alpha or config.model.lora_rank)
    return model, tok


class CToMTrainer(Trainer):
    """The shared trainer with CToM's rollout and batch (checkpoints, logging unchanged)."""

    def __init__(self, model, tok, tasks, step_cfg, cfg, settings: CToMSettings, *,
                 simulator=None, mesh=None):
        records = [{"prompt": tok.encode(t.prompt), "task": t} for t in tasks]
        super().__init__(model, records, reward_fn=None, step_cfg=step_cfg, cfg=cfg, mesh=mesh)
        self.tok, self.settings = tok, settings
        self.simulator = simulator or make_simulator(settings)
        self.controller = ControllerConfig.for_domain(settings.domain, **settings.controller)
        self.pad_id = cfg.pad_id

    def train_step(self, state, tasks, step):
        cfg, s = self.cfg, self.settings
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), step)
        group = [r["task"] for r in tasks for _ in range(cfg.group_size)]
        groups = [i // cfg.group_size for i in range(len(group))]
        policy = SamplerPolicy(self.learner.model(state), self.tok, temperature=cfg.temperature,
                               top_p=cfg.top_p)
        convs = run_conversations(group, policy, self.simulator, self.tok, self.controller,
                                  key=key, seed=step)
        targets = prediction_targets(convs, self.simulator, seed=step)
        ok = [c for c in convs if c.failed is None]
        out = {"conversations_failed": float(len(convs) - len(ok)),
               "prediction_targets": float(len(targets)),
               "counterfactual_targets": float(sum(t.counterfactual for t in targets))}
        if not ok:
            return state, out  # nothing to learn from; the run goes on
        num_rows = cfg.num_rows or sum(len(c.sequences) for c in ok)
        batch = rollout_batch(convs, groups, targets, self.tok, num_rows=num_rows,
                              row_len=cfg.row_len, pred_rows=s.pred_rows,
                              pred_row_len=s.pred_row_len, pad_id=self.pad_id)
        state, metrics = self.learner.step(state, self.learner.put_batch(batch))
        out.update({k: float(v) for k, v in jax.device_get(metrics).items()})
        out.update(reward_mean=float(np.mean([c.reward for c in ok])),
                   reward_std=float(np.std([c.reward for c in ok])),
                   score_mean=float(np.mean([c.score for c in ok])),
                   effort_mean=float(np.mean([c.effort for c in ok])),
                   visible_rounds=float(np.mean([len(c.rounds) for c in ok])))
        return state, out


def generic_trainer_unsupported(config):
    """`task.name` of CToM configs: the single-completion trainer cannot run CToM."""
    raise ValueError("task.name: a CToM config needs the multi-phase CToM trainer; run it with "
                     "jaxtom.ctom.train.train_from_config(CONFIG, overrides) (the `jaxtom train` "
                     "command dispatches configs that define ctom_settings() there)")


def train_from_config(path: str | Path, overrides: Sequence[str] = ()):
    """`jaxtom train` for a CToM config: returns the final TrainState."""
    config, settings = load_ctom_config(path, overrides)
    model, tok = load_model_and_tokenizer(config)
    tasks = load_tasks(settings.domain, None if settings.tasks == "builtin" else settings.tasks)
    if settings.num_tasks:
        tasks = tasks[:settings.num_tasks]
    trainer = CToMTrainer(model, tok, tasks, config.step, config.trainer, settings)
    return trainer.run()
