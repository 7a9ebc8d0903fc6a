"""Paper-scale CToM (table 3/4): Qwen3-8B policy, LoRA rank 32, lr 1e-4 cosine, G = 4,
prompt batch 36 (minibatch 12 -> 3 micro-batches), simulator Qwen3-32B behind an
OpenAI-compatible URL (vLLM). Baselines and ablations by override:
  Naive GRPO (train) / Prompting Base (eval): ctom.controller.mode=direct
  w/o effort: ctom.controller.w_effort=0       w/o prediction: step.lambda_pred=0.0
  task-only: both of the above                 decision entropy: step.lambda_entropy=0.001
  in-process simulator: ctom.simulator=llm ctom.simulator_model=/ckpt/Qwen3-32B

    jaxtom train configs/ctom_coding_qwen3_8b.py model.path=/ckpt/Qwen3-8B
"""

from jaxtom.ctom import experiments

TRAINER = "jaxtom.ctom.train:train_from_config"  # multi-turn rollouts: CToM's own trainer
DOMAIN = "coding"


def get_config():
    return experiments.qwen3_8b_config(DOMAIN)


def ctom_settings():
    return experiments.qwen3_8b_settings(DOMAIN)
