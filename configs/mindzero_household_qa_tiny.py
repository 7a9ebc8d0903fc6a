"""The household QA CPU default (MindZero section 5.3 / Table 4b in miniature): a tiny
Qwen3-architecture decoder from scratch answers MMToM-style binary questions about a person's
beliefs and goals (types 1.1-1.3, 2.1-2.4, `jaxtom.mindzero.household.qa`) read from a compact line per
question; a format warm-up on uniformly random letters, then SSRL on the label-free QA reward
(the planner's likelihood of the person's last action under the chosen option), then Table
4b's evaluation on the held-out apartments (3, 6). Settings:
`jaxtom.mindzero.household.experiments.household_qa_tiny_config`. Another seed:
`trainer.seed=1`.

    jaxtom mindzero run configs/mindzero_household_qa_tiny.py     # train, then evaluate
"""

from jaxtom.mindzero.household.experiments import household_qa_tiny_config


def get_config():
    return household_qa_tiny_config()
