"""The household environment of MindZero (paper section 5.3-5.4, appendix C): a symbolic
apartment simulator in the spirit of Online Watch-And-Help, its goal-conditioned human, text
observations, symbolic and LLM likelihood / prior scorers, household questions and assistance
helpers. MindZero's training and evaluation on it live in `jaxtom.mindzero.household`; nothing
here imports a paper package (`jaxtom.mindzero`, `jaxtom.ctom`) or the trainer (`jaxtom.rl`)."""
