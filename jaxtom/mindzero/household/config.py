"""The household run's config: MindZero's section plus a `household` sub-section.

A household run is a MindZero config whose `mindzero` section is a `HouseholdMindZero` (the
gridworld's `MindZeroSection` with one more field) and whose `mindzero.data.task` is
"household" (goal particles; `jaxtom train|eval|mindzero run` route it to
`jaxtom.mindzero.household.train` / `.evaluate`) or "household_qa" (questions, through the QA
driver `jaxtom.mindzero.qa_train` with `household.qa_ssrl.HouseholdQA`). The shared fields keep
their meaning: `data.train_episodes` / `data.eval_episodes` episodes on the train / test
apartments, `data.max_steps` the step budget (OWAH: 200), `data.num_particles` the n of Figure
9, `data.observation` `figure` (Figure 9's prompt) or `compact` (a short line for the tiny
model), `warmup.teacher` `approached` (the label-free observation teacher of
`jaxtom.mindzero.household.data`) or `random`, `reward.*` the ELBO's weights. Override any household
field by its dotted path, e.g. `mindzero.household.likelihood=llm`.

Table 2's ablations are switches: w/o prior `mindzero.household.prior=none` (or
`mindzero.reward.prior_weight=0.0`), single hypothesis `mindzero.data.num_particles=1`, w/o
entropy bonus `mindzero.reward.entropy_weight=0.0`.
"""

from __future__ import annotations

import dataclasses
import os

from jaxtom.config import ConfigError
from jaxtom.mindzero.config import MindZeroSection
from jaxtom.mindzero.reward import RewardConfig

LIKELIHOODS = ("symbolic", "llm")
PRIORS = ("symbolic", "llm", "none")
SCORERS = ("reference", "http")
OBSERVABILITY = ("full", "partial")
URL_ENV = "JAXTOM_REWARD_URL"  # the reward model's server when `scorer_url` is ""


@dataclasses.dataclass(frozen=True)
class HouseholdSpec:
    """Where the reward's likelihood and prior come from, and which apartments make the data."""
    likelihood: str = "symbolic"  # symbolic: the planner's exact P(actions | goal); llm
    prior: str = "symbolic"  # symbolic rules | llm plausibility | none (uniform)
    scorer: str = "reference"  # llm scores from: the policy's frozen starting model
    # (`reference`) or an OpenAI-compatible server (`http`, the paper's larger reward model)
    scorer_url: str = ""  # http: base URL ("" reads $JAXTOM_REWARD_URL)
    scorer_model: str = ""  # http: the served model's name
    scorer_mode: str = "chat_top_logprobs"  # http: the public code's top-5 first-token read
    # (chat_top_logprobs) or exact option log-probs by echo (completions)
    scorer_timeout_s: float = 60.0
    scorer_batch: int = 64  # llm: option prompts per scoring call of the local model
    train_apartments: tuple[int, ...] = (0, 1, 2, 4, 5)  # OWAH's code and data (appendix C.2)
    test_apartments: tuple[int, ...] = (3, 6)
    observability: str = "partial"  # the human's view: partial (paper section 5.4) or full
    after_first_key_action: bool = True  # training timesteps start after the first grab/put
    # warm-up and SSRL prompts: one per timestep (False) or the same number per episode (True,
    # `household.train.balanced`; on in the CPU default, off for the paper's runs, which
    # unroll every timestep)
    balance_episodes: bool = False
    monitor_rows: int = 96  # held-out queries the training monitor scores
    seed_offset: int = 0  # episodes derive from trainer.seed + this

    def url(self) -> str:
        return self.scorer_url or os.environ.get(URL_ENV, "")


@dataclasses.dataclass(frozen=True)
class HouseholdMindZero(MindZeroSection):
    household: HouseholdSpec = HouseholdSpec()

    def validate(self, config) -> None:
        d = self.data
        # the shared checks, on the fields the household shares with the gridworld (its
        # goal particles as the goal task's, its questions as the QA task's)
        # (its reward floors likelihood x prior: `likelihood_floor` is its own, `q_floor` the
        # gridworld's, refused below)
        MindZeroSection.validate(dataclasses.replace(
            self, data=dataclasses.replace(d, observation="compact", split="episodes",
                                           label_set="all"),
            reward=dataclasses.replace(self.reward, likelihood_floor=RewardConfig.likelihood_floor)
        ), config)
        h = self.household

        def check(ok, field, expected, got):
            if not ok:
                raise ConfigError(f"mindzero.{field}", expected, got)

        check(self.reward.q_floor == RewardConfig.q_floor, "reward.q_floor",
              f"{RewardConfig.q_floor!r} for a household task (the gridworld's floor of q; the "
              "household ELBO floors likelihood x prior at reward.likelihood_floor)",
              self.reward.q_floor)

        if config.trainer.explore_temperature:  # its rollout does not explore
            raise ConfigError("trainer.explore_temperature", "0 for mindzero.data.task="
                              "'household' (its sampler has no exploration point)",
                              config.trainer.explore_temperature)
        check(not self.warmup.read_steps, "warmup.read_steps",
              "0 for mindzero.data.task='household' (its observation has no lead object)",
              self.warmup.read_steps)
        check(not self.warmup.min_lead, "warmup.min_lead",
              "0 for mindzero.data.task='household' (its monitor has no observation lead "
              "to name)", self.warmup.min_lead)
        check(d.observation in ("figure", "compact"), "data.observation",
              "'figure' or 'compact' for the household", d.observation)
        check(h.likelihood in LIKELIHOODS, "household.likelihood", f"one of {LIKELIHOODS}",
              h.likelihood)
        check(h.prior in PRIORS, "household.prior", f"one of {PRIORS}", h.prior)
        check(h.scorer in SCORERS, "household.scorer", f"one of {SCORERS}", h.scorer)
        check(h.observability in OBSERVABILITY, "household.observability",
              f"one of {OBSERVABILITY}", h.observability)
        check(h.scorer_mode in ("chat_top_logprobs", "completions"), "household.scorer_mode",
              "'chat_top_logprobs' or 'completions'", h.scorer_mode)
        check(h.scorer_timeout_s > 0, "household.scorer_timeout_s", "a positive number",
              h.scorer_timeout_s)
        check(h.scorer_batch >= 1, "household.scorer_batch", "a positive int", h.scorer_batch)
        check(h.monitor_rows >= 1, "household.monitor_rows", "a positive int", h.monitor_rows)
        check(isinstance(h.balance_episodes, bool), "household.balance_episodes",
              "True or False", h.balance_episodes)
        check(bool(h.train_apartments) and bool(h.test_apartments), "household.test_apartments",
              "non-empty train and test apartment lists", (h.train_apartments,
                                                           h.test_apartments))
        check(not set(h.train_apartments) & set(h.test_apartments), "household.test_apartments",
              f"apartments disjoint from the training ones {h.train_apartments}",
              h.test_apartments)
        if d.task == "household_qa":  # its reward is the planner's, with no prior
            for f in dataclasses.fields(RewardConfig):
                check(getattr(self.reward, f.name) == f.default, f"reward.{f.name}",
                      f"{f.default!r} for mindzero.data.task='household_qa' (its reward, "
                      "`mindzero.household.qa.rewards`, has no settings)", getattr(self.reward, f.name))
            for name in ("likelihood", "prior", "scorer"):
                check(getattr(h, name) == getattr(HouseholdSpec(), name), f"household.{name}",
                      f"{getattr(HouseholdSpec(), name)!r} for mindzero.data.task="
                      "'household_qa' (its reward is the planner's likelihood of the last "
                      "action; nothing would read it)", getattr(h, name))
        uses_llm = h.likelihood == "llm" or h.prior == "llm"
        check(not (uses_llm and h.scorer == "http" and not h.url()), "household.scorer_url",
              f"a base URL (or ${URL_ENV}) for the http scorer", h.scorer_url)
