"""`jaxtom generate MODEL --image PATH [--image PATH ...] --prompt TEXT` for Qwen3-VL.

Images fill the prompt's `<|image_pad|>` placeholders in order; a prompt without any gets one
`<|vision_start|><|image_pad|><|vision_end|>` per image in front of its text, where Qwen3-VL's
chat template puts the images of a user turn (`--chat` then wraps it as that turn); see
`vl_prompts`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path


def load_images(paths) -> list:
    from PIL import Image

    images = []
    for p in paths:
        if not Path(p).is_file():
            raise SystemExit(f"--image {p}: no such file")
        with Image.open(p) as im:
            images.append(im.convert("RGB"))
    return images


def run_vl(args: argparse.Namespace, model, tokenizer) -> int:
    import jax
    import numpy as np
    from flax import nnx

    from jaxtom import flops
    from jaxtom.sampling import vl as vl_sampling
    from jaxtom.models.image_processing import smart_resize
    from jaxtom.models.vl_prompts import encode_image_prompt

    cfg = model.config
    images = load_images(args.image or [])
    if args.ids is not None:
        prompt = [int(t) for t in args.ids.split(",")]
    else:
        if tokenizer is None:
            raise SystemExit(f"no tokenizer found next to {args.model}; pass --tokenizer or "
                             "--ids")
        options = {"enable_thinking": False} if args.no_think else {}
        try:
            prompt = encode_image_prompt(tokenizer, args.prompt, len(images),
                                         cfg.image_token_id, chat=args.chat, **options)
        except ValueError as err:
            raise SystemExit(str(err)) from None
    stop = list(args.stop) + (list(tokenizer.eos_token_ids) if tokenizer else [])
    start = time.perf_counter()
    try:
        result = vl_sampling.generate(
            model, [prompt], [images], max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, stop=stop,
            key=jax.random.key(args.seed), tokenizer=tokenizer)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    seconds = time.perf_counter() - start
    tokens = result.sequences()[0]
    text = result.texts[0] if result.texts else None
    n_tok = len(prompt) + len(tokens)
    vision_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(
        nnx.state(model.visual, nnx.Param)))
    n_patches = sum(math.prod(smart_resize(im.size[1], im.size[0], cfg.vision.patch_size
                                           * cfg.vision.spatial_merge_size))
                    for im in images) // cfg.vision.patch_size ** 2
    report = {"tokens": tokens, "text": text, "finished": bool(result.finished[0]),
              "logprobs": [round(float(x), 5) for x in result.logprobs[0][:len(tokens)]],
              "seconds": round(seconds, 3),
              "tflops": flops.inference_tflops(flops.active_params(model.language_model), n_tok)
              + flops.inference_tflops(vision_params, n_patches)}
    if args.json:
        print(json.dumps(report))
    else:
        print(text if text is not None else " ".join(map(str, tokens)))
    return 0
