"""CToM's CPU default: the packing domain (`jaxtom.ctom.packing`), a tiny decoder from scratch.

    jaxtom train configs/ctom_tiny.py
    jaxtom eval configs/ctom_tiny.py

The simulated user follows the paper's disclosure rule (Table 8): a reply names at most the
single most important mismatch of the list it is shown. Every method gets the same two
visible rounds, token budget, advantage normalisation and effort weight. Baselines and
ablations by override (each in its own trainer.workdir; the warm-up is the same for a seed):
Naive GRPO ctom.controller.mode=direct; its label-matched control adds ctom.reply_nll=true
(the same eta-capped NLL on its real replies); w/o prediction step.lambda_pred=0.0; w/o effort
ctom.controller.w_effort=0. Prompting Base is the warm-up in direct mode (`jaxtom eval` of a
direct run prints it beside the trained row). The math user's rule (which slot is wrong,
never the item): ctom.disclosure=which. Another seed: trainer.seed=1 (tasks, tokenizer data,
initialisation, sampling).
"""

from jaxtom.ctom.experiments import tiny_config


def get_config():
    return tiny_config()
