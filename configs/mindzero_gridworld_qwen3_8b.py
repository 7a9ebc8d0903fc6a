"""MindZero's paper settings (jaxtom.mindzero.experiments.paper_config), text-only: Qwen3-8B
from $JAXTOM_MODELS/Qwen3-8B reads the Figure 11 transcript instead of the paper's picture
(the paper's own setting, with images, is configs/mindzero_gridworld_qwen3vl_8b.py).
Check the mesh first: `jaxtom plan configs/mindzero_gridworld_qwen3_8b.py`."""

from jaxtom.mindzero.experiments import paper_config


def get_config():
    return paper_config("mindzero_gridworld_qwen3_8b", "Qwen3-8B", "qwen3")
