"""Typed experiment configs: `configs/*.py` files, dotted `key=value` overrides, validation.

A config file defines `get_config() -> Config`. Overrides are parsed as Python literals and
checked against the field's declared type, then every section's ranges are checked, so a bad
config fails with one line naming the field and the expected form before anything is written.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import typing
from pathlib import Path
from typing import Any

from jaxtom.rl.step import REFERENCES, StepConfig
from jaxtom.rl.trainer import TrainerConfig


class ConfigError(ValueError):
    """A config value is wrong: `field` names it, `expected` says what would be right."""

    def __init__(self, field: str, expected: str, got: Any):
        self.field, self.expected, self.got = field, expected, got
        super().__init__(f"config error: {field}: expected {expected}, got {got!r}")


@dataclasses.dataclass(frozen=True)
class ModelSection:
    path: str = ""  # HF directory or .gguf file; "" builds a random model from the sizes below
    family: str = "qwen3"
    vocab_size: int = 32
    hidden_size: int = 32
    intermediate_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 8
    seed: int = 0
    dtype: str = "float32"
    lora_rank: int = 0  # > 0: add adapters and train only them
    lora_alpha: float = 0.0  # 0: alpha = rank


@dataclasses.dataclass(frozen=True)
class TaskSection:
    name: str = "toy_token"  # built-in task, or "package.module:factory" -> (tasks, reward_fn)
    num_prompts: int = 64
    prompt_len: int = 4
    target_token: int = 3


@dataclasses.dataclass(frozen=True)
class MeshSection:
    data: int = 1  # one of data/fsdp/tensor may be -1: all remaining devices
    fsdp: int = 1
    tensor: int = 1


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelSection = ModelSection()
    task: TaskSection = TaskSection()
    step: StepConfig = StepConfig()
    trainer: TrainerConfig = TrainerConfig()
    mesh: MeshSection = MeshSection()


def _describe(tp) -> str:
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an int"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if typing.get_origin(tp) is tuple:
        return "a tuple of ints like (1, 2)"
    return str(tp)


def _coerce(field: str, raw: Any, tp) -> Any:
    value = raw
    if isinstance(raw, str) and tp is not str:
        text = {"true": "True", "false": "False"}.get(raw.lower(), raw)
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ConfigError(field, _describe(tp), raw) from None
    ok = {bool: lambda v: isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str)}.get(tp)
    if ok is not None:
        if not ok(value):
            raise ConfigError(field, _describe(tp), raw)
        return float(value) if tp is float else value
    if typing.get_origin(tp) is tuple:
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value,)
        if not isinstance(value, (tuple, list)) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(field, _describe(tp), raw)
        return tuple(value)
    return value


def apply_overrides(config: Config, overrides: list[str]) -> Config:
    """Applies `section.field=value` strings; unknown names and bad types are ConfigErrors."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "an override of the form section.field=value", item)
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) != 2:
            raise ConfigError(key, "section.field with a section among "
                              f"{[f.name for f in dataclasses.fields(Config)]}", key)
        section_name, name = parts
        section = getattr(config, section_name, None)
        if section is None or not dataclasses.is_dataclass(section):
            raise ConfigError(key, f"a section among {[f.name for f in dataclasses.fields(Config)]}",
                              section_name)
        hints = typing.get_type_hints(type(section))
        if name not in hints:
            raise ConfigError(key, f"a field of {section_name}: {sorted(hints)}", name)
        value = _coerce(key, raw, hints[name])
        config = dataclasses.replace(config, **{section_name: dataclasses.replace(
            section, **{name: value})})
    return config


def _check(ok: bool, field: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(field, expected, got)


def validate(config: Config) -> Config:
    """Checks types and ranges of every field; returns the config unchanged."""
    for section_field in dataclasses.fields(Config):
        section = getattr(config, section_field.name)
        for name, tp in typing.get_type_hints(type(section)).items():
            _coerce(f"{section_field.name}.{name}", getattr(section, name), tp)
    m, s, t, k, mesh = config.model, config.step, config.trainer, config.task, config.mesh
    _check(m.family in ("qwen3", "llama"), "model.family", "'qwen3' or 'llama'", m.family)
    _check(m.dtype in ("float32", "bfloat16"), "model.dtype", "'float32' or 'bfloat16'", m.dtype)
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim"):
        _check(getattr(m, name) > 0, f"model.{name}", "a positive int", getattr(m, name))
    _check(m.num_heads % m.num_kv_heads == 0, "model.num_heads",
           f"a multiple of model.num_kv_heads ({m.num_kv_heads})", m.num_heads)
    _check(m.lora_rank >= 0, "model.lora_rank", "an int >= 0 (0 = full fine-tuning)",
           m.lora_rank)
    _check(not m.path or Path(m.path).exists(), "model.path",
           "an existing HF directory or .gguf file (or \"\" for a random model)", m.path)
    _check(0 <= s.clip_low < 1, "step.clip_low", "a number in [0, 1)", s.clip_low)
    _check(s.clip_high >= 0, "step.clip_high", "a number >= 0", s.clip_high)
    _check(s.dual_clip > 1, "step.dual_clip", "a number > 1", s.dual_clip)
    for name in ("kl_coef", "lambda_pred", "lambda_entropy", "weight_decay", "end_lr_ratio"):
        _check(getattr(s, name) >= 0, f"step.{name}", "a number >= 0", getattr(s, name))
    _check(s.learning_rate > 0, "step.learning_rate", "a positive number", s.learning_rate)
    _check(s.max_grad_norm > 0, "step.max_grad_norm", "a positive number", s.max_grad_norm)
    _check(s.micro_batches >= 1, "step.micro_batches", "a positive int", s.micro_batches)
    _check(s.warmup_steps >= 0, "step.warmup_steps", "an int >= 0", s.warmup_steps)
    _check(s.reference in REFERENCES + ("auto",), "step.reference",
           f"one of {REFERENCES + ('auto',)}", s.reference)
    _check(s.lora == (m.lora_rank > 0), "step.lora",
           f"{m.lora_rank > 0} (it must agree with model.lora_rank={m.lora_rank})", s.lora)
    _check(t.group_size >= 2, "trainer.group_size", "an int >= 2", t.group_size)
    for name in ("total_steps", "prompts_per_step", "max_new_tokens", "row_len",
                 "checkpoint_every", "keep_checkpoints", "log_every"):
        _check(getattr(t, name) >= 1, f"trainer.{name}", "a positive int", getattr(t, name))
    _check(t.num_rows >= 0, "trainer.num_rows", "an int >= 0 (0 = one sequence per row)",
           t.num_rows)
    _check(0 < t.top_p <= 1, "trainer.top_p", "a number in (0, 1]", t.top_p)
    _check(t.temperature >= 0, "trainer.temperature", "a number >= 0", t.temperature)
    _check(bool(t.workdir), "trainer.workdir", "a non-empty directory path", t.workdir)
    _check(k.name == "toy_token" or ":" in k.name, "task.name",
           "'toy_token' or 'package.module:factory'", k.name)
    _check(k.prompt_len + t.max_new_tokens <= t.row_len, "trainer.row_len",
           f">= task.prompt_len + trainer.max_new_tokens ({k.prompt_len + t.max_new_tokens})",
           t.row_len)
    _check(0 <= k.target_token < m.vocab_size, "task.target_token",
           f"a token id in [0, model.vocab_size={m.vocab_size})", k.target_token)
    sizes = (mesh.data, mesh.fsdp, mesh.tensor)
    _check(all(v >= 1 or v == -1 for v in sizes) and sizes.count(-1) <= 1, "mesh",
           "positive sizes (data, fsdp, tensor) with at most one -1", sizes)
    return config


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Imports `path`, calls its `get_config()`, applies overrides and validates."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("CONFIG", "a path to a configs/*.py file", str(path))
    spec = importlib.util.spec_from_file_location(f"jaxtom_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError(str(path), "a module defining get_config() -> jaxtom.config.Config",
                          "no get_config")
    config = module.get_config()
    if not isinstance(config, Config):
        raise ConfigError(f"{path}:get_config()", "a jaxtom.config.Config",
                          type(config).__name__)
    return validate(apply_overrides(config, list(overrides)))
