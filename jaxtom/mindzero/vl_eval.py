"""Asking a Qwen3-VL policy for goal particles at evaluation time (image-observation runs).

`VLQueries` is `evaluate.TextQueries` for pictures: each (episode, t) row is the image
observation's text with its picture's tokens expanded, and the picture of the state before
action t, rendered from whatever the view holds: the held-out episodes (`HostEpisodes`) or
the live rows of online assistance (`assist.LiveView`), so the goal table, the QA-from-beliefs
table and the assistance speedup all run on image runs through the same harness as text runs.
TFLOPs per query count the vision tower over the picture's patches as well as the decoder
over every token (appendix A.2 applied to both parts).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from jaxtom import flops, storage
from jaxtom.mindzero.image_observation import IMAGE_OBSERVATIONS, observation_image
from jaxtom.mindzero.policy import Codec, padded_rows
from jaxtom.models import Qwen3VL
from jaxtom.models.image_processing import preprocess_image
from jaxtom.models.mrope import expand_image_tokens


@dataclasses.dataclass
class VLQueries:
    """How a Qwen3-VL policy is asked for particles at (episode, t) rows of a view."""
    model: Qwen3VL
    codec: Codec
    cell_size: int
    style: str  # `mindzero.data.image_style`
    num_particles: int
    observation: str = "image"  # `mindzero.data.observation`: the prompt's text
    patches: int = dataclasses.field(default=0, init=False)  # per picture, set by `ask`

    def prompt(self, view, e: int, t: int):
        """(token ids with the picture's tokens expanded, preprocessed picture)."""
        patches, grid = preprocess_image(observation_image(view, e, t, self.cell_size, self.style),
                                         self.model.config.vision)
        text = IMAGE_OBSERVATIONS[self.observation](view, e, t, self.num_particles)
        ids = self.codec.prompt_ids(text)
        return expand_image_tokens(ids, [tuple(grid)], self.model.config), (patches, grid)

    def ask(self, view, rows, *, key, temperature: float, max_new_tokens: int):
        """(completion texts, tokens processed per query) for `rows`, one sampler call; the
        rows are padded to a few batch sizes (copies of the first, dropped), as text
        queries are, so a run compiles a bounded number of programs."""
        from jaxtom.sampling import vl as vl_sampling
        built = [self.prompt(view, e, t) for e, t in rows]
        ids, pictures = [b[0] for b in built], [[b[1]] for b in built]
        extra = padded_rows(len(ids)) - len(ids)
        self.patches = int(np.prod(pictures[0][0][1]))  # every picture of a run has one size
        out = vl_sampling.generate(
            self.model, ids + ids[:1] * extra, pictures + pictures[:1] * extra,
            preprocessed=True, num_patches=self.patches,
            max_new_tokens=max_new_tokens, temperature=temperature, key=key,
            stop=list(self.codec.eos_ids), pad_id=self.codec.pad_id,
            row_ids=np.arange(len(ids) + extra))
        seqs = out.sequences()[:len(ids)]
        return ([self.codec.decode(s) for s in seqs],
                np.array([len(p) + len(s) for p, s in zip(ids, seqs)]))

    def tflops_per_query(self, tokens: float) -> float:
        """2 x decoder parameters x tokens (image tokens included) plus 2 x vision-tower
        parameters x the picture's patches (every patch passes every block; counting the
        merger per patch too overstates it slightly). Needs one `ask` first (the patches)."""
        if not self.patches:
            raise ValueError("tflops_per_query needs the picture size: call ask first")
        cfg = self.model.config
        patches = self.patches
        return (flops.inference_tflops(flops.active_params(cfg.text), tokens)
                + flops.inference_tflops(cfg.vision.num_params(), patches))


def load_vl_model(config, checkpoint: str | Path, tokenizer_path=None):
    """(Qwen3VL, codec) from a run's checkpoint directory (tiny: plus its tokenizer.json)."""
    from jaxtom.models.orbax_io import restore_params
    from jaxtom.mindzero.vl_train import build_vl_model
    checkpoint = storage.absolute(checkpoint)
    tok = tokenizer_path or checkpoint.parent / "tokenizer.json"
    model, codec = build_vl_model(config, checkpoint.parent, tokenizer_path=tok)
    return restore_params(model, checkpoint), codec


__all__ = ["VLQueries", "load_vl_model"]
