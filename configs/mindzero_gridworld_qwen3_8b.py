"""MindZero paper settings (appendix A.1) with Qwen3-8B from a local Hugging Face directory
($JAXTOM_MODELS/Qwen3-8B): lr 1e-6, weight decay 1e-2, grad clip 1.0, KL 1e-2 (k3), bf16,
rollout batch 32, 32 samples per prompt, 20 epochs over 1000 unlabelled episodes unrolled into
timesteps, 2 particles, uniform prior. Mesh: `mesh=(data, fsdp, tensor)`; the default fits an
8xH100 host, e.g. `mesh=(1,8,1)`; a v5p-32 / v6e-32 slice: `mesh=(4,8,1)`.
Ablations: reward.entropy_weight=0.0, data.num_particles=1, reward.prior_weight=0.0."""

import os

from jaxtom.mindzero.config import (
    DataSpec, EvalSpec, MindZeroConfig, ModelSpec, RLSpec, WarmupSpec,
)
from jaxtom.mindzero.reward import RewardConfig

# 1000 episodes x ~30 timesteps / 32 prompts per step x 20 epochs
STEPS = 1000 * 30 // 32 * 20


def config() -> MindZeroConfig:
    root = os.environ.get("JAXTOM_MODELS", "/models")
    return MindZeroConfig(
        name="mindzero_gridworld_qwen3_8b",
        run_dir="runs/mindzero_gridworld_qwen3_8b",
        dtype="bfloat16",
        mesh=(1, 8, 1),
        model=ModelSpec(kind="hf", path=os.path.join(root, "Qwen3-8B")),
        data=DataSpec(max_steps=50, train_episodes=1000, eval_episodes=20, split="labels",
                      observation="figure", num_particles=2),
        warmup=WarmupSpec(steps=0),
        rl=RLSpec(steps=STEPS, prompts_per_step=32, samples_per_prompt=32, temperature=1.0,
                  max_new_tokens=256, learning_rate=1e-6, weight_decay=1e-2, max_grad_norm=1.0,
                  kl_coef=1e-2, micro_batches=8),
        reward=RewardConfig(prior_weight=1.0, entropy_weight=1.0),
        eval=EvalSpec(episodes=20, seeds=(10, 20, 30), random_prob=0.15),
    )
