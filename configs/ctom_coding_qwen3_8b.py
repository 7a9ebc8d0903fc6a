"""Paper-scale CToM on coding (see jaxtom.ctom.experiments for settings and overrides).

    jaxtom train configs/ctom_coding_qwen3_8b.py model.path=/ckpt/Qwen3-8B
"""

from jaxtom.ctom import experiments

DOMAIN = "coding"


def get_config():
    return experiments.qwen3_8b_config(DOMAIN)

