"""MindZero paper settings (appendix A.1; jaxtom.mindzero.experiments) with Llama-3.2-3B from a
local Hugging Face directory ($JAXTOM_MODELS/Llama-3.2-3B). Mesh: `mesh=(data, fsdp, tensor)`; the
default fits an 8xH100 host, e.g. `mesh=(1,8,1)`; a v5p-32 / v6e-32 slice: `mesh=(4,8,1)`.
Ablations: reward.entropy_weight=0.0, data.num_particles=1, reward.prior_weight=0.0."""

from jaxtom.mindzero.experiments import paper_config


def config():
    return paper_config("mindzero_gridworld_llama32_3b", "Llama-3.2-3B")
