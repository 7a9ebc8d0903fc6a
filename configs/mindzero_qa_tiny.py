"""The CPU QA default (section 5.1 in miniature): a tiny Qwen3-architecture decoder from
scratch answers binary-choice goal questions (types 1-3, appendix B.2) read from a compact
line per question (`jaxtom.mindzero.qa.compact_question`); a format warm-up on uniformly random
letters, then SSRL on the QA reward (log-likelihood of the observed actions under the chosen
option's goal; no answer labels), then the Table 4a evaluation on 300 held-out questions.
Settings: `jaxtom.mindzero.experiments.qa_tiny_config`. Another seed: `trainer.seed=1`.

    jaxtom mindzero run configs/mindzero_qa_tiny.py     # train, then evaluate
"""

from jaxtom.mindzero.experiments import qa_tiny_config


def get_config():
    return qa_tiny_config()
