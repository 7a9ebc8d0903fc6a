"""The household CPU default (MindZero section 5.4 in miniature): a tiny Qwen3-architecture
decoder from scratch over a BPE trained on the run's own text reads a compact line per
timestep (`jaxtom.mindzero.household.data.compact_observation`) and writes n=3 Figure 9 goal particles.
A format warm-up on the label-free observed-goal teacher, then SSRL on the ELBO with the
simulated human's exact likelihood and the rule-based prior (`mindzero.household.likelihood=
symbolic`, `prior=symbolic`), then the goal-inference table on held-out apartments 3 and 6.
Settings: `jaxtom.mindzero.household.experiments.household_tiny_config`.

    jaxtom mindzero run configs/mindzero_household_tiny.py     # train, then evaluate

Table 2's ablations: `mindzero.household.prior=none`, `mindzero.data.num_particles=1`,
`mindzero.reward.entropy_weight=0.0`. Another seed: `trainer.seed=1`.
"""

from jaxtom.mindzero.household.experiments import household_tiny_config


def get_config():
    return household_tiny_config()
