"""The household experiments behind `configs/mindzero_household_*.py`.

Paper settings (section 5.4, appendix C; the public code's `configs/hh_asst.yaml` as the
notes read it): n = 10 particles in the Figure 9 prompt, 20 training episodes on apartments
0, 1, 2, 4, 5 (unrolled: steps after the first key action), 16 test episodes on 3 and 6, step
budget 200; the likelihood and prior are A/B scores of a separate larger reward model
(Qwen3-235B-A22B behind vLLM: `mindzero.household.scorer='http'`, its URL from
`mindzero.household.scorer_url` or $JAXTOM_REWARD_URL, never contacted by the tests); the
optimiser, precision, mesh and rollout batch are the gridworld paper run's
(`jaxtom.mindzero.experiments.paper_config`: lr 1e-6, KL 1e-2, 32 prompts x 32 samples).
Llama-3.2-3B cannot write the format (Table 1b's *): its config warms up on sampled
generations first (here: the label-free teacher, `mindzero.warmup.steps`).
"""

from __future__ import annotations

import dataclasses

from jaxtom.config import Config
from jaxtom.mindzero.household.config import HouseholdMindZero, HouseholdSpec
from jaxtom.mindzero.config import DataSpec, EvalSpec, WarmupSpec
from jaxtom.mindzero.experiments import TINY_MODEL, paper_config, qa_tiny_config
from jaxtom.mindzero.reward import RewardConfig
from jaxtom.rl.step_config import StepConfig
from jaxtom.rl.trainer import TrainerConfig

# 968 training timesteps / 32 prompts per step x 20 epochs
PAPER_STEPS = 968 // 32 * 20


def household_paper_config(name: str, model_dir: str, family: str,
                           warmup_steps: int = 0) -> Config:
    """The paper's household assistance run for $JAXTOM_MODELS/`model_dir` (see module)."""
    base = paper_config(name, model_dir, family)
    return dataclasses.replace(
        base,
        step=base.step,
        trainer=dataclasses.replace(base.trainer, total_steps=PAPER_STEPS, max_new_tokens=1024,
                                    row_len=4096, temperature=1.0, eval_every=50),
        mindzero=HouseholdMindZero(
            data=DataSpec(max_steps=200, train_episodes=20, eval_episodes=16,
                          observation="figure", num_particles=10, task="household"),
            warmup=WarmupSpec(steps=warmup_steps, batch_size=32, learning_rate=1e-5),
            reward=RewardConfig(prior_weight=1.0, entropy_weight=1.0, likelihood_floor=1e-10,
                                duplicates="merge"),
            eval=EvalSpec(episodes=16, stride=1, assistance=True, seeds=(10, 20, 30),
                          qa_episodes=16),
            household=HouseholdSpec(likelihood="llm", prior="llm", scorer="http",
                                    scorer_model="Qwen3-235B-A22B-FP8",
                                    scorer_mode="chat_top_logprobs")))


def household_tiny_config() -> Config:
    """The CPU default (see configs/mindzero_household_tiny.py).

    Sampling at temperature 0.7, not 1.0: at 1.0 about a third of the first SSRL samples are
    malformed, and a malformed sample's penalty spends a group's advantage on the format
    rather than the goal.

    32 prompts per step with every episode given the same number of prompts
    (`household.balance_episodes`): training prompts are timesteps, so without balancing long
    episodes (large goals) outvote short ones and SSRL learns to raise every count by one,
    losing the one-each goals the episode-averaged evaluation weighs like any other. 128 test
    episodes at every sixth step (~1,400 queries): an episode's queries are correlated, so
    the margin over the warm-up is only as precise as the number of episodes.
    """
    return Config(
        model=dataclasses.replace(TINY_MODEL, vocab_size=768),
        step=StepConfig(learning_rate=6e-4, warmup_steps=10, weight_decay=0.0, kl_coef=0.05,
                        max_grad_norm=1.0, end_lr_ratio=0.1),
        trainer=TrainerConfig(workdir="runs/mindzero_household_tiny", total_steps=150,
                              prompts_per_step=32, group_size=8, temperature=0.7,
                              max_new_tokens=96, row_len=256, eval_every=25,
                              checkpoint_every=25),
        mindzero=HouseholdMindZero(
            data=DataSpec(max_steps=200, train_episodes=100, eval_episodes=128,
                          observation="compact", num_particles=3, task="household"),
            warmup=WarmupSpec(steps=300, batch_size=32, learning_rate=3e-3,
                              teacher="approached", min_distinct=8),
            reward=RewardConfig(likelihood_floor=1e-10, duplicates="merge"),
            eval=EvalSpec(episodes=128, stride=6, assistance=False),
            household=HouseholdSpec(likelihood="symbolic", prior="symbolic",
                                    balance_episodes=True)))


def household_qa_tiny_config() -> Config:
    """The household QA CPU default (see configs/mindzero_household_qa_tiny.py): the gridworld
    QA default's recipe (`mindzero.experiments.qa_tiny_config`) on the household's questions.
    The tiny decoder from scratch over a BPE of its own compact questions; 100 training
    episodes on apartments 0, 1, 2, 4, 5 (up to two questions per type each), 48 held-out on
    3 and 6; a 100-step random-letter warm-up (never the answer), then 300 SSRL steps of 8
    questions, each also asked with its options swapped, x 8 one-token answers (lr 3e-4 ->
    3e-5, KL 0.05 to the starting model), rewarded by the planner's likelihood of the person's
    last action under the chosen option (`mindzero.household.qa.rewards`, no label)."""
    base = qa_tiny_config()  # model, optimiser, sampling, warm-up: the gridworld QA default's
    mz = base.mindzero
    return dataclasses.replace(
        base,
        trainer=dataclasses.replace(base.trainer, workdir="runs/mindzero_household_qa_tiny",
                                    eval_every=50),
        mindzero=HouseholdMindZero(
            data=DataSpec(max_steps=200, train_episodes=100, eval_episodes=48,
                          observation="compact", task="household_qa", qa_mirror=True),
            warmup=mz.warmup, reward=mz.reward, eval=mz.eval, household=HouseholdSpec()))
