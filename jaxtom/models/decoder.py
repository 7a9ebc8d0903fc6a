"""One Flax NNX decoder for the Llama 3 family and Qwen3.

Layer parameters are stacked on a leading `layers` axis and the full forward pass is a
`lax.scan` over them, so a 30-layer model compiles as fast as a 1-layer one. The cached
(sampling) forward instead unrolls the layers over per-layer weights and caches: inside a
decode loop a scan re-copies every layer's weights and cache slice on every step, which
costs more than the whole step's arithmetic at small sizes. Parameter names follow Hugging
Face so that loading and saving are a transpose, not a translation table.

Training memory: given a mesh, the full forward pins its [B, T, ...] activations (hidden
states, logits) to the mesh's batch axes, so each device computes only its own rows; without
the constraint XLA may compute parts of the forward (the LM head's logits among them) for a
whole micro-batch on every fsdp device. `ModelConfig.remat` then decides whether each layer's
activations are kept for the backward pass or recomputed there (`jax.checkpoint`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom import parallel
from jaxtom.models import blockwise
from jaxtom.models.attention import attention, causal_attention
from jaxtom.models.config import ModelConfig

# The full (training / scoring) forward unrolls models up to this many layers and scans deeper
# ones. On CPU the scan's backward pass copies each layer's weights and activations in and out
# of the stacked buffers, which dominates small models' steps; unrolled, a deep model's train
# step compiles several times slower for a slightly faster step, so deep models scan.
UNROLL_MAX_LAYERS = 8

# Logical axes of the training forward's activations (mapped to mesh axes by the rule table).
HIDDEN_AXES = ("batch", "seq", "embed")
LOGITS_AXES = ("batch", "seq", "vocab")


def constrain(x: jax.Array, axes, mesh=None, rules: dict | None = None) -> jax.Array:
    """Pins `x`'s sharding to logical `axes` on `mesh`; a no-op without a mesh or on one
    device. Axes that do not divide a dimension are dropped (odd micro-batches replicate)."""
    if mesh is None or mesh.size == 1:
        return x
    return jax.lax.with_sharding_constraint(
        x, parallel.named_sharding(mesh, axes, x.shape, rules))


def uses_remat(cfg: ModelConfig) -> bool:
    """Whether the training forward rematerialises its layers (see `ModelConfig.remat`)."""
    if cfg.remat == "auto":
        return cfg.num_layers > UNROLL_MAX_LAYERS
    return cfg.remat == "layer"


# name -> (logical axes without the layer axis, HF tensor is [out, in] so we transpose)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def linear_axes(name: str) -> tuple[str, str]:
    return {"q_proj": ("embed", "q_heads"), "k_proj": ("embed", "kv_heads"),
            "v_proj": ("embed", "kv_heads"), "o_proj": ("q_heads", "embed"),
            "gate_proj": ("embed", "mlp"), "up_proj": ("embed", "mlp"),
            "down_proj": ("mlp", "embed")}[name]


def linear_shape(cfg: ModelConfig, name: str) -> tuple[int, int]:
    d, f = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}[name]


class KVCache(NamedTuple):
    """Keys and values for every layer: [layers, batch, kv_heads, max_len, head_dim].

    Heads before slots, so that attention reads each (row, head) block of the cache as one
    contiguous matrix instead of transposing the whole cache on every step.
    """
    k: jax.Array
    v: jax.Array

    @classmethod
    def zeros(cls, cfg: ModelConfig, batch: int, max_len: int) -> "KVCache":
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
        dtype = jnp.dtype(cfg.compute_dtype)
        return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


CACHE_AXES = ("layers", "batch", "kv_heads", "cache_seq", "head_dim")
CACHE_SEQ_AXIS = 3  # slots axis of KVCache.k / .v


def _param(rngs, shape, axes, dtype, init="normal", scale=0.02):
    if init == "ones":
        value = jnp.ones(shape, dtype)
    elif init == "zeros":
        value = jnp.zeros(shape, dtype)
    else:
        value = (scale * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)
    return nnx.Param(value, logical_axes=tuple(axes))


class DecoderLayers(nnx.Module):
    """All transformer blocks, each parameter stacked over a leading layer axis."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        L, dt = cfg.num_layers, jnp.dtype(cfg.param_dtype)
        for name in LINEARS:
            setattr(self, name, _param(rngs, (L, *linear_shape(cfg, name)),
                                       ("layers", *linear_axes(name)), dt,
                                       scale=cfg.initializer_range))
        if cfg.attention_bias:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                shape = (L, linear_shape(cfg, name)[1])
                setattr(self, name + "_bias", _param(rngs, shape, ("layers", linear_axes(name)[1]),
                                                     dt, "zeros"))
        for name in ("input_layernorm", "post_attention_layernorm"):
            setattr(self, name, _param(rngs, (L, cfg.hidden_size), ("layers", "norm"), dt, "ones"))
        if cfg.qk_norm:
            for name in ("q_norm", "k_norm"):
                setattr(self, name, _param(rngs, (L, cfg.head_dim), ("layers", "head_dim"), dt,
                                           "ones"))
        self.lora_scale: tuple[tuple[str, float], ...] = ()  # hashable: part of the graphdef

    def arrays(self) -> dict[str, jax.Array]:
        """Plain arrays of every (base and LoRA) parameter, for the layer scan."""
        return {k: v[...] for k, v in vars(self).items() if isinstance(v, nnx.Variable)}


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse RoPE frequencies, with llama3 long-context scaling when configured."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if cfg.rope_llama3 is not None:
        factor, low, high, orig = cfg.rope_llama3
        wavelen = 2 * np.pi / inv
        low_wavelen, high_wavelen = orig / low, orig / high
        smooth = (orig / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = np.where(wavelen > low_wavelen, inv / factor,
                       np.where(wavelen < high_wavelen, inv, mid))
    return inv.astype(np.float32)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm in float32, cast back before the weight (as Hugging Face does)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight.astype(x.dtype) * y.astype(x.dtype)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate-half RoPE; x [B, T, heads, hd], cos/sin [B, T, hd/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, :, None, :].astype(x.dtype), sin[:, :, None, :].astype(x.dtype)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _linear(p: dict, name: str, x: jax.Array, lora_scale: dict) -> jax.Array:
    y = x @ p[name].astype(x.dtype)
    if name + "_bias" in p:
        y = y + p[name + "_bias"].astype(x.dtype)
    if name + "_lora_a" in p:
        a, b = p[name + "_lora_a"].astype(x.dtype), p[name + "_lora_b"].astype(x.dtype)
        y = y + (x @ a) @ b * lora_scale[name]
    return y


def layer_forward(p, h, cos, sin, cfg: ModelConfig, lora_scale, kv_write,
                  heads_first: bool = False, row_causal: bool = False, attend=None):
    """One block. `kv_write(k, v)` stores the new keys/values and returns (keys, values, mask);
    `heads_first` says the keys/values it returns are [B,K,S,hd] rather than [B,S,K,hd];
    `row_causal` that the mask lets no query see a key after it in the row (the training
    forward's), so attention skips those blocks (`causal_attention`); `attend(q, keys,
    values)`, when given, attends instead of the dense paths (it knows its own mask)."""
    B, T, _ = h.shape
    # the named scopes label the compiled ops (profiles split a step by them; no effect on
    # what is computed)
    with jax.named_scope("qkv"):
        x = rms_norm(h, p["input_layernorm"], cfg.rms_norm_eps)
        q = _linear(p, "q_proj", x, lora_scale).reshape(B, T, cfg.num_heads, cfg.head_dim)
        k = _linear(p, "k_proj", x, lora_scale).reshape(B, T, cfg.num_kv_heads, cfg.head_dim)
        v = _linear(p, "v_proj", x, lora_scale).reshape(B, T, cfg.num_kv_heads, cfg.head_dim)
        if cfg.qk_norm:
            q = rms_norm(q, p["q_norm"], cfg.rms_norm_eps)
            k = rms_norm(k, p["k_norm"], cfg.rms_norm_eps)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    keys, values, mask = kv_write(k, v)
    with jax.named_scope("attention"):
        if attend is not None:
            attn = attend(q, keys, values)
        elif row_causal and not heads_first:
            attn = causal_attention(q, keys, values, mask, cfg)
        else:
            attn = attention(q, keys, values, mask, cfg, heads_first)
    with jax.named_scope("o_proj"):
        h = h + _linear(p, "o_proj", attn, lora_scale)
    with jax.named_scope("mlp"):
        x = rms_norm(h, p["post_attention_layernorm"], cfg.rms_norm_eps)
        gate = jax.nn.silu(_linear(p, "gate_proj", x, lora_scale))
        return h + _linear(p, "down_proj", gate * _linear(p, "up_proj", x, lora_scale),
                           lora_scale)


def _write_rows(cache: jax.Array, new: jax.Array, starts: jax.Array) -> jax.Array:
    """Writes new keys/values [B, T, K, hd] into one layer's cache [B, K, S, hd] at starts[b]."""
    new = jnp.swapaxes(new, 1, 2).astype(cache.dtype)
    return jax.vmap(lambda c, u, s: jax.lax.dynamic_update_slice_in_dim(c, u, s, 1))(
        cache, new, starts)


def token_inputs(input_ids, positions=None) -> tuple[jax.Array, jax.Array]:
    """(input_ids [B, T], positions): a clear error for ids of another rank; positions default
    to 0 .. T-1 in every row (unpacked sequences)."""
    input_ids = jnp.asarray(input_ids)
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {input_ids.shape}")
    if positions is None:
        B, T = input_ids.shape
        positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    return input_ids, jnp.asarray(positions)


class Decoder(nnx.Module):
    """Causal LM: `model(input_ids)` -> float32 logits [batch, seq, vocab]."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        dt = jnp.dtype(cfg.param_dtype)
        self.embed_tokens = _param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), dt,
                                   scale=cfg.initializer_range)
        self.layers = DecoderLayers(cfg, rngs)
        self.norm = _param(rngs, (cfg.hidden_size,), ("norm",), dt, "ones")
        if not cfg.tie_word_embeddings:
            self.lm_head = _param(rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), dt,
                                  scale=cfg.initializer_range)

    def _rope(self, positions):
        angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(rope_inv_freq(self.config))
        return jnp.cos(angles), jnp.sin(angles)

    def _embed(self, tokens):
        return jnp.take(self.embed_tokens[...], tokens, axis=0).astype(self.config.compute_dtype)

    def head_weight(self) -> tuple[jax.Array, int]:
        """The LM head's weight and its vocabulary axis: the tied embedding [V, D] (axis 0)
        or lm_head [D, V] (axis 1). Logits are `final_hidden @ head` in the compute dtype."""
        if self.config.tie_word_embeddings:
            return self.embed_tokens[...], 0
        return self.lm_head[...], 1

    @property
    def text_decoder(self) -> "Decoder":
        """The language model itself (`Qwen3VL.text_decoder` is its language model)."""
        return self

    vision_params = nnx.Nothing  # no vision tower

    def _logits(self, h):
        cfg = self.config
        h = rms_norm(h, self.norm[...], cfg.rms_norm_eps)
        head = self.embed_tokens[...].T if cfg.tie_word_embeddings else self.lm_head[...]
        return (h @ head.astype(h.dtype)).astype(jnp.float32)

    def __call__(self, input_ids: jax.Array, positions: jax.Array | None = None,
                 segment_ids: jax.Array | None = None, *, mesh=None,
                 rules: dict | None = None, return_hidden: bool = False,
                 parent_ids: jax.Array | None = None) -> jax.Array:
        """Full causal forward without a cache (training, scoring).

        `segment_ids` [B, T] keep packed sequences from attending to each other;
        `parent_ids` [B, T] (with them) name one more segment each token may read: a prompt
        shared by the completions packed after it (`jaxtom.rl.batch.pack_shared_prompts`;
        a token's own segment where there is none). A token sees the tokens before it in the
        row whose positions are not after its own (packed rows keep each sequence in order, and
        a shared prompt before its completions). `mesh`
        (and the logical-axis `rules`, default `parallel.DEFAULT_RULES`): shard activations
        over its batch axes (rows arriving sharded otherwise are resharded to them). Each layer is
        rematerialised in the backward pass when `uses_remat(config)`. `return_hidden`: the
        final normed hidden states [B, T, D] instead of the logits, for losses that apply the
        head themselves (`head_weight`) without forming [B, T, V].
        """
        cfg = self.config
        input_ids, positions = token_inputs(input_ids, positions)
        cos, sin = self._rope(positions)
        if parent_ids is not None and segment_ids is None:
            raise ValueError("parent_ids need segment_ids: they name a segment to read")
        meta = blockwise.token_meta(positions, segment_ids, parent_ids)
        if cfg.blockwise_attention(input_ids.shape[1]):
            mask = None  # never formed: each block pair's mask is rebuilt from `meta`
            attend = functools.partial(blockwise.blockwise_attention, meta=meta,
                                       num_kv_heads=cfg.num_kv_heads, block=cfg.attention_block)
        else:
            mask, attend = blockwise.visible(meta, meta), None
        lora_scale = dict(self.layers.lora_scale)
        scanned = cfg.num_layers > UNROLL_MAX_LAYERS

        def block(h, p):
            h = layer_forward(p, h, cos, sin, cfg, lora_scale, lambda k, v: (k, v, mask),
                              row_causal=True, attend=attend)
            return constrain(h, HIDDEN_AXES, mesh, rules)

        if uses_remat(cfg):
            # keep only the block's input; recompute everything inside it in the backward.
            # prevent_cse only matters outside a scan (where XLA could merge the recompute
            # with the forward); inside one it would only block optimisations.
            block = jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable,
                                   prevent_cse=not scanned)
        h = constrain(self._embed(input_ids), HIDDEN_AXES, mesh, rules)
        if not scanned:
            for p in self.layer_arrays():
                h = block(h, p)
        else:
            h, _ = jax.lax.scan(lambda h, p: (block(h, p), None), h, self.layers.arrays())
        if return_hidden:
            return constrain(rms_norm(h, self.norm[...], cfg.rms_norm_eps), HIDDEN_AXES, mesh,
                             rules)
        return constrain(self._logits(h), LOGITS_AXES, mesh, rules)

    def layer_arrays(self) -> list[dict[str, jax.Array]]:
        """Each layer's parameters as separate arrays (slice once, outside any decode loop)."""
        arrays = self.layers.arrays()
        return [{k: v[i] for k, v in arrays.items()} for i in range(self.config.num_layers)]

    def forward_cached(self, tokens: jax.Array, cache: KVCache, starts: jax.Array,
                       last: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
        """Runs `tokens` [B, T] at per-row cache offsets `starts` [B]; returns logits, cache.

        Row b's tokens occupy cache slots starts[b] .. starts[b]+T-1 and see every slot at or
        before their own position, so prefill, decode and resumption are the same call. The
        layers run as a scan (cheap to compile); a decode loop should use
        `forward_layers_cached` instead. `last` [B]: the one entry per row whose logits are
        wanted (a prefill needs only each row's last); the logits are then [B, 1, V] and the
        LM head runs on those B rows only (it is a fifth of a SmolLM2 prefill's work).
        """
        cfg = self.config
        B, T = tokens.shape
        S = cache.k.shape[CACHE_SEQ_AXIS]
        positions = starts[:, None] + jnp.arange(T)[None, :]
        cos, sin = self._rope(positions)
        mask = jnp.arange(S)[None, None, :] <= positions[:, :, None]
        attend = self._cache_attend(positions, S) if cfg.blockwise_attention(T) else None
        lora_scale = dict(self.layers.lora_scale)

        def body(carry, xs):
            h, ck, cv = carry
            p, i = xs

            def kv_write(k, v):
                lk = _write_rows(ck[i], k, starts)
                lv = _write_rows(cv[i], v, starts)
                kv_write.out = (lk, lv)
                return lk.astype(k.dtype), lv.astype(v.dtype), mask

            h = layer_forward(p, h, cos, sin, cfg, lora_scale, kv_write, heads_first=True,
                              attend=attend)
            lk, lv = kv_write.out
            ck = jax.lax.dynamic_update_index_in_dim(ck, lk, i, 0)
            cv = jax.lax.dynamic_update_index_in_dim(cv, lv, i, 0)
            return (h, ck, cv), None

        xs = (self.layers.arrays(), jnp.arange(cfg.num_layers))
        (h, ck, cv), _ = jax.lax.scan(body, (self._embed(tokens), cache.k, cache.v), xs)
        if last is not None:
            h = jnp.take_along_axis(h, jnp.asarray(last)[:, None, None], axis=1)
        return self._logits(h), KVCache(ck, cv)

    def _cache_attend(self, positions, slots: int):
        """Blockwise attention of a long prefill's queries (at `positions`) over the cache's
        slots: each query sees the slots at or before its position (the dense mask above),
        so prefill memory does not grow with rows x prompt x cache slots."""
        cfg = self.config
        zeros = jnp.zeros_like(positions)
        queries = blockwise.TokenMeta(positions, positions, zeros, zeros)
        index = jnp.broadcast_to(jnp.arange(slots, dtype=positions.dtype),
                                 (positions.shape[0], slots))
        none = jnp.zeros_like(index)
        keys = blockwise.TokenMeta(index, index, none, none)

        def attend(q, k, v):  # k/v: the cache's [B, K, S, hd]
            return blockwise.blockwise_attention(
                q, jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), queries, cfg.num_kv_heads,
                cfg.attention_block, key_meta=keys)

        return attend

    def forward_layers_cached(self, tokens, keys, values, starts, layers):
        """`forward_cached` on per-layer caches and weights: (logits, keys, values).

        `keys`/`values` are sequences of [B, K, S, hd] arrays and `layers` is `layer_arrays()`.
        The layer loop is unrolled: a decode loop that carries per-layer arrays updates each
        cache in place and never copies weights out of the layer stack.
        """
        cfg = self.config
        B, T = tokens.shape
        S = keys[0].shape[2]
        positions = starts[:, None] + jnp.arange(T)[None, :]
        cos, sin = self._rope(positions)
        mask = jnp.arange(S)[None, None, :] <= positions[:, :, None]
        lora_scale = dict(self.layers.lora_scale)
        h = self._embed(tokens)
        keys, values = list(keys), list(values)
        for i, p in enumerate(layers):
            def kv_write(k, v, i=i):
                keys[i] = _write_rows(keys[i], k, starts)
                values[i] = _write_rows(values[i], v, starts)
                return keys[i].astype(k.dtype), values[i].astype(v.dtype), mask

            h = layer_forward(p, h, cos, sin, cfg, lora_scale, kv_write, heads_first=True)
        return self._logits(h), keys, values


def init_decoder(cfg: ModelConfig, seed: int = 0, mesh=None) -> Decoder:
    """A randomly initialised decoder (tests, benchmarks, training from scratch), created
    sharded over `mesh` when given."""
    return parallel.init_sharded(lambda: Decoder(cfg, rngs=nnx.Rngs(seed)), mesh)
