"""MindZero's household assistance run (Table 1b) with Llama-3.2-3B from
$JAXTOM_MODELS/Llama-3.2-3B:
Figure 9 prompts, n=10 particles, likelihood and prior from the reward model served over HTTP
(`mindzero.household.scorer_url` or $JAXTOM_REWARD_URL). Settings:
`jaxtom.mindzero.household.experiments.household_paper_config`. Check the mesh first:
`jaxtom plan configs/mindzero_household_llama32_3b.py`. Llama-3.2-3B cannot write the format
(Table 1b's *), so it first warms up for 100 steps (the label-free teacher stands in for the
paper's samples of Llama-3.1-8B)."""

from jaxtom.mindzero.household.experiments import household_paper_config


def get_config():
    return household_paper_config("mindzero_household_llama32_3b", "Llama-3.2-3B", "llama",
                                  warmup_steps=100)
