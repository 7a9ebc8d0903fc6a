"""jaxtom: pure-functional JAX/Flax reimplementation of MindZero and CToM.

Subpackages
-----------
gridworld   The Construction domain of MindZero: environment, simulated human, planner
            likelihoods, exact goal posterior, helper agent, rollouts, episodes, QA, rendering.
"""

__version__ = "0.1.0"
