"""MindZero on the household environment (`jaxtom.household`, paper sections 5.3-5.4): the run
config (`config`, `experiments`), training on the one trainer (`train`), the goal-inference
table with its assistance and QA columns (`evaluate`), and household QA by SSRL (`qa_ssrl`).
The environment package knows nothing of these."""
