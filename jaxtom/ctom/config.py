"""A CToM config's `ctom` section: the domain, its tasks, the simulated user, the controller's
settings and a from-scratch model's format warm-up. Override by dotted path, e.g.
`ctom.simulator=llm`, `ctom.controller.mode=direct`."""

from __future__ import annotations

import dataclasses

from jaxtom.config import ConfigError
from jaxtom.ctom.controller import ControllerConfig


@dataclasses.dataclass(frozen=True)
class ControllerSettings:
    """The controller's settings a config changes (`ctom.controller.mode=direct`); every
    field left None keeps the domain's Table 4 value (`ControllerConfig.for_domain`)."""
    mode: str = "ctom"  # ctom | direct (Prompting Base / Naive GRPO)
    max_rounds: int | None = None
    max_revisions: int | None = None
    plan_cap: int | None = None
    decision_cap: int | None = None
    ask_cap: int | None = None
    draft_cap: int | None = None
    prediction_cap: int | None = None
    revision_cap: int | None = None
    response_cap: int | None = None
    w_effort: float | None = None
    categorical: bool | None = None
    shared_buffer: bool | None = None

    def overrides(self) -> dict:
        """The fields set, as `ControllerConfig.for_domain` keyword arguments."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


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
    controller: ControllerSettings = ControllerSettings()
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

    def controller_config(self, **changes) -> ControllerConfig:
        """The run's controller: the domain's settings, this section's, then `changes`."""
        return ControllerConfig.for_domain(self.domain,
                                           **{**self.controller.overrides(), **changes})

    def validate(self, config) -> None:
        """Raises `jaxtom.config.ConfigError` naming the first wrong `ctom.` field."""
        if self.domain not in ("math", "coding", "writing", "packing"):
            raise ConfigError("ctom.domain", "'math', 'coding', 'writing' or 'packing'",
                              self.domain)
        if self.simulator not in ("scripted", "http", "llm"):
            raise ConfigError("ctom.simulator", "'scripted', 'http' or 'llm'", self.simulator)
        if self.disclosure not in ("mismatch", "which"):
            raise ConfigError("ctom.disclosure", "'mismatch' or 'which'", self.disclosure)
        if self.reply_nll and self.controller.mode != "direct":
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
        try:
            self.controller_config()
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
