"""Image+text training rows for a Qwen3-VL policy: one sequence per row, each row carrying
its own images (see `Batch.image_index` / `Batch.vision`).

Rows own their images so that everything the update does by rows (padding to the mesh,
micro-/mini-batch splits, sharding over the data axes) applies to the images unchanged; the
price is that a GRPO group's repeated image is encoded once per row in the update (the
sampler's prefill still encodes it once). Images are padded to a fixed patch and image count
per row (`num_patches`, `images_per_row`), so the update compiles once per run.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from jaxtom.models.image_processing import (as_rgb_uint8, num_image_tokens,
                                            preprocess_image)
from jaxtom.models.qwen3_vl import prepare_batch
from jaxtom.models.vl_config import VLConfig
from jaxtom.rl.batch import Batch


def preprocess_images(images: Sequence[Sequence], cfg: VLConfig) -> list[list[tuple]]:
    """Each row's images as (patches, grid), identical pixels preprocessed once."""
    seen: dict[bytes, tuple] = {}
    out = []
    for row in images:
        done = []
        for im in row:
            if isinstance(im, tuple):
                done.append(im)
                continue
            rgb = as_rgb_uint8(im)
            key = hashlib.blake2b(rgb.tobytes() + str(rgb.shape).encode(),
                                  digest_size=16).digest()
            if key not in seen:
                seen[key] = preprocess_image(rgb, cfg.vision)
            done.append(seen[key])
        out.append(done)
    return out


def images_end(cfg: VLConfig, seq: Sequence[int], images: Sequence[tuple]) -> int:
    """The length of `seq` up to its images' expanded tokens, or all of it when it holds no
    more image tokens than its images fill. A policy can sample the image placeholder id
    in its completion; the sampler embedded that token as text (no image goes with it), so
    the update must read it as text too, not as a picture it was never given."""
    ids = np.asarray(seq)
    pads = np.flatnonzero(ids == cfg.image_token_id)
    filled = sum(num_image_tokens(grid, cfg.vision) for _, grid in images)
    return len(ids) if len(pads) <= filled else int(pads[filled - 1]) + 1


def vl_rows(cfg: VLConfig, sequences: Sequence[Sequence[int]],
            policy_masks: Sequence[Sequence[float]], advantages: Sequence[float],
            group_ids: Sequence[int], images: Sequence[Sequence], *, row_len: int,
            num_patches: int, images_per_row: int = 1, pad_id: int = 0,
            decision_masks: Sequence[Sequence[float]] | None = None) -> Batch:
    """A NumPy `Batch` of image+text rows: `sequences[i]` (prompt with its image tokens
    already expanded, `mrope.expand_image_tokens`, + completion) with `images[i]` (uint8
    [H, W, 3], PIL, or preprocessed (patches, grid) pairs). Positions are the sequences'
    M-RoPE positions [R, 3, row_len]; masks are aligned with the sequences as given."""
    n = len(sequences)
    for name, seq in (("policy_masks", policy_masks), ("advantages", advantages),
                      ("group_ids", group_ids), ("images", images)):
        if len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries, expected one per sequence ({n})")
    pre = preprocess_images(images, cfg)
    shape = (n, row_len)
    tokens = np.full(shape, pad_id, np.int32)
    positions = np.zeros((n, 3, row_len), np.int32)
    segments = np.zeros(shape, np.int32)
    mask = np.zeros(shape, np.float32)
    adv = np.zeros(shape, np.float32)
    groups = np.full(shape, -1, np.int32)
    decision = np.zeros(shape, np.float32)
    index = np.full(shape, -1, np.int32)
    vision = []
    for i, (seq, imgs) in enumerate(zip(sequences, pre)):
        L = len(seq)
        if len(policy_masks[i]) != L:
            raise ValueError(f"policy mask {i} has length {len(policy_masks[i])}, expected {L}")
        if L > row_len:
            raise ValueError(f"sequence {i} has {L} tokens, longer than row_len={row_len}")
        if not imgs:
            raise ValueError(f"sequence {i} has no image; image+text rows need one at least")
        cut = images_end(cfg, seq, imgs)
        one = prepare_batch(cfg, [seq[:cut]], [imgs], pad_id=pad_id, seq_len=row_len,
                            num_patches=num_patches, num_images=images_per_row,
                            preprocessed=True)
        if one.lengths[0] != cut:
            raise ValueError(f"sequence {i}: its image tokens must already be expanded "
                             f"({cut} tokens became {int(one.lengths[0])})")
        tokens[i] = one.input_ids[0]
        positions[i] = one.positions[:, 0]
        index[i] = one.image_index[0]
        if cut < L:  # text after the images' last token, positioned as text
            tokens[i, cut:L] = seq[cut:]
            positions[i, :, cut:L] = positions[i, :, :cut].max() + 1 + np.arange(L - cut)
        vision.append(one.vision)
        segments[i, :L] = 1
        mask[i, :L] = policy_masks[i]
        mask[i, 0] = 0.0  # the first token has no prediction
        adv[i, :L] = advantages[i]
        groups[i, :L] = group_ids[i]
        if decision_masks is not None:
            decision[i, :L] = decision_masks[i]
    stacked = type(vision[0])(*(np.stack(xs) for xs in zip(*vision)))
    return Batch(tokens=tokens, positions=positions, segment_ids=segments, policy_mask=mask,
                 advantages=adv, group_ids=groups,
                 decision_mask=decision if decision_masks is not None else None,
                 image_index=index, vision=stacked)
