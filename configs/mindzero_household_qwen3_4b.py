"""MindZero's household assistance run (Table 1b) with Qwen3-4B from
$JAXTOM_MODELS/Qwen3-4B:
Figure 9 prompts, n=10 particles, likelihood and prior from the reward model served over HTTP
(`mindzero.household.scorer_url` or $JAXTOM_REWARD_URL). Settings:
`jaxtom.mindzero.household.experiments.household_paper_config`. Check the mesh first:
`jaxtom plan configs/mindzero_household_qwen3_4b.py`."""

from jaxtom.mindzero.household.experiments import household_paper_config


def get_config():
    return household_paper_config("mindzero_household_qwen3_4b", "Qwen3-4B", "qwen3",
                                  warmup_steps=0)
