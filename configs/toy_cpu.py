"""Toy GRPO run for a laptop CPU: a random 2-layer Qwen3-shaped model learns to emit token 3.

    jaxtom train configs/toy_cpu.py trainer.workdir=runs/toy trainer.total_steps=60
"""

from jaxtom.config import Config, ModelSection, TaskSection, TrainerConfig
from jaxtom.rl.step_config import StepConfig


def get_config() -> Config:
    return Config(
        model=ModelSection(vocab_size=32, hidden_size=32, intermediate_size=64, num_layers=2,
                           num_heads=4, num_kv_heads=2, head_dim=8),
        task=TaskSection(name="toy_token", num_prompts=64, prompt_len=4, target_token=3),
        step=StepConfig(learning_rate=1e-2, warmup_steps=5, kl_coef=0.0,
                        weight_decay=0.0),
        trainer=TrainerConfig(workdir="runs/toy_cpu", total_steps=60, prompts_per_step=4,
                              group_size=4, max_new_tokens=8, row_len=16,
                              checkpoint_every=20),
    )
