"""MindZero's paper run with images (jaxtom.mindzero.experiments_vl.vl_paper_config):
Qwen3-VL-4B-Instruct from $JAXTOM_MODELS/Qwen3-VL-4B-Instruct reads Figure 7's
assistance prompt with the rendered 500x500 grid (50 px per cell) as its picture; the vision
tower trains (`step.freeze_vision=true` keeps it fixed). Check the mesh first:
`jaxtom plan configs/mindzero_gridworld_qwen3vl_4b.py`."""

from jaxtom.mindzero.experiments_vl import vl_paper_config


def get_config():
    return vl_paper_config("mindzero_gridworld_qwen3vl_4b", "Qwen3-VL-4B-Instruct")
