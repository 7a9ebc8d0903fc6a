"""MindZero question answering as the paper trains it (section 5.1; the public code's
`configs/gw_tom.yaml`, jaxtom.mindzero.experiments.qa_paper_config), text-only with Qwen3-8B from
$JAXTOM_MODELS/Qwen3-8B (the Qwen3-VL runs of Table 4a come with the vision tower). Check the mesh
first: `jaxtom plan configs/mindzero_qa_qwen3_8b.py`. Evaluate: `jaxtom eval configs/mindzero_qa_qwen3_8b.py`."""

from jaxtom.mindzero.experiments import qa_paper_config


def get_config():
    return qa_paper_config("mindzero_qa_qwen3_8b", "Qwen3-8B", "qwen3")
