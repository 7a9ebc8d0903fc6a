"""MindZero's paper run (jaxtom.mindzero.experiments.paper_config) with Qwen3-8B from
$JAXTOM_MODELS/Qwen3-8B. Check the mesh first: `jaxtom plan configs/mindzero_gridworld_qwen3_8b.py`."""

from jaxtom.mindzero.experiments import paper_config


def get_config():
    return paper_config("mindzero_gridworld_qwen3_8b", "Qwen3-8B", "qwen3")
