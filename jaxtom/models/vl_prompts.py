"""Image placeholders in Qwen3-VL prompts (the chat template's image items, as text).

Qwen3-VL's chat template writes each image of a message as
`<|vision_start|><|image_pad|><|vision_end|>`, images before the text; the single
`<|image_pad|>` is expanded to the image's token count when the batch is built
(`qwen3_vl.prepare_batch`). These helpers write that text so prompt builders (the CLI, the
MindZero image prompts) need no Jinja.
"""

from __future__ import annotations

IMAGE_PAD, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
IMAGE_PLACEHOLDER = f"{VISION_START}{IMAGE_PAD}{VISION_END}"


def with_image_placeholders(text: str, n_images: int) -> str:
    """`text` with one placeholder per image: kept where it already has them (they must
    number `n_images`), else put in front, where the chat template puts a turn's images."""
    n = text.count(IMAGE_PAD)
    if n == 0:
        return IMAGE_PLACEHOLDER * n_images + text
    if n != n_images:
        raise ValueError(f"the prompt has {n} {IMAGE_PAD} placeholders but {n_images} images "
                         "were given")
    return text


def encode_image_prompt(tokenizer, text: str, n_images: int, image_token_id: int, *,
                        chat: bool = True, system: str | None = None, **options) -> list[int]:
    """Token ids of a prompt with `n_images` images: one user turn (after an optional system
    turn) with the generation prompt when `chat`, else the bare text. Raises if the
    tokenizer does not map `<|image_pad|>` to `image_token_id`."""
    text = with_image_placeholders(text, n_images)
    if chat:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": text}]
        text = tokenizer.apply_chat_template(messages, **options)
    ids = tokenizer.encode(text)
    if sum(t == image_token_id for t in ids) != n_images:
        raise ValueError(f"the tokenizer did not map {IMAGE_PAD} to the model's image token id "
                         f"{image_token_id}")
    return ids
