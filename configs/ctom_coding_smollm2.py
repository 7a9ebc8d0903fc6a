"""CToM on coding with the real SmolLM2-135M-Instruct weights on a CPU (jaxtom.ctom.experiments).

    jaxtom train configs/ctom_coding_smollm2.py trainer.total_steps=2
    jaxtom eval configs/ctom_coding_smollm2.py
"""

from jaxtom.ctom import experiments

DOMAIN = "coding"


def get_config():
    return experiments.smollm2_config(DOMAIN)

