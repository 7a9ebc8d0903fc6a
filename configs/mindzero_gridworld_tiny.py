"""The CPU default (README main job): a tiny Qwen3-architecture decoder (without q/k norm)
from scratch with a BPE trained on generated text; compact observations with each object's
closing count and, while the lead is carried, `>` between partners the human's path has
ranked apart (`jaxtom.mindzero.observation`, `compact_ranked`); the Figure 7 label set (8
colored squares, the same words in every episode, so a from-scratch model need not learn to
copy new words); 4 particles. A format warm-up on a label-free teacher (`listed`: the lead
paired with each of the first four listed partners, random probabilities sorted only where
`>` follows the first partner, largest or smallest first at random, so SSRL has to learn
which way the evidence points; it stands in for the paper's sampled
generations of a bigger model and teaches the model to read its observation; checked on
validation prompts and retried once from a fresh initialisation if it did not learn to
copy), then 200 SSRL steps on the ELBO reward with each probability's digit explored at
temperature 3.0 and a KL of 0.05 to the warm-up, keeping the last model (40 validation
episodes feed the warm-up check and the logged monitor; `mindzero.data.keep=best` keeps the
model of their best log score instead), then evaluation on held-out episodes.
Settings and why: `jaxtom.mindzero.experiments.tiny_config`.

Ablations by switches: `mindzero.reward.entropy_weight=0.0` (w/o entropy bonus),
`mindzero.data.num_particles=1` (single hypothesis; it explores nothing, its one p is 1.0),
`mindzero.reward.prior_weight=0.0` (w/o prior). Another seed: `trainer.seed=1` (episodes,
tokenizer data and initialisation).
"""

from jaxtom.mindzero.experiments import tiny_config


def get_config():
    return tiny_config()
