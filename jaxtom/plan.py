"""Memory and FLOPs of a config before renting (`jaxtom plan`, `jaxtom.commands.plan`).

The plan compiles the config's real GRPO update step (`jaxtom.rl.step.Learner`, with its own
state and batch shardings) and the rollout sampler's prefill + decode (`jaxtom.sampling`)
ahead of time on simulated CPU devices arranged like the config's mesh. Parameters are
shape-only (`nnx.eval_shape` from the model's `config.json`): no weights are read and no array
is allocated, so an 8B model's step plans on a laptop. XLA's buffer assignment then says what
one device holds; the parameter, optimiser and gradient figures are computed from the same
shardings, so the two can be checked against each other. The rollout is planned as it runs on
any number of processes: one SPMD sampler call over the global mesh on the train state's own
(sharded) params, so it adds only its KV cache and its programs' temporaries; `--processes P`
(a run over P hosts) sets how many rows a call samples (`trainer.rollout_rows` per process).
`resident_terms` lists what stays resident at each named point of a run (after loading, after
`init_state`, during a rollout, after an update); tests/test_plan_memory.py measures them.

What it is not: XLA on CPU fuses and schedules differently from XLA on GPU/TPU, and bf16 dots
may get f32 temporaries on CPU, so the temporaries are an estimate that can differ either
way on the real chip, not a measurement. FLOPs are counted analytically from the model's
shapes because XLA's cost analysis counts a scanned loop's body once (36 layers count as 1);
XLA's own count is reported beside them under a name that says so.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import time
from typing import Any

GB = 1e9
GIB = 1024 ** 3
# Nominal per-chip memory as the vendors quote it, in units of 1e9 bytes. The real usable
# capacity is slightly larger for all four (e.g. an H100 reports ~79.6 GiB = 85.5e9 bytes),
# so these are conservative.
ACCELERATORS: dict[str, float] = {"H100-80GB": 80 * GB, "H200-141GB": 141 * GB,
                                  "v5p-95GB": 95 * GB, "v6e-32GB": 32 * GB}
DEFAULT_HEADROOM = 0.9  # plan to fill at most this fraction of a chip (runtime, fragmentation)


class PlanError(ValueError):
    """A plan cannot be made for this config (what is wrong is in the message)."""


# ---- sizes --------------------------------------------------------------------------------
def mesh_sizes(mesh_section, devices: int | None) -> tuple[int, int, int]:
    """(data, fsdp, tensor) with a -1 axis resolved from `devices`."""
    sizes = [mesh_section.data, mesh_section.fsdp, mesh_section.tensor]
    if -1 in sizes:
        if devices is None:
            raise PlanError(f"mesh (data, fsdp, tensor)={tuple(sizes)} has a -1 axis; say how "
                            "many devices to plan for with --devices N")
        known = math.prod(s for s in sizes if s != -1)
        if devices % known:
            raise PlanError(f"--devices {devices} is not a multiple of {known}, the product "
                            f"of the mesh's fixed axes {tuple(sizes)}")
        sizes[sizes.index(-1)] = devices // known
    elif devices is not None and devices != math.prod(sizes):
        raise PlanError(f"--devices {devices} disagrees with the config's mesh "
                        f"{tuple(sizes)} ({math.prod(sizes)} devices); drop --devices or "
                        "override mesh.*")
    return tuple(sizes)


def rollout_rows(config) -> int:
    """Rows of one rollout's update batch before padding: `trainer.num_rows`, or one
    sequence per row (prompts_per_step x group_size) when it is 0."""
    t = config.trainer
    return t.num_rows or t.prompts_per_step * t.group_size


def padded_rows(rows: int, learner) -> int:
    """`rows` padded as the update pads them (`Learner.padded_rows`: a multiple of data x
    fsdp x ppo_mini_batches); padding rows compute like real ones."""
    return learner.padded_rows(rows)


def model_config(model_section):
    """The decoder's ModelConfig from `<model.path>/config.json` (or the config's own sizes);
    a `VLConfig` (text decoder + vision tower) for a Qwen3-VL config.json."""
    from pathlib import Path

    from jaxtom import config as jaxtom_config
    from jaxtom.config import ConfigError
    from jaxtom.models.config import load_hf_config

    param, compute = model_section.param_dtype, model_section.compute_dtype
    m = model_section
    path = jaxtom_config.resolve_model_path(m.path) if m.path else ""
    if not path:
        return m.random_model_config()
    path = Path(path)
    if path.suffix == ".gguf":
        import gguf

        from jaxtom.models.gguf_io import gguf_config
        return gguf_config(gguf.GGUFReader(str(path)), dtype=param, compute_dtype=compute)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError("model.path", "a Hugging Face directory holding config.json (only "
                          "config.json is read)", m.path)
    try:
        from jaxtom.models.vl_config import is_vl_dict, load_vl_config
        if is_vl_dict(json.loads(file.read_text())):
            return load_vl_config(file, dtype=param, compute_dtype=compute)
        return load_hf_config(file, dtype=param, compute_dtype=compute)
    except ValueError as err:  # json errors are ValueErrors too
        raise ConfigError("model.path", f"a supported config.json ({err})", str(file)) from None


def text_config(mcfg):
    """The text decoder's ModelConfig of a decoder or a VLConfig."""
    return getattr(mcfg, "text", mcfg)


def image_patches(config, vcfg) -> int:
    """Patches of one observation picture of a Qwen3-VL config: the gridworld rendered at
    `mindzero.data.image_cell_size` px per cell, resized as the preprocessing resizes it."""
    from jaxtom.gridworld import EnvParams
    from jaxtom.models.image_processing import smart_resize

    cell = config.mindzero.data.image_cell_size if config.kind == "mindzero" else 50
    g = EnvParams()
    h, w = smart_resize(g.height * cell, g.width * cell, vcfg.patch_size * vcfg.spatial_merge_size)
    return h * w // vcfg.patch_size ** 2


# ---- per-device bytes from shardings ----------------------------------------------------
def device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (the largest shard)."""
    import jax
    import numpy as np

    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def _with_shardings(shapes, shardings):
    import jax
    return jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h),
                        shapes, shardings)


def xla_memory(compiled) -> dict[str, int]:
    """Bytes of a compiled program by XLA's memory analysis; `peak` = arguments + outputs -
    aliased (donated) + temporaries, the most its buffers hold at once."""
    m = compiled.memory_analysis()
    out = {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
           "aliased": int(m.alias_size_in_bytes), "temporaries": int(m.temp_size_in_bytes)}
    out["peak"] = out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
    return out


def _xla_flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


# ---- analytic FLOPs ---------------------------------------------------------------------
def vision_flops(vcfg, images: int, patches: int) -> float:
    """Matmul FLOPs of the Qwen3-VL vision tower over `images` pictures of `patches` patches:
    patch embedding, blocks (qkv, proj, MLP, full attention within a picture) and the main
    and DeepStack mergers (on the 2x2-merged tokens)."""
    d, f, m = vcfg.hidden_size, vcfg.intermediate_size, vcfg.merge_unit
    d4 = d * m
    per_patch = vcfg.patch_dim * d + vcfg.depth * (4 * d * d + 2 * d * f + 2 * patches * d)
    per_token = (1 + len(vcfg.deepstack_visual_indexes)) * (d4 * d4 + d4 * vcfg.out_hidden_size)
    return 2.0 * images * (patches * per_patch + patches // m * per_token)


def forward_flops(mcfg, rows: int, seq: int, lora_rank: int = 0, patches: int = 0) -> float:
    """Matmul FLOPs of one full forward over [rows, seq]: weights, LM head and attention
    (for a VLConfig, plus the vision tower on each row's picture of `patches` patches).

    Attention counts the scores the decoder forms: each block of queries against the keys up
    to its end (`decoder.attended_keys`; masked scores inside a block are computed too).
    """
    if hasattr(mcfg, "vision"):
        return (forward_flops(mcfg.text, rows, seq, lora_rank)
                + vision_flops(mcfg.vision, rows, patches))
    from jaxtom.models.decoder import attended_keys

    d, f, hd, L = mcfg.hidden_size, mcfg.intermediate_size, mcfg.head_dim, mcfg.num_layers
    q, kv = mcfg.num_heads * hd, mcfg.num_kv_heads * hd
    weights = L * (2 * d * q + 2 * d * kv + 3 * d * f) + d * mcfg.vocab_size
    if lora_rank:  # default targets: q, k, v, o
        weights += L * lora_rank * ((d + q) * 2 + (d + kv) * 2)
    # multiply-adds per token: QK^T and PV, (keys it attends) x q each
    attention = L * 2 * attended_keys(seq) * q
    return 2.0 * rows * seq * (weights + attention)


def update_flops(config, mcfg, rows: int, seq: int, pred_rows: int = 0,
                 pred_seq: int = 0) -> float:
    """FLOPs of one rollout batch's update program over `rows` rows of `seq` tokens.

    Every epoch runs the policy forward + backward over all rows (split into mini-batches);
    full fine-tuning's backward costs two forwards (activation and weight gradients), under
    LoRA the frozen weights need only activation gradients, so about one. The reference
    forward runs once; with several updates per batch the rollout policy's log-probs are
    scored once more before the first update. Prediction rows (CToM) get a forward and
    backward of their own loss in every epoch.
    """
    step = config.step
    lora = config.model.lora_rank
    patches = image_patches(config, mcfg.vision) if hasattr(mcfg, "vision") else 0
    fwd = forward_flops(mcfg, rows, seq, lora, patches)
    epochs = getattr(step, "ppo_epochs", 1)
    updates = epochs * getattr(step, "ppo_mini_batches", 1)
    policy = epochs * (fwd + (fwd if lora else 2 * fwd))
    ref = fwd if step.resolved_reference() in ("frozen_copy", "lora_disabled") else 0.0
    old = fwd if updates > 1 else 0.0
    pred_fwd = forward_flops(mcfg, pred_rows, pred_seq, lora) if pred_rows else 0.0
    pred = epochs * (pred_fwd + (pred_fwd if lora else 2 * pred_fwd))
    return policy + ref + old + pred


# ---- compiling --------------------------------------------------------------------------
def _new_model(mcfg):
    """A decoder (or Qwen3-VL model) of `mcfg`, as a checkpoint loads it (no LoRA)."""
    from jaxtom import models

    return (models.init_qwen3_vl(mcfg, seed=0) if hasattr(mcfg, "vision")
            else models.init_decoder(mcfg, seed=0))


def _abstract_model(config, mcfg):
    from flax import nnx

    from jaxtom import models

    def build():
        model = _new_model(mcfg)
        if config.model.lora_rank:
            models.add_lora(model, rank=config.model.lora_rank,
                            alpha=config.model.lora_alpha or None)
        return model

    return build, nnx.eval_shape(build)


def prediction_rows(config) -> tuple[int, int] | None:
    """(rows, row_len) of CToM's prediction sub-batch when the config fixes them; None when
    the step has no prediction loss. rows is 0 when it is sized from the data (one row per
    target reply), which a plan cannot know: such a plan leaves the sub-batch out."""
    if config.step.lambda_pred <= 0:
        return None
    section = getattr(config, "ctom", None)
    return (int(getattr(section, "pred_rows", 0) or 0),
            int(getattr(section, "pred_row_len", 0) or config.trainer.row_len))


def _abstract_batch(config, mcfg, rows: int, pad):
    import jax
    import jax.numpy as jnp

    from jaxtom.rl.batch import Batch, PredictionBatch

    T = config.trainer.row_len
    s = config.step
    i32 = jax.ShapeDtypeStruct((rows, T), jnp.int32)
    f32 = jax.ShapeDtypeStruct((rows, T), jnp.float32)
    prediction = None
    pred = prediction_rows(config)
    if pred and pred[0]:  # padded like the policy rows (`jaxtom.rl.batch.pad_rows`)
        shape = (pad(pred[0]), pred[1])
        p_i32, p_f32 = (jax.ShapeDtypeStruct(shape, d) for d in (jnp.int32, jnp.float32))
        prediction = PredictionBatch(tokens=p_i32, positions=p_i32, segment_ids=p_i32,
                                     target_mask=p_f32)
    images = {}
    if hasattr(mcfg, "vision"):  # one picture per row (`jaxtom.rl.vl_batch`)
        from jaxtom.models.image_processing import VisionInputs
        v, P = mcfg.vision, image_patches(config, mcfg.vision)
        def sds(*shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct((rows, 1) + shape, dtype)
        images = dict(positions=jax.ShapeDtypeStruct((rows, 3, T), jnp.int32), image_index=i32,
                      vision=VisionInputs(patches=sds(P, v.patch_dim, dtype=jnp.float32),
                                          valid=sds(P, dtype=jnp.bool_), pos_index=sds(P, 4),
                                          pos_weight=sds(P, 4, dtype=jnp.float32),
                                          rot_pos=sds(P, 2)))
    # as the trainer packs it: old log-probs are scored inside the update (not in the batch)
    return Batch(**{"tokens": i32, "positions": i32, "segment_ids": i32, "policy_mask": f32,
                    "advantages": f32, "group_ids": i32,
                    "ref_logp": f32 if s.resolved_reference() == "batch" else None,
                    "decision_mask": f32 if s.lambda_entropy > 0 else None,
                    "prediction": prediction, **images})


def _abstract_state(config, mcfg, mesh):
    """(learner, train state) as `Learner.init_state` makes it, shapes with their shardings."""
    import jax

    from jaxtom.rl.step import Learner

    build, model = _abstract_model(config, mcfg)
    learner = Learner(model, config.step, mesh)
    state = jax.eval_shape(lambda: learner.init_state(build(), seed=0))
    return learner, _with_shardings(state, learner.state_shardings(state))


def _abstract_update_batch(config, mcfg, learner):
    rows = padded_rows(rollout_rows(config), learner)
    batch = _abstract_batch(config, mcfg, rows, learner.padded_rows)
    return _with_shardings(batch, learner.batch_shardings(batch))


def plan_update(config, mcfg, mesh) -> dict[str, Any]:
    """Compiles the Learner's update for one rollout batch; per-device bytes and FLOPs."""
    import jax

    learner, state = _abstract_state(config, mcfg, mesh)
    batch = _abstract_update_batch(config, mcfg, learner)
    rows = batch.tokens.shape[0]
    # the program Learner.update runs: same shardings, state donated
    fn = learner.program(state, batch, every_position=True)
    start = time.perf_counter()
    compiled = fn.lower(state, batch).compile()
    seconds = time.perf_counter() - start
    params = device_bytes(state.params)
    memory = {"params": params, "frozen_params": device_bytes(state.frozen),
              "reference_params": device_bytes(state.ref_params),
              "optimizer_state": device_bytes(state.opt_state),
              "gradients": params,  # one gradient per trainable parameter, sharded alike
              "train_state": device_bytes(state), "batch": device_bytes(batch)}
    xla = xla_memory(compiled)
    s, dp = config.step, mesh.shape["data"] * mesh.shape["fsdp"]
    per_micro = rows // (dp * s.ppo_mini_batches * learner.row_split(rows)[1])
    pred = prediction_rows(config)
    p_rows, p_len = batch.prediction.tokens.shape if batch.prediction is not None else (0, 0)
    return {"rows": rows, "row_len": config.trainer.row_len, "compile_seconds": seconds,
            "rows_per_device_per_micro_batch": per_micro,
            "prediction_rows": p_rows, "prediction_row_len": p_len,
            "prediction_rows_left_out": bool(pred is not None and not pred[0]),
            "memory": memory, "xla": xla, "model_state": device_bytes(state.params) +
            device_bytes(state.frozen), "xla_flops_per_device_loop_bodies_once":
            _xla_flops(compiled),
            "flops": update_flops(config, mcfg, rows, config.trainer.row_len, p_rows, p_len),
            "trainable_params": sum(math.prod(x.shape) for x in jax.tree.leaves(state.params))}


def sampler_call_rows(config, processes: int = 1) -> int:
    """Rows of the largest rollout sampler call over the global mesh (the first), before
    padding.

    Every process calls `sampling.generate` with the same global rows (SPMD;
    `rl.distributed.generate_rows`): each call holds each process's next
    `trainer.rollout_rows` rows (all of them when 0). A process's share of a step is its
    slice of the prompts (`rl.trainer.process_share`: shares differ by at most one prompt)
    times `group_size` samples.
    """
    t = config.trainer
    base, extra = divmod(t.prompts_per_step, processes)
    shares = [(base + (p < extra)) * t.group_size for p in range(processes)]
    return sum(min(n, t.rollout_rows) if t.rollout_rows else n for n in shares)


def rollout_shapes(config, mcfg, mesh, processes: int = 1) -> dict[str, int]:
    """One sampler call's sizes as `sampling.generate` pads them: `rows` (real), `batch`
    (bucketed to the batch axes), `prompt_len` (prompts as long as `row_len -
    max_new_tokens`), `buffer_len` and `cache_len` (the KV cache's slots)."""
    from jaxtom import sampling

    t, bucket = config.trainer, sampling.bucket
    n = sampler_call_rows(config, processes)
    B = bucket(n, 1, mesh.shape["data"] * mesh.shape["fsdp"])
    T = bucket(max(1, t.row_len - t.max_new_tokens), 8)
    buffer_len = bucket(t.max_new_tokens, 16)
    S = max(T, min(bucket(T + buffer_len, 64), bucket(mcfg.max_position_embeddings, 64)))
    return {"rows": n, "batch": B, "prompt_len": T, "buffer_len": buffer_len, "cache_len": S}


def _abstract_cache(mcfg, mesh, batch: int, cache_len: int):
    """The sampler's KV cache (keys and values) as it is created: sharded by
    `sampling.cache_sharding` over the global mesh."""
    import jax
    import jax.numpy as jnp

    from jaxtom import sampling
    from jaxtom.models.decoder import KVCache

    one = jax.ShapeDtypeStruct((mcfg.num_layers, batch, mcfg.num_kv_heads, cache_len,
                                mcfg.head_dim), jnp.dtype(mcfg.compute_dtype),
                               sharding=sampling.cache_sharding(mesh))
    return KVCache(one, one)


def plan_rollout(config, mcfg, mesh, processes: int = 1) -> dict[str, Any]:
    """Compiles the sampler's prefill + decode loop for one sampler call (`sampler_call_rows`
    rows, prompts as long as `row_len - max_new_tokens`), sized as `sampling.generate` sizes
    it, through the sampler's own programs (`sampling.programs`: same shardings, donated
    cache).

    The sampler runs SPMD over the run's global mesh on any number of processes, with the
    training params as they are sharded, in the compute dtype (`Learner.sampling_model`: a
    copy when that differs from the parameter dtype, else the train state's own buffers);
    it adds the KV cache (sharded by `sampling.cache_sharding`) and each program's XLA
    temporaries.
    """

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxtom import parallel, sampling
    from jaxtom.models.decoder import KVCache, samples_a_copy, sampling_params

    t = config.trainer
    _, model = _abstract_model(config, mcfg)
    graphdef, params = nnx.split(model)
    params = _with_shardings(params, parallel.state_shardings(params, mesh))
    # the sampler reads its weights in the compute dtype (`Learner.sampling_model`): a copy
    # of its own when that differs from the parameter dtype, else the train state's buffers
    copy = samples_a_copy(mcfg)
    if copy:
        params = jax.eval_shape(lambda p: sampling_params(p, mcfg), params)
        params = _with_shardings(params, parallel.state_shardings(params, mesh))
    shapes = rollout_shapes(config, mcfg, mesh, processes)
    B, T, S = shapes["batch"], shapes["prompt_len"], shapes["cache_len"]
    buffer_len = shapes["buffer_len"]
    greedy = t.temperature <= 0
    sds = jax.ShapeDtypeStruct
    cache = _abstract_cache(mcfg, mesh, B, S)
    bucket = sampling.bucket
    n_stop = bucket(max(1, len(t.stop_tokens) + len(mcfg.eos_token_ids)), 4)
    # the sampler's static settings and per-call inputs, by field name, so that a changed
    # sampler fails here naming the field instead of planning a different program
    statics = {"buffer_len": buffer_len, "greedy": greedy,
               "use_filter": not greedy and t.top_p < 1.0, "pad_id": t.pad_id}
    fields = {"tokens": sds((B, T), jnp.int32), "chunk_lens": sds((B,), jnp.int32),
              "starts": sds((B,), jnp.int32), "active": sds((B,), jnp.bool_),
              "source": sds((B,), jnp.int32),
              "row_ids": sds((B,), jnp.uint32),
              "key": jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))),
              "max_new": sds((), jnp.int32),
              "temperature": sds((), jnp.float32), "top_k": sds((), jnp.int32),
              "top_p": sds((), jnp.float32), "stop_ids": sds((n_stop,), jnp.int32),
              "stop_tables": sds((0, 1, mcfg.vocab_size), jnp.int16),
              "explore_after": sds((bucket(max(1, len(t.explore_after)), 4),), jnp.int32),
              "explore_temperature": sds((), jnp.float32),
              "explore_tokens": sds((bucket(max(1, len(t.explore_tokens)), 4),), jnp.int32)}

    def build(cls, known):
        names = ([f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls)
                 else list(cls._fields))
        unknown = [name for name in names if name not in known]
        if unknown:
            raise PlanError(f"the sampler's {cls.__name__} takes {unknown}, which jaxtom.plan "
                            "does not know how to size; update jaxtom.plan.plan_rollout (or "
                            "plan with --no-rollout)")
        return cls(**{name: known[name] for name in names})

    loop = build(sampling.LoopConfig, statics)
    named = dict(zip(("prefill", "decode"), sampling.programs(graphdef, loop, mesh, params)))
    values = {"params": params, "cache": cache, "inp": build(sampling.SamplingInputs, fields),
              "chunk": build(sampling.PromptChunk, fields)}
    # a prefill whose outputs (cache, loop state) feed the decode program: each program's
    # arguments by its parameter names
    start = time.perf_counter()
    programs = {}
    for name, fn in named.items():
        wanted = list(inspect.signature(fn).parameters)
        missing = [w for w in wanted if w not in values]
        if missing:
            raise PlanError(f"the sampler's {name} program takes {missing}, which jaxtom.plan "
                            "does not know how to size; update jaxtom.plan.plan_rollout (or "
                            "plan with --no-rollout)")
        args = [values[w] for w in wanted]
        programs[name] = fn.lower(*args).compile()
        outs = jax.eval_shape(fn, *args)
        for out in (outs if isinstance(outs, tuple) and not isinstance(outs, KVCache)
                    else (outs,)):
            if isinstance(out, KVCache):
                values["cache"] = out
            elif isinstance(out, sampling.LoopState):
                values["state"] = out
    seconds = time.perf_counter() - start
    xla = {name: xla_memory(c) for name, c in programs.items()}
    peak = max(x["peak"] for x in xla.values())
    worst = next(name for name, x in xla.items() if x["peak"] == peak)
    xla_flops = [_xla_flops(c) for c in programs.values()]
    from jaxtom.flops import inference_flops
    return {"rows": B, "prompt_len": T, "cache_len": S, "compile_seconds": seconds,
            "processes": processes, "rows_per_process": -(-shapes["rows"] // processes),
            "rows_per_device": B // (mesh.shape["data"] * mesh.shape["fsdp"]),
            "memory": {"kv_cache": device_bytes(cache), "model_state": device_bytes(params),
                       "sampler_weights_extra": device_bytes(params) if copy else 0},
            "xla": xla[worst], "programs": xla, "peak_program": worst,
            "flops": inference_flops(mcfg.num_params(),
                                     t.prompts_per_step * t.group_size * (T + t.max_new_tokens)),
            "xla_flops_per_device_loop_bodies_once": (
                sum(xla_flops) if None not in xla_flops else None)}


def resident_terms(config, mesh, processes: int = 1, mcfg=None) -> dict[str, dict[str, int]]:
    """Bytes one device holds at each named point of a run, by term (no compiling: shapes and
    shardings only). These are the buffers that stay alive (what `jax.live_arrays()` sees);
    XLA's temporaries come on top while a program runs (see `plan_update` / `plan_rollout`).

    - `loaded`: the checkpoint read straight into the mesh (each parameter sharded by its
      logical axes, in the parameter dtype), before any train state exists.
    - `init_state`: the train state `Learner.init_state` creates sharded: trainable params,
      frozen params (LoRA's base weights), the frozen reference copy, the optimiser state,
      and the step counter and RNG key (`counters`). The generic and CToM trainers drop the
      loaded model then; MindZero's entry points keep it for the run (`start_model`: its
      trained params, which `init_state` copied).
    - `rollout`: the train state while a sampler call's results are alive, the sampler's
      weights (`sampler_weights`: a compute-dtype copy when the compute dtype differs from
      the parameter dtype, `Learner.sampling_model`; else the train state's own, 0 extra)
      and its KV cache.
    - `update`: the train state after an update, with the rollout batch it was given.
    """
    import jax.numpy as jnp
    from flax import nnx

    from jaxtom import parallel

    from jaxtom.models.decoder import samples_a_copy

    mcfg = model_config(config.model) if mcfg is None else mcfg
    loaded = nnx.state(nnx.eval_shape(lambda: _new_model(mcfg)))
    loaded = _with_shardings(loaded, parallel.state_shardings(loaded, mesh))
    learner, state = _abstract_state(config, mcfg, mesh)
    train = {"params": device_bytes(state.params), "frozen_params": device_bytes(state.frozen),
             "reference_params": device_bytes(state.ref_params),
             "optimizer_state": device_bytes(state.opt_state),
             "counters": device_bytes((state.step, state.rng))}
    shapes = rollout_shapes(config, text_config(mcfg), mesh, processes)
    cache = _abstract_cache(text_config(mcfg), mesh, shapes["batch"], shapes["cache_len"])
    batch = _abstract_update_batch(config, mcfg, learner)
    if config.kind == "mindzero":
        # MindZero (and its VL / household variants) keeps the model it started from alive
        # through the run (`mindzero.trainer.train` holds it, and `BestModel` returns it
        # when the warm-up's model scores best):
        # its trained params are its own arrays (init_state copies them), its frozen ones
        # are shared with the state
        train["start_model"] = train["params"]
    text = text_config(mcfg)
    if samples_a_copy(mcfg):  # `Learner.sampling_model`
        sampler = (train["params"] + train["frozen_params"]) * (
            jnp.dtype(text.compute_dtype).itemsize / jnp.dtype(text.param_dtype).itemsize)
    else:
        sampler = 0
    rollout = {**train, "sampler_weights": int(sampler), "kv_cache": device_bytes(cache)}
    store = kept_store_bytes(config, text_config(mcfg), mesh, shapes["cache_len"])
    if store:
        rollout["kept_kv_store"] = store
    return {"loaded": {"params": device_bytes(loaded)},
            "init_state": dict(train),
            "rollout": rollout,
            "update": {**train, "batch": device_bytes(batch)}}


def kept_store_bytes(config, text, mesh, cache_len: int) -> int:
    """Per-device bytes of CToM's kept KV-cache store (`ctom.kept_cache`, with
    `ctom.reuse_cache`): every conversation of the step (each process runs them all in
    lockstep) keeps up to a sampler call's cache slots, sharded over data x fsdp, through the
    whole rollout. 0 for runs without one."""
    section = getattr(config, "ctom", None)
    if config.kind != "ctom" or not getattr(section, "reuse_cache", False):
        return 0
    from jaxtom.ctom import kept_cache
    t = config.trainer
    return kept_cache.device_bytes(text, t.prompts_per_step * t.group_size, cache_len, mesh)


def check_processes(config, devices: int, processes: int) -> None:
    """A run over several processes needs equal devices per process and at least one task
    record per process and step (`rl.trainer.TaskStream`)."""
    if processes < 1 or devices % processes:
        raise PlanError(f"--processes {processes} must be a positive divisor of the mesh's "
                        f"{devices} devices (one process per host, equal devices per host)")
    if config.trainer.prompts_per_step < processes:
        raise PlanError(f"trainer.prompts_per_step={config.trainer.prompts_per_step} is fewer "
                        f"than --processes {processes}: every process needs at least one task "
                        "record per step")


def plan(config, *, devices: int | None = None, rollout: bool = True,
         headroom: float = DEFAULT_HEADROOM, processes: int = 1) -> dict[str, Any]:
    """Every figure of the plan as a dict (the JSON line). JAX must already see the devices."""
    import jax

    from jaxtom import parallel

    sizes = mesh_sizes(config.mesh, devices)
    n = math.prod(sizes)
    if jax.device_count() < n:
        raise PlanError(f"mesh {sizes} needs {n} devices but JAX sees {jax.device_count()}; "
                        f"start Python with XLA_FLAGS=--xla_force_host_platform_device_count={n}"
                        " (the `jaxtom plan` command does this itself)")
    check_processes(config, n, processes)
    mesh = parallel.make_mesh(*sizes, devices=jax.devices()[:n])
    mcfg = model_config(config.model)
    text = text_config(mcfg)
    update = plan_update(config, mcfg, mesh)
    out: dict[str, Any] = {
        "model": {"path": config.model.path, "family": text.family,
                  "params": mcfg.num_params(), "trainable_params": update.pop("trainable_params"),
                  "param_dtype": text.param_dtype, "compute_dtype": text.compute_dtype,
                  "lora_rank": config.model.lora_rank},
        "mesh": {"data": sizes[0], "fsdp": sizes[1], "tensor": sizes[2], "devices": n,
                 "processes": processes},
        "update": update}
    out["resident"] = resident_terms(config, mesh, processes, mcfg=mcfg)
    # buffers the run keeps beside the train state through every program (see resident_terms)
    kept = out["resident"]["init_state"].get("start_model", 0)
    update["kept_start_model"] = kept
    update["peak_with_kept"] = update["xla"]["peak"] + kept
    peak = update["peak_with_kept"]
    if hasattr(mcfg, "vision"):
        out["model"].update(architecture=mcfg.architecture,
                            vision_params=mcfg.vision.num_params(),
                            image_patches=image_patches(config, mcfg.vision))
    if rollout:
        # a VL rollout decodes on the text decoder; its image prefill runs the vision tower
        # once per distinct picture (not planned: small beside the decode's KV cache)
        r = plan_rollout(config, text, mesh, processes)
        # while sampling, the whole train state stays resident and the sampler's weights are
        # its own buffers (arguments of the sampler's programs, so counted once)
        shared = r["memory"]["model_state"] - r["memory"]["sampler_weights_extra"]
        r["peak_with_train_state"] = (update["memory"]["train_state"] + kept - shared
                                      + r["xla"]["peak"])
        store = out["resident"]["rollout"].get("kept_kv_store", 0)
        if store:
            # CToM's kept store lives beside every sampler call; growing it copies it, so
            # the old and the new store are alive together for a moment (at most 2x)
            r["memory"]["kept_kv_store"] = store
            r["peak_with_train_state"] = max(
                r["peak_with_train_state"] + store,
                update["memory"]["train_state"] + kept + 2 * store)
        out["rollout"] = r
        peak = max(peak, r["peak_with_train_state"])
    s = config.step
    mini, epochs = getattr(s, "ppo_mini_batches", 1), getattr(s, "ppo_epochs", 1)
    out["per_device_peak_bytes"] = peak
    out["flops_per_rollout_step"] = {
        "optimizer_updates": mini * epochs, "update_total": update["flops"],
        "update_per_device": update["flops"] / n,
        "sampling_total": out["rollout"]["flops"] if rollout else None}
    out["headroom"] = headroom
    out["fits"] = fits(peak, headroom)
    return out


def fits(peak_bytes: float, headroom: float = DEFAULT_HEADROOM) -> dict[str, bool]:
    """Whether `peak_bytes` per device stays within `headroom` of each named chip."""
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be a fraction in (0, 1], got {headroom}")
    return {name: peak_bytes <= headroom * cap for name, cap in ACCELERATORS.items()}
