"""MindZero's paper run (jaxtom.mindzero.experiments.paper_config) with Llama-3.1-8B from
$JAXTOM_MODELS/Llama-3.1-8B. Check the mesh first: `jaxtom plan configs/mindzero_gridworld_llama31_8b.py`."""

from jaxtom.mindzero.experiments import paper_config


def get_config():
    return paper_config("mindzero_gridworld_llama31_8b", "Llama-3.1-8B", "llama")
