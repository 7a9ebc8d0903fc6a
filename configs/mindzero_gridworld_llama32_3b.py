"""MindZero's paper run (jaxtom.mindzero.experiments.paper_config) with Llama-3.2-3B from
$JAXTOM_MODELS/Llama-3.2-3B. Check the mesh first: `jaxtom plan configs/mindzero_gridworld_llama32_3b.py`."""

from jaxtom.mindzero.experiments import paper_config


def get_config():
    return paper_config("mindzero_gridworld_llama32_3b", "Llama-3.2-3B", "llama")
