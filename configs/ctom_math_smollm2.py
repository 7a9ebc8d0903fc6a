"""CToM on math with the real SmolLM2-135M-Instruct weights and the scripted simulator (CPU).

    jaxtom train configs/ctom_math_smollm2.py trainer.total_steps=2
    jaxtom eval configs/ctom_math_smollm2.py
    jaxtom eval configs/ctom_math_smollm2.py ctom.controller.mode=direct   # Prompting Base

Caps are far below table 4 so a laptop finishes a step in minutes; the paper-scale settings
are in configs/ctom_math_qwen3_8b.py.
"""

from jaxtom.config import Config, ModelSection, TaskSection, TrainerConfig
from jaxtom.ctom.train import CToMSettings
from jaxtom.models import smollm2_gguf_path
from jaxtom.rl.step import StepConfig

# one row per micro-batch keeps CPU memory of the 30-layer backward near 8 GB
ROW_LEN = {"math": 896, "coding": 1280, "writing": 1024}
TRAINER = "jaxtom.ctom.train:train_from_config"  # multi-turn rollouts: CToM's own trainer
DOMAIN = "math"


def get_config() -> Config:
    return Config(
        model=ModelSection(path=str(smollm2_gguf_path()), family="llama", vocab_size=49152),
        task=TaskSection(name="jaxtom.ctom.train:generic_trainer_unsupported", prompt_len=1,
                         target_token=0),
        step=StepConfig(learning_rate=1e-5, total_steps=2, kl_coef=0.0, lambda_pred=1.0,
                        micro_batches=4, max_grad_norm=1.0),
        trainer=TrainerConfig(workdir=f"runs/ctom_{DOMAIN}_smollm2", total_steps=2,
                              prompts_per_step=2, group_size=2, max_new_tokens=16,
                              row_len=ROW_LEN[DOMAIN], num_rows=4, temperature=1.0,
                              checkpoint_every=2,
                              progress=False),
    )


def ctom_settings() -> CToMSettings:
    return CToMSettings(
        domain=DOMAIN, tasks="builtin", num_tasks=4, simulator="scripted",
        controller=dict(max_rounds=1, max_revisions=1, plan_cap=12, ask_cap=16, draft_cap=24,
                        revision_cap=24, prediction_cap=12),
        pred_rows=4, pred_row_len=ROW_LEN[DOMAIN], eval_conversations=1)
