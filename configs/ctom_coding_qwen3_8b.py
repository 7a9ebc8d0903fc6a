"""Paper-scale CToM (table 3/4): Qwen3-8B policy, LoRA rank 32, lr 1e-4 cosine, G = 4,
prompt batch 36 (minibatch 12 -> 3 micro-batches), simulator Qwen3-32B behind an
OpenAI-compatible URL (vLLM). Baselines and ablations by override:
  Naive GRPO (train) / Prompting Base (eval): ctom.controller.mode=direct
  w/o effort: ctom.controller.w_effort=0       w/o prediction: step.lambda_pred=0.0
  task-only: both of the above                 decision entropy: step.lambda_entropy=0.001
  in-process simulator: ctom.simulator=llm ctom.simulator_model=/ckpt/Qwen3-32B

    jaxtom train configs/ctom_coding_qwen3_8b.py model.path=/ckpt/Qwen3-8B
"""

import os

from jaxtom.config import Config, MeshSection, ModelSection, TaskSection, TrainerConfig
from jaxtom.ctom.effort import domain_settings
from jaxtom.ctom.train import CToMSettings
from jaxtom.rl.step import StepConfig

TRAINER = "jaxtom.ctom.train:train_from_config"  # multi-turn rollouts: CToM's own trainer
DOMAIN = "coding"
W_EFFORT = 0.01
STEPS = {"math": 180, "coding": 208, "writing": 208}[DOMAIN]


def get_config() -> Config:
    return Config(
        model=ModelSection(path=os.environ.get("QWEN3_8B", ""), family="qwen3",
                           vocab_size=151936, dtype="bfloat16", lora_rank=32, lora_alpha=32.0),
        task=TaskSection(name="jaxtom.ctom.train:generic_trainer_unsupported", prompt_len=1,
                         target_token=0),
        step=StepConfig(learning_rate=1e-4, total_steps=STEPS, kl_coef=0.01, lambda_pred=1.0,
                        micro_batches=3, lora=True),
        trainer=TrainerConfig(workdir=f"runs/ctom_{DOMAIN}_qwen3_8b", total_steps=STEPS,
                              prompts_per_step=36, group_size=4, max_new_tokens=16,
                              row_len=16384, temperature=1.0, checkpoint_every=10),
        mesh=MeshSection(data=-1),
    )


def ctom_settings() -> CToMSettings:
    d = domain_settings(DOMAIN)
    return CToMSettings(
        domain=DOMAIN, tasks=os.environ.get("CTOM_TASKS", "builtin"), simulator="http",
        simulator_url=os.environ.get("CTOM_SIMULATOR_URL", "http://127.0.0.1:8000/v1"),
        simulator_model="Qwen/Qwen3-32B-FP8",
        controller=dict(w_effort=W_EFFORT, max_rounds=d.max_rounds),
        pred_rows=256, pred_row_len=8192, eval_conversations=8)
