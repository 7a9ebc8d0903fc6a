"""MindZero's household domain (paper section 5.3-5.4, appendix C): a symbolic apartment
simulator in the spirit of Online Watch-And-Help, its goal-conditioned human, text
observations, symbolic and LLM likelihood / prior scorers, household QA and assistance."""
