"""MindZero paper settings (appendix A.1; jaxtom.mindzero.experiments) with Llama-3.1-8B from a local
Hugging Face directory ($JAXTOM_MODELS/Llama-3.1-8B). Mesh: `mesh.data/fsdp/tensor`; the default
(1, 8, 1) fits an 8xH100 host; a v5p-32 slice: `mesh.data=4 mesh.fsdp=8`. Check a mesh
before renting it: `jaxtom plan configs/mindzero_gridworld_llama31_8b.py`.
Ablations: mindzero.reward.entropy_weight=0.0, mindzero.data.num_particles=1,
mindzero.reward.prior_weight=0.0."""

from jaxtom.mindzero.experiments import paper_config


def get_config():
    return paper_config("mindzero_gridworld_llama31_8b", "Llama-3.1-8B", "llama")
