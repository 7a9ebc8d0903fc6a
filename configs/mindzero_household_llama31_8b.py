"""MindZero's household assistance run (Table 1b) with Llama-3.1-8B from
$JAXTOM_MODELS/Llama-3.1-8B:
Figure 9 prompts, n=10 particles, likelihood and prior from the reward model served over HTTP
(`mindzero.household.scorer_url` or $JAXTOM_REWARD_URL). Settings:
`jaxtom.mindzero.household.experiments.household_paper_config`. Check the mesh first:
`jaxtom plan configs/mindzero_household_llama31_8b.py`."""

from jaxtom.mindzero.household.experiments import household_paper_config


def get_config():
    return household_paper_config("mindzero_household_llama31_8b", "Llama-3.1-8B", "llama",
                                  warmup_steps=0)
