"""The sampler, between the models and the trainer: batched generation with a KV cache.

`sampler.generate` (prefill + decode, stop strings, resumable caches), its jitted programs
(`loop`), decoding that drops finished rows (`segments`), stop-string automata
(`stop_strings`), the bfloat16 sampling copy of float32 masters (`weights`) and image+text
prefill for Qwen3-VL (`vl`). It imports `jaxtom.models` and nothing above it.
"""
