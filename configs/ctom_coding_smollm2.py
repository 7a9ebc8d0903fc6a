"""CToM on coding with the real SmolLM2-135M-Instruct weights and the scripted simulator (CPU).

    jaxtom train configs/ctom_coding_smollm2.py trainer.total_steps=2
    jaxtom eval configs/ctom_coding_smollm2.py
    jaxtom eval configs/ctom_coding_smollm2.py ctom.controller.mode=direct   # Prompting Base

Caps are far below table 4 so a laptop finishes a step in minutes; the paper-scale settings
are in configs/ctom_coding_qwen3_8b.py.
"""

from jaxtom.ctom import experiments

TRAINER = "jaxtom.ctom.train:train_from_config"  # multi-turn rollouts: CToM's own trainer
DOMAIN = "coding"


def get_config():
    return experiments.smollm2_config(DOMAIN)


def ctom_settings():
    return experiments.smollm2_settings(DOMAIN)
