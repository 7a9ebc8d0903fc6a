"""The same model on both sides of a speed ratio: teacher-forced float32 log-probs and the
gradient norm, jaxtom against each peer (tunix, transformers), on the same tokens.

A ratio against a peer that runs a different model measures nothing. tunix 0.1.7's Qwen3
and Llama 3 compute RoPE with theta 1e6 whatever `ModelConfig.rope_theta` says (its
`apply_rope` is called without it), so the benchmarks' checkpoints use `rope_theta=1e6`
(`ROPE_THETA`) and every benchmark against a peer prints, and puts in its JSON, the largest
per-token log-prob difference (`logprob_max_abs_diff`) and the relative difference of the
gradient norm of the summed log-probs (`grad_norm_rel_diff`); `check` fails the benchmark
when they exceed float32 agreement (`MAX_LOGPROB_DIFF`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROPE_THETA = 1_000_000.0  # what tunix's Qwen3 / Llama 3 use whatever their config says
MAX_LOGPROB_DIFF = 1e-3  # float32 on both sides: far above rounding, far below a wrong model


def tunix_qwen3(path):
    """tunix's Qwen3 on a Hugging Face directory, read by tunix's own safetensors loader."""
    from tunix.models.qwen3 import model as qwen3_model
    from tunix.models.qwen3 import params as qwen3_params

    hf = _peer_config(path)
    cfg = qwen3_model.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"], rope_theta=int(ROPE_THETA),
        norm_eps=hf["rms_norm_eps"], use_tied_embedding=hf["tie_word_embeddings"])
    return qwen3_params.create_model_from_safe_tensors(str(path), cfg), cfg


def tunix_llama3(path):
    """tunix's Llama 3 on a Hugging Face Llama directory (SmolLM2 converted by
    `save_for_peers`), read by tunix's own safetensors loader."""
    from tunix.models.llama3 import model as llama3_model
    from tunix.models.llama3 import params as llama3_params

    hf = _peer_config(path)
    cfg = llama3_model.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]),
        num_kv_heads=hf["num_key_value_heads"], rope_theta=int(ROPE_THETA),
        norm_eps=hf["rms_norm_eps"], weight_tying=hf["tie_word_embeddings"])
    return llama3_params.create_model_from_safe_tensors(str(path), cfg), cfg


def tunix_model(path):
    """tunix's port of the directory's architecture (Qwen3 or Llama 3)."""
    kind = _peer_config(path)["model_type"]
    if kind == "qwen3":
        return tunix_qwen3(path)
    if kind == "llama":
        return tunix_llama3(path)
    raise ValueError(f"{path}: model_type {kind!r}; tunix peers exist for qwen3 and llama")


def _peer_config(path) -> dict:
    """config.json, checked for the RoPE base tunix computes with."""
    hf = json.loads((Path(path) / "config.json").read_text())
    rope = hf.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", hf.get("rope_theta", 10000)))
    if theta != ROPE_THETA:
        raise ValueError(f"{path}: rope_theta {theta:g}, but tunix 0.1.7 computes RoPE with "
                         f"{ROPE_THETA:g} whatever its config says; write benchmark "
                         f"checkpoints with rope_theta={ROPE_THETA:g}")
    return hf


def save_for_peers(model, path) -> Path:
    """Writes a jaxtom decoder as an HF directory whose RoPE base is `ROPE_THETA` (both
    config keys), so tunix's port, transformers and jaxtom all run the same model."""
    from jaxtom import models

    path = Path(models.save_pretrained(model, path))
    hf = json.loads((path / "config.json").read_text())
    hf["rope_theta"] = ROPE_THETA
    if "rope_parameters" in hf:
        hf["rope_parameters"]["rope_theta"] = ROPE_THETA
    (path / "config.json").write_text(json.dumps(hf, indent=1))
    return path


def _gather(logits, tokens):
    """[B, T-1] log-probs of tokens[:, 1:] from [B, T, V] logits, float32."""
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


def _global_norm(grads) -> float:
    import jax
    import jax.numpy as jnp

    leaves = [x for x in jax.tree.leaves(grads) if jnp.issubdtype(x.dtype, jnp.floating)]
    return float(jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves)))


def jaxtom_side(model, tokens):
    """(log-probs [B, T-1], gradient norm of their sum) of a jaxtom decoder."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    tokens = jnp.asarray(tokens)
    graph, state = nnx.split(model)

    def total(state):
        return jnp.sum(_gather(nnx.merge(graph, state)(tokens), tokens))

    logp = _gather(model(tokens), tokens)
    return np.asarray(logp), _global_norm(jax.grad(total)(state))


def tunix_side(model, tokens):
    """The same for tunix's Qwen3 (causal mask, positions 0..T-1, no cache)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    tokens = jnp.asarray(tokens)
    B, T = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
    graph, state = nnx.split(model)

    def logits(state):
        return nnx.merge(graph, state)(tokens, positions, None, mask)[0]

    logp = _gather(logits(state), tokens)
    grads = jax.grad(lambda s: jnp.sum(_gather(logits(s), tokens)))(state)
    return np.asarray(logp), _global_norm(grads)


def transformers_side(torch_model, tokens):
    """The same for a transformers model (float32, eval mode)."""
    import torch

    torch_model.zero_grad(set_to_none=True)
    ids = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    logits = torch_model(input_ids=ids).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    logp.sum().backward()
    norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in torch_model.parameters()
                          if p.grad is not None))
    torch_model.zero_grad(set_to_none=True)
    return logp.detach().numpy(), float(norm)


def check_ids(vocab: int, rows: int = 4, length: int = 96, seed: int = 7) -> np.ndarray:
    """[rows, length] token ids for the check, drawn from the whole vocabulary: id 0 (the
    pad id of tunix's id tokenizer, which a draw from 1..vocab-1 would never test) every 17
    entries of every row, and the last id of the vocabulary in every row."""
    ids = np.random.default_rng(seed).integers(0, vocab, (rows, length))
    ids[:, 1::17] = 0
    ids[:, 2] = vocab - 1
    return ids


def compare(ours, theirs, peer: str) -> dict:
    """The figures of one comparison, printed, as JSON fields."""
    (a, ga), (b, gb) = ours, theirs
    diff = float(np.max(np.abs(a - b)))
    rel = abs(ga - gb) / max(abs(gb), 1e-30)
    print(f"  same model as {peer}: teacher-forced float32 log-probs differ by at most "
          f"{diff:.1e} per token; gradient norms {ga:.6g} vs {gb:.6g} (relative {rel:.1e})")
    return {"logprob_max_abs_diff": diff, "grad_norm_rel_diff": rel}


def check(figures: dict, peer: str) -> None:
    """Fails the benchmark when the two sides do not run the same model."""
    if not figures["logprob_max_abs_diff"] <= MAX_LOGPROB_DIFF:
        raise SystemExit(f"{peer} runs a different model: log-probs differ by "
                         f"{figures['logprob_max_abs_diff']:.2e} > {MAX_LOGPROB_DIFF:g}; "
                         "the speed ratio would compare different computations")
    if not figures["grad_norm_rel_diff"] <= MAX_LOGPROB_DIFF:
        raise SystemExit(f"{peer}: gradient norms differ by {figures['grad_norm_rel_diff']:.2e} "
                         f"(relative) > {MAX_LOGPROB_DIFF:g}")
