"""The CPU default (README main job): a tiny Qwen3-architecture decoder from scratch with a BPE
trained on generated text, compact observations (`jaxtom.mindzero.observation`), the Figure 7
label set (8 colored squares, the same words in every episode, so a from-scratch model need not
learn to copy new words), 2 particles. A format warm-up on a label-free heuristic teacher
(`approached`, which stands in for the paper's sampled generations of a bigger model and
teaches the model to read its observation), then SSRL on the ELBO reward. Fits a 2-core CPU in
about 15 minutes, then evaluates on held-out episodes.

Ablations by switches: `reward.entropy_weight=0.0` (w/o entropy bonus),
`data.num_particles=1` (single hypothesis), `reward.prior_weight=0.0` (w/o prior).
"""

from jaxtom.mindzero.config import (
    DataSpec, EvalSpec, MindZeroConfig, ModelSpec, RLSpec, WarmupSpec,
)
from jaxtom.mindzero.reward import RewardConfig


def config() -> MindZeroConfig:
    return MindZeroConfig(
        name="mindzero_gridworld_tiny",
        run_dir="runs/mindzero_gridworld_tiny",
        model=ModelSpec(kind="tiny", vocab_size=384, hidden_size=96, intermediate_size=256,
                        num_layers=3, num_heads=4, num_kv_heads=2, head_dim=24),
        data=DataSpec(max_steps=50, train_episodes=400, eval_episodes=40, split="episodes",
                      label_set="figure7", observation="compact", num_particles=2),
        warmup=WarmupSpec(steps=600, batch_size=32, learning_rate=3e-3, teacher="approached"),
        rl=RLSpec(steps=250, prompts_per_step=16, samples_per_prompt=8, temperature=1.0,
                  max_new_tokens=48, learning_rate=1e-3, lr_warmup_steps=25, weight_decay=0.0,
                  kl_coef=0.0, max_seconds=420.0, monitor_every=25),
        reward=RewardConfig(),
        eval=EvalSpec(episodes=40, seeds=(10, 20, 30), random_prob=0.15, stride=2,
                      assist_episodes=30, qa_episodes=20),
    )
