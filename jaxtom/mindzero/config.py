"""MindZero's section of a `jaxtom.config.Config`: data, warm-up, reward, evaluation.

Everything the shared sections already say lives there: the policy in `model` (path "" is
the CPU default's tiny decoder over a BPE trained on generated text; its `vocab_size` is the
BPE's), SSRL's optimiser in `step` (`lambda_entropy` is the decision-token entropy bonus),
its loop in `trainer` (`prompts_per_step` is the rollout batch, `group_size` the samples per
prompt, `eval_every` the held-out monitor, `workdir` the run directory, `seed` the run's
seed: episodes, tokenizer data and initialisation all derive from it). Override any field
by its dotted path, e.g. `mindzero.reward.entropy_weight=0.0`.
"""

from __future__ import annotations

import dataclasses

from jaxtom.config import ConfigError
from jaxtom.mindzero.reward import RewardConfig

TEACHERS = ("random", "approached", "listed", "lead", "pictured")  # mindzero.data
ORDERS = ("drawn", "descending", "either")  # warmup.order; warmup.evidence_order: "none" or these


IMAGE_OBSERVATIONS = ("image", "image_short")
IMAGE_STYLES = ("figure", "cells", "cells_ranked")  # data.image_style (observation)


def is_image(observation: str) -> bool:
    """Whether `observation` shows a picture (a Qwen3-VL policy reads it,
    `jaxtom.mindzero.observation`)."""
    return observation in IMAGE_OBSERVATIONS


@dataclasses.dataclass(frozen=True)
class DataSpec:
    max_steps: int = 50  # episode horizon (assistance data: 50)
    train_episodes: int = 1000
    eval_episodes: int = 20
    split: str = "labels"  # labels: held-out labels + layouts (paper); episodes: new episodes
    label_set: str = "all"  # all: random labels per episode; figure7: always the 8 colored
    # squares of Figure 7 (same words every episode), for models trained from scratch
    observation: str = "figure"  # figure | compact | compact_closing | compact_ranked | image
    # (Figure 7 + the rendered grid: a Qwen3-VL policy, jaxtom.mindzero.vl_train) |
    # image_short (the grid and one line: for a VL model from scratch; goals task only)
    image_cell_size: int = 50  # px per grid cell of the image observation (paper: 50)
    # how the picture is drawn (`gridworld.render_rgb`): "figure", the paper's; "cells", flat
    # cells a vision tower trained from scratch can read; "cells_ranked", the cells with the
    # partner the path has ranked ahead outlined (the picture's compact_ranked; CPU default)
    image_style: str = "figure"
    num_particles: int = 2
    stride: int = 1  # every stride-th timestep of an episode
    task: str = "goals"  # goals: goal particles (assistance); qa: binary-choice questions
    # (section 5.1; jaxtom.mindzero.qa), where train/eval_episodes count QA episodes (3 each)
    qa_mirror: bool = False  # QA SSRL also asks each question with its options swapped
    # > 0: this many validation episodes (fresh layouts, apart from train and eval): the
    # held-out monitor and the warm-up checks read them instead of the eval episodes, and
    # SSRL keeps the model of its best monitor log score (the warm-up's included) rather than
    # its last (`jaxtom.mindzero.monitor.BestModel`) when `keep` is "best"; 0: the monitor
    # reads the eval episodes, for logging only, and the last step is kept
    val_episodes: int = 0
    # "best" | "last": with validation episodes, whether SSRL keeps its best-monitor model or
    # its last (the validation episodes then serve the monitor and the warm-up checks only)
    keep: str = "best"


@dataclasses.dataclass(frozen=True)
class WarmupSpec:
    steps: int = 0  # 0: no format warm-up
    batch_size: int = 32
    learning_rate: float = 3e-3
    teacher: str = "random"  # random | approached | listed | lead | pictured (mindzero.data)
    # The checks below act on every task whose warm-up is checked (goals, image goals,
    # household: `warmup.checked_warm_up`); QA refuses them, the household refuses min_lead.
    # After the warm-up, the held-out monitor's greedy completions must number at least this
    # many distinct strings (0: no check): fewer means the model ignores its observation, and
    # SSRL from there only moves a constant (seen on other CPUs), so the run stops instead.
    min_distinct: int = 0
    # ... and at least this share of them must name the observation's lead (the object the
    # compact observation lists first, what the `approached` and `listed` teachers always write
    # as object1) in their first hypothesis (0: no check): below it the model writes the
    # format without copying from its observation.
    min_lead: float = 0.0
    # A warm-up that fails those checks is run again from a fresh initialisation (init seed
    # + k on the k-th retry) at most this many times before the run stops: whether a
    # from-scratch model learns to copy in a fixed number of steps varies over
    # initialisations.
    retries: int = 0
    # > 0: the same checks also run at this warm-up step, and an attempt that fails them
    # stops there (recorded in its directory, so a rerun skips it) instead of training on
    # to `steps`: an initialisation that will not copy shows it early
    check_at: int = 0
    # How the teacher arranges its random probabilities (`jaxtom.mindzero.data.warmup_target`;
    # label-free either way): "drawn" as drawn, "descending" largest first (the first
    # hypothesis is the top one by convention), "either" largest or smallest first at random,
    # so the warm-up writes sorted answers and SSRL has to learn which way round pays.
    order: str = "drawn"
    # The same values ("none": no rule) where the observation ranks the first listed partner
    # ahead of the second on evidence (`observation.partner_ranks`: the lead carried and the
    # path separating them), overriding `order` there, so the answer's shape depends on that
    # token: "descending" (the warm-up then already answers the evidence) or "either" (it
    # depends on the token but not which way: SSRL has to learn the direction).
    evidence_order: str = "none"
    # > 0: the first this many warm-up steps teach only an answer's opening naming the
    # observation's lead object (label-free, as the teachers' object1; `warmup.lead_opening`)
    # before the teacher's answers: a from-scratch vision tower learns to read the lead off
    # the picture from that short target, where the full answer's unpredictable tokens
    # drown it (goal tasks only)
    read_steps: int = 0
    # After the reading phase, this share of each warm-up batch's rows keeps the reading
    # target (the opening naming the lead, without an end token, so it teaches no early
    # stop): a reading loss beside the answers, whose unreadable tokens (partners, random
    # probabilities) otherwise wash the reading out
    read_share: float = 0.0


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    episodes: int = 20
    seeds: tuple[int, ...] = (10, 20, 30)
    random_prob: float = 0.15
    teleport_after: int = 3  # the helper's teleport rule (gridworld.helper), on as in the
    # public code's evaluation; 0 turns it off
    stride: int = 1
    assistance: bool = True
    assist_episodes: int = 0  # 0: all evaluated episodes; else the first this many (costly)
    qa_episodes: int = 0  # 0: skip QA
    temperature: float = 0.0  # 0: greedy queries; > 0: one sampled completion per query
    score_mix: float = 0.01  # log score/KL use (1 - mix) q + mix * uniform (particles are sparse)


@dataclasses.dataclass(frozen=True)
class MindZeroSection:
    data: DataSpec = DataSpec()
    warmup: WarmupSpec = WarmupSpec()
    reward: RewardConfig = RewardConfig()
    eval: EvalSpec = EvalSpec()

    def validate(self, config) -> None:
        """Raises `jaxtom.config.ConfigError` naming the first inconsistent field."""
        d, w, r = self.data, self.warmup, self.reward

        def check(ok, field, expected, got):
            if not ok:
                raise ConfigError(f"mindzero.{field}", expected, got)

        check(d.observation in ("figure", "compact", "compact_closing", "compact_ranked",
                                *IMAGE_OBSERVATIONS), "data.observation",
              "'figure', 'compact', 'compact_closing', 'compact_ranked', 'image' or "
              "'image_short'", d.observation)
        check(d.image_cell_size >= 1, "data.image_cell_size", "a positive int",
              d.image_cell_size)
        check(d.image_style in IMAGE_STYLES, "data.image_style",
              "'figure', 'cells' or 'cells_ranked'", d.image_style)
        check(d.image_style == "figure" or is_image(d.observation), "data.image_style",
              "'figure' unless data.observation is 'image' or 'image_short' (a text "
              "observation draws no picture)",
              d.image_style)
        check(d.split in ("labels", "episodes"), "data.split", "'labels' or 'episodes'", d.split)
        check(d.label_set in ("all", "figure7"), "data.label_set", "'all' or 'figure7'",
              d.label_set)
        check(not (d.label_set == "figure7" and d.split == "labels"), "data.label_set",
              "'all' with data.split='labels' (figure7 fixes the labels, so it needs "
              "data.split='episodes')", d.label_set)
        check(d.num_particles >= 1, "data.num_particles", "an int >= 1", d.num_particles)
        for name in ("max_steps", "train_episodes", "eval_episodes", "stride"):
            check(getattr(d, name) >= 1, f"data.{name}", "a positive int", getattr(d, name))
        check(d.val_episodes >= 0, "data.val_episodes", "an int >= 0 (0: none)",
              d.val_episodes)
        check(not d.val_episodes or not is_image(d.observation),
              "data.val_episodes", "0 for an image observation (validation episodes exist "
              "for goal tasks over text)", d.val_episodes)
        check(d.keep in ("best", "last"), "data.keep", "'best' or 'last'", d.keep)
        check(not d.val_episodes or config.trainer.eval_every > 0, "data.val_episodes",
              "0 with trainer.eval_every=0 (the kept model is chosen at the monitor's steps)",
              d.val_episodes)
        check(w.steps >= 0, "warmup.steps", "an int >= 0 (0: no warm-up)", w.steps)
        check(w.batch_size >= 1, "warmup.batch_size", "a positive int", w.batch_size)
        check(w.min_distinct >= 0, "warmup.min_distinct", "an int >= 0 (0: no check)",
              w.min_distinct)
        check(0.0 <= w.min_lead <= 1.0, "warmup.min_lead", "a share in [0, 1] (0: no check)",
              w.min_lead)
        check(w.retries >= 0, "warmup.retries", "an int >= 0", w.retries)
        check(isinstance(w.check_at, int) and w.check_at >= 0, "warmup.check_at",
              "an int >= 0 (0: off; at or past warmup.steps only the final check runs)",
              w.check_at)
        check(w.learning_rate > 0, "warmup.learning_rate", "a positive number",
              w.learning_rate)
        check(isinstance(w.read_steps, int) and 0 <= w.read_steps < max(w.steps, 1),
              "warmup.read_steps", "an int >= 0 below warmup.steps", w.read_steps)
        check(0.0 <= w.read_share < 1.0, "warmup.read_share", "a share in [0, 1)",
              w.read_share)
        check(not (w.read_share and not w.read_steps), "warmup.read_share",
              "0 without a reading phase (warmup.read_steps)", w.read_share)
        check(not (w.read_steps and 0 < w.check_at <= w.read_steps), "warmup.check_at",
              "0 or past warmup.read_steps (the check reads answers, not names)", w.check_at)
        if is_image(d.observation) and config.trainer.share_prompts:
            # image rollouts pack their own rows (each with its picture): no shared prompts
            raise ConfigError("trainer.share_prompts", "false with mindzero.data.observation="
                              "'image' (shared-prompt packing of per-row images is not built)",
                              True)
        check(w.order in ORDERS, "warmup.order", " or ".join(map(repr, ORDERS)), w.order)
        check(w.evidence_order in ("none",) + ORDERS[1:], "warmup.evidence_order",
              " or ".join(map(repr, ("none",) + ORDERS[1:])), w.evidence_order)
        check(w.teacher in TEACHERS, "warmup.teacher", " or ".join(map(repr, TEACHERS)),
              w.teacher)
        check(r.duplicates in ("reject", "merge"), "reward.duplicates", "'reject' or 'merge'",
              r.duplicates)
        check(r.likelihood_floor == RewardConfig.likelihood_floor, "reward.likelihood_floor",
              f"{RewardConfig.likelihood_floor!r} for a gridworld task (the household's floor "
              "of likelihood x prior; the gridworld ELBO floors q at reward.q_floor)",
              r.likelihood_floor)
        e = self.eval
        check(e.episodes >= 1 and e.stride >= 1, "eval.episodes",
              "positive eval.episodes and eval.stride", (e.episodes, e.stride))
        check(0 <= e.score_mix < 1, "eval.score_mix", "a number in [0, 1)", e.score_mix)
        check(e.teleport_after >= 0, "eval.teleport_after", "an int >= 0 (0: off)",
              e.teleport_after)
        check(config.step.micro_batches >= 1, "step.micro_batches", "a positive int",
              config.step.micro_batches)
