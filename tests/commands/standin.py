"""A tiny random stand-in for a config's real checkpoint: a 2-layer Qwen3 saved as an HF
directory (config.json + safetensors) with a byte-level BPE `tokenizer.json` carrying the
ChatML specials, trained (without a word split) on the project's own prompts so a
paper-length prompt stays a few hundred tokens. Lets every config run its real code path without downloading weights."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer, decoders, models as tm, pre_tokenizers, trainers


def _corpus() -> list[str]:
    import jax
    from jaxtom.ctom.data import builtin_tasks
    from jaxtom.ctom.prompts import BASELINE_PROMPTS, SIMULATOR_PROMPTS, system_prompt
    from jaxtom.gridworld import EnvParams, generate_episodes
    from jaxtom.mindzero.observation import HostEpisodes, get_observation
    texts = list(SIMULATOR_PROMPTS.values()) + list(BASELINE_PROMPTS.values())
    texts += [system_prompt(d, categorical=c) for d in ("math", "coding", "writing")
              for c in (True, False)]
    for domain in ("math", "coding", "writing"):
        texts += [t.prompt + " " + t.hidden for t in builtin_tasks(domain)]
    view = HostEpisodes.from_episodes(generate_episodes(jax.random.key(0), EnvParams(), 4))
    render = get_observation("figure")
    texts += [render(view, e, t, 2) for e in range(4) for t in (1, 5, 10)]
    return texts


def write_standin(path: str | Path, vocab_size: int = 4096, family: str = "qwen3") -> Path:
    """The stand-in as `family`'s architecture ("qwen3": q/k norm; "llama": none)."""
    from jaxtom.models import init_decoder, save_pretrained
    from jaxtom.models.config import ModelConfig
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    bpe = HFTokenizer(tm.BPE())
    # no regex split: merges cross word boundaries, so the long system prompts collapse
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(_corpus(), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bpe.save(str(path / "tokenizer.json"))
    eos = (bpe.token_to_id("<|im_end|>"), bpe.token_to_id("<|endoftext|>"))
    cfg = ModelConfig(family=family, vocab_size=bpe.get_vocab_size(), hidden_size=32,
                      intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      head_dim=8, qk_norm=family == "qwen3", max_position_embeddings=32768,
                      eos_token_ids=eos)
    save_pretrained(init_decoder(cfg, seed=0), path)
    return path


def write_vl_standin(path: str | Path, vocab_size: int = 4096) -> Path:
    """The stand-in for a Qwen3-VL checkpoint (the `qwen3vl` paper configs): a tiny random
    Qwen3-VL (2 text layers, a 2-block vision tower) saved as an HF directory, with the BPE
    of `write_standin` trained also on the image prompts and carrying the vision specials."""
    import jax
    from jaxtom.gridworld import EnvParams, generate_episodes
    from jaxtom.mindzero.observation import HostEpisodes, get_observation
    from jaxtom.models import init_qwen3_vl, save_pretrained
    from jaxtom.models.config import ModelConfig
    from jaxtom.models.vl_config import VisionConfig, VLConfig
    from jaxtom.models.vl_prompts import IMAGE_PAD, VISION_END, VISION_START
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    view = HostEpisodes.from_episodes(generate_episodes(jax.random.key(0), EnvParams(), 4))
    render = get_observation("image")
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", VISION_START, IMAGE_PAD,
                VISION_END]
    bpe = HFTokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        _corpus() + [render(view, e, t, 2) for e in range(4) for t in (1, 5, 10)],
        trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                            show_progress=False))
    bpe.save(str(path / "tokenizer.json"))
    ids = {s: bpe.token_to_id(s) for s in specials}
    text = ModelConfig(family="qwen3", vocab_size=bpe.get_vocab_size(), hidden_size=32,
                       intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=8, qk_norm=True, max_position_embeddings=32768,
                       eos_token_ids=(ids["<|im_end|>"], ids["<|endoftext|>"]))
    vision = VisionConfig(depth=2, hidden_size=16, intermediate_size=32, num_heads=2,
                          out_hidden_size=32, num_position_embeddings=64,
                          deepstack_visual_indexes=(0, 1))
    cfg = VLConfig(text=text, vision=vision, image_token_id=ids[IMAGE_PAD],
                   vision_start_token_id=ids[VISION_START], vision_end_token_id=ids[VISION_END],
                   mrope_section=(2, 1, 1))
    save_pretrained(init_qwen3_vl(cfg, seed=0), path)
    return path
