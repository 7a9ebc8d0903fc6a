"""A CPU smoke run of MindZero on image observations: a tiny random Qwen3-VL from scratch
reads Figure 7's assistance prompt with the rendered grid (16 px per cell) as its picture,
through a short format warm-up and SSRL. Checks the image path end to end, not learning.
Settings: `jaxtom.mindzero.experiments_vl.tiny_vl_config`; `step.freeze_vision=true` keeps
the vision tower fixed."""

from jaxtom.mindzero.experiments_vl import tiny_vl_config


def get_config():
    return tiny_vl_config()
