"""MindZero question answering on pictures (`mindzero.data.task=qa` with `observation=image`):
Figure 6's question in its image modality (`qa.image_question`), read by Qwen3-VL with the
rendered grid at the question's step, the paper's gridworld QA setting (Table 4a).

`VLQAPrompts` is `qa.QAPrompts` for pictures: the question text with the picture's tokens
expanded, the picture itself (question i -> the state before action `step`), and the two
things that differ from text prompts -- sampling through the image+text prefill
(`generate_rows`, `sample`) and handing the update image+text rows (`batch`). The QA
rollouts, monitor and evaluation call these, so one code path serves both observations.
"""

from __future__ import annotations

import numpy as np

from jaxtom.mindzero.image_observation import observation_image
from jaxtom.mindzero.qa import QAPrompts
from jaxtom.models.image_processing import preprocess_image
from jaxtom.models.mrope import expand_image_tokens
from jaxtom.models.vl_config import VLConfig


class VLQAPrompts(QAPrompts):
    """Question i -> token ids with its picture's tokens expanded, and the picture
    (preprocessed, cached); every picture of a run has one size. `row_len` (set by the
    trainer once known) is the update rows' length."""

    def __init__(self, codec, view, questions, vl: VLConfig, cell_size: int, style: str):
        super().__init__("image", codec, view, questions)
        self.vl, self.cell, self.style = vl, cell_size, style
        self._pictures: dict[int, tuple] = {}
        self.row_len = 0
        grid = self.image(0)[1]
        self.num_patches = int(np.prod(grid))
        self.grid = tuple(int(g) for g in grid)

    def __call__(self, i: int) -> list[int]:
        if i not in self.cache:
            ids = self.codec.prompt_ids(self.text(i))
            self.cache[i] = expand_image_tokens(ids, [self.grid], self.vl)
        return self.cache[i]

    def image(self, i: int) -> tuple[np.ndarray, tuple]:
        q = self.questions[int(i)]
        key = (int(q.episode), int(q.step))  # a question and its mirror share a picture
        if key not in self._pictures:
            if len(self._pictures) >= 1024:
                self._pictures.pop(next(iter(self._pictures)))
            self._pictures[key] = preprocess_image(
                observation_image(self.view, *key, self.cell, self.style), self.vl.vision)
        return self._pictures[key]

    def generate_rows(self, model, index, row_ids, *, key, rows_per_call: int = 0, **kwargs):
        """`rl.distributed.generate_rows` for questions `index` (their pictures rendered on
        every process that samples them)."""
        from jaxtom.mindzero.vl_train import generate_vl_rows
        return generate_vl_rows(model, [self(i) for i in index], [(int(i),) for i in index],
                                row_ids, render=self.image, key=key,
                                num_patches=self.num_patches, rows_per_call=rows_per_call,
                                **kwargs)

    def sample(self, model, index, *, key, row_ids, **kwargs):
        """One sampler call for questions `index` on this process alone (evaluation)."""
        from jaxtom.sampling import vl as vl_sampling
        return vl_sampling.generate(model, [self(i) for i in index],
                                    [[self.image(i)] for i in index], preprocessed=True,
                                    num_patches=self.num_patches, key=key, row_ids=row_ids,
                                    **kwargs).sequences()

    def batch(self, rollout, index):
        """The rollout's rows as image+text rows of every process (`vl_train.global_vl_batch`)."""
        from jaxtom.mindzero.vl_train import global_vl_batch
        if not self.row_len:
            raise ValueError("VLQAPrompts.row_len is not set: the trainer sets it once known")
        return global_vl_batch(rollout, [(int(i),) for i in index], self, self.vl,
                               row_len=self.row_len, pad_id=self.codec.pad_id)

    def tflops_per_token_and_picture(self, model) -> tuple[float, float]:
        """(TFLOPs per decoder token, TFLOPs per picture through the vision tower)."""
        from jaxtom import flops
        cfg = model.config
        return (flops.inference_tflops(flops.active_params(cfg.text), 1),
                flops.inference_tflops(cfg.vision.num_params(), self.num_patches))


__all__ = ["VLQAPrompts"]
