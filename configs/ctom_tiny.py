"""CToM's CPU default: the packing domain (`jaxtom.ctom.packing`), a tiny decoder from scratch.

    jaxtom train configs/ctom_tiny.py
    jaxtom eval configs/ctom_tiny.py

Baselines and ablations by override (each in its own trainer.workdir; the warm-up is the
same for a seed): Naive GRPO ctom.controller.mode=direct; w/o prediction step.lambda_pred=0.0;
w/o effort ctom.controller.w_effort=0; task-only both. Prompting Base is the warm-up model in
direct mode (`jaxtom eval` of a Naive GRPO run prints it beside the trained row). Another
seed: trainer.seed=1 (tasks, tokenizer data, initialisation, sampling).
"""

from jaxtom.ctom.experiments import tiny_config


def get_config():
    return tiny_config()
