"""MindZero's paper settings (appendix A.1), shared by the `configs/mindzero_gridworld_*.py`
files, which only name the model: lr 1e-6, weight decay 1e-2, grad clip 1.0, KL 1e-2 (k3),
bf16, rollout batch 32, 32 samples per prompt, 20 epochs over 1000 unlabelled episodes
unrolled into timesteps, 2 particles, uniform prior. Keeping one definition means the four
models' runs cannot drift apart.
"""

import os

from jaxtom.mindzero.config import (
    DataSpec, EvalSpec, MindZeroConfig, ModelSpec, RLSpec, WarmupSpec,
)
from jaxtom.mindzero.reward import RewardConfig

# 1000 episodes x ~30 timesteps / 32 prompts per step x 20 epochs
PAPER_STEPS = 1000 * 30 // 32 * 20


def paper_config(name: str, model_dir: str) -> MindZeroConfig:
    """The paper's run for the Hugging Face checkpoint at $JAXTOM_MODELS/`model_dir`."""
    root = os.environ.get("JAXTOM_MODELS", "/models")
    return MindZeroConfig(
        name=name,
        run_dir=f"runs/{name}",
        dtype="bfloat16",
        mesh=(1, 8, 1),
        model=ModelSpec(kind="hf", path=os.path.join(root, model_dir)),
        data=DataSpec(max_steps=50, train_episodes=1000, eval_episodes=20, split="labels",
                      observation="figure", num_particles=2),
        warmup=WarmupSpec(steps=0),
        rl=RLSpec(steps=PAPER_STEPS, prompts_per_step=32, samples_per_prompt=32,
                  temperature=1.0, max_new_tokens=256, learning_rate=1e-6, weight_decay=1e-2,
                  max_grad_norm=1.0, kl_coef=1e-2, micro_batches=8),
        reward=RewardConfig(prior_weight=1.0, entropy_weight=1.0),
        eval=EvalSpec(episodes=20, seeds=(10, 20, 30), random_prob=0.15),
    )
