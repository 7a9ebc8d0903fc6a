"""Host-side image preprocessing for Qwen3-VL (NumPy + PIL), and the vision tower's inputs.

Matches transformers' PIL image processor for Qwen3-VL (`Qwen2VLImageProcessorPil` with
Qwen3-VL's settings) bit for bit: resize with PIL bicubic to `smart_resize` sizes (multiples of
patch x merge = 32), rescale by 1/255 in float64 then float32, normalise with mean = std = 0.5
in float32, and flatten patches in 2x2-merge-block order. A 500x500 gridworld picture becomes
512x512 -> 32x32 patches -> 256 LLM tokens.

Everything data-dependent (resampling taps of the position table, rotary coordinates, padding
masks) is computed here, so the jitted tower sees only fixed shapes: images are padded to a
common patch count (bucketed), which bounds the number of compiled programs.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
from PIL import Image

from jaxtom.models.vl_config import VisionConfig

# Qwen3-VL's preprocessor_config.json
IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)
# size.shortest_edge and size.longest_edge (pixel counts, despite the names): VisionConfig's
# defaults
MIN_PIXELS = VisionConfig.min_pixels
MAX_PIXELS = VisionConfig.max_pixels


def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(height, width) rounded to multiples of `factor` with the pixel count kept within
    [min_pixels, max_pixels] and the aspect ratio as close as it allows."""
    if min(height, width) <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"absolute aspect ratio must be at most 200, got {height}x{width}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def as_rgb_uint8(image) -> np.ndarray:
    """A PIL image or a uint8 [H, W, 3] array (e.g. `gridworld.render_rgb`) as uint8 HWC."""

    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"image must be a PIL image or uint8 [height, width, 3], got "
                         f"{array.dtype} {array.shape}")
    return array


def preprocess_image(image, cfg: VisionConfig, *, min_pixels: int | None = None,
                     max_pixels: int | None = None) -> tuple[np.ndarray, tuple[int, int, int]]:
    """One image -> (flattened patches [h*w, patch_dim] float32, grid (1, h, w) in patches),
    resized into [min_pixels, max_pixels] (default: the config's range).

    Patches come in merge-block order (block row, block col, row in block, col in block), the
    order the tower's 2x2 merger and the text's image tokens expect.
    """

    rgb = as_rgb_uint8(image)
    m, p = cfg.spatial_merge_size, cfg.patch_size
    height, width = smart_resize(rgb.shape[0], rgb.shape[1], p * m,
                                 cfg.min_pixels if min_pixels is None else min_pixels,
                                 cfg.max_pixels if max_pixels is None else max_pixels)
    resized = np.asarray(Image.fromarray(rgb).resize((width, height), resample=Image.BICUBIC))
    pixels = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean = np.asarray(IMAGE_MEAN, np.float32)
    std = np.asarray(IMAGE_STD, np.float32)
    pixels = ((pixels - mean) / std).transpose(2, 0, 1)  # [C, H, W]
    gh, gw = height // p, width // p
    c = pixels.shape[0]
    patches = pixels.reshape(c, gh // m, m, p, gw // m, m, p).transpose(1, 4, 2, 5, 0, 3, 6)
    # still images repeat along the temporal patch axis (a 2-frame "video" of one frame)
    patches = np.broadcast_to(patches[:, :, :, :, :, None],
                              (*patches.shape[:5], cfg.temporal_patch_size, p, p))
    return np.ascontiguousarray(patches.reshape(gh * gw, -1)), (1, gh, gw)


def num_image_tokens(grid: Sequence[int], cfg: VisionConfig) -> int:
    """LLM tokens of one image: its patches over the 2x2 merge."""
    t, h, w = map(int, grid)
    return t * h * w // cfg.merge_unit


class VisionInputs(NamedTuple):
    """The vision tower's inputs for `I` images padded to `P` patches each (host-built).

    Padded patches are masked out of attention and their merged tokens are never read.
    """
    patches: np.ndarray  # [I, P, patch_dim] float32
    valid: np.ndarray  # [I, P] bool: a real patch
    pos_index: np.ndarray  # [I, P, 4] int32: taps into the learned position table
    pos_weight: np.ndarray  # [I, P, 4] float32: their bilinear (align-corners) weights
    rot_pos: np.ndarray  # [I, P, 2] int32: (row, col) of each patch for the 2-D rotary


def _axis_taps(index: np.ndarray, size: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear, align-corners taps of a `side`-long table for positions 0..size-1."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(src)
    taps = np.clip(floor.astype(np.int64)[:, None] + np.arange(2), 0, side - 1)
    weights = np.clip(1 - np.abs(src[:, None] - floor[:, None] - np.arange(2)), 0, None)
    return taps, weights.astype(np.float32)


def patch_coordinates(grid: Sequence[int], merge: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of every patch of one image, in merge-block order."""
    t, h, w = map(int, grid)
    within = np.arange(h * w)
    in_col, in_row = within % merge, (within // merge) % merge
    block_col = (within // (merge * merge)) % (w // merge)
    block_row = within // (merge * merge * (w // merge))
    row, col = block_row * merge + in_row, block_col * merge + in_col
    return np.tile(row, t), np.tile(col, t)


def vision_inputs(images: Sequence[tuple[np.ndarray, Sequence[int]]], cfg: VisionConfig,
                  num_patches: int | None = None, num_images: int | None = None
                  ) -> VisionInputs:
    """Packs preprocessed images (`preprocess_image` outputs) into padded `VisionInputs`.

    `num_patches` (default: the largest image) is the padded patch count P and `num_images`
    (default: as many as given) the padded image count I; pass buckets to share one compiled
    program between image sizes and counts. Padding images have no valid patch.
    """
    if not images:
        raise ValueError("vision_inputs needs at least one image")
    counts = [int(np.prod(g)) for _, g in images]
    P = max(counts) if num_patches is None else int(num_patches)
    if P < max(counts) or P % cfg.merge_unit:
        raise ValueError(f"num_patches={P} must be >= the largest image ({max(counts)} patches) "
                         f"and a multiple of {cfg.merge_unit}")
    n = len(images) if num_images is None else int(num_images)
    if n < len(images):
        raise ValueError(f"num_images={n} is fewer than the {len(images)} images given")
    side, m = cfg.grid_side, cfg.spatial_merge_size
    out = VisionInputs(patches=np.zeros((n, P, cfg.patch_dim), np.float32),
                       valid=np.zeros((n, P), bool), pos_index=np.zeros((n, P, 4), np.int32),
                       pos_weight=np.zeros((n, P, 4), np.float32),
                       rot_pos=np.zeros((n, P, 2), np.int32))
    for i, ((patches, grid), count) in enumerate(zip(images, counts)):
        if patches.shape != (count, cfg.patch_dim):
            raise ValueError(f"image {i}: patches of shape {patches.shape} do not match grid "
                             f"{tuple(grid)} and patch_dim {cfg.patch_dim}")
        _, h, w = map(int, grid)
        if h % m or w % m:
            raise ValueError(f"image {i}: grid {tuple(grid)} is not a multiple of the merge "
                             f"size {m}")
        row, col = patch_coordinates(grid, m)
        h_taps, h_w = _axis_taps(row, h, side)
        w_taps, w_w = _axis_taps(col, w, side)
        out.patches[i, :count] = patches
        out.valid[i, :count] = True
        out.pos_index[i, :count] = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, 4)
        out.pos_weight[i, :count] = (h_w[:, :, None] * w_w[:, None, :]).reshape(-1, 4)
        out.rot_pos[i, :count] = np.stack([row, col], -1)
    return out
