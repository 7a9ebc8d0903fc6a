"""Paper-scale CToM on math (see jaxtom.ctom.experiments for settings and overrides).

    jaxtom train configs/ctom_math_qwen3_8b.py model.path=/ckpt/Qwen3-8B
"""

from jaxtom.ctom import experiments

DOMAIN = "math"


def get_config():
    return experiments.qwen3_8b_config(DOMAIN)

