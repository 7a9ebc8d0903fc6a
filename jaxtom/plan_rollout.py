"""The rollout side of `jaxtom plan`: one sampler call's shapes (rows, prompt, cache) as
`sampler.generate` sizes them, its prefill and decode compiled on abstract inputs, and
CToM's kept KV store."""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Any

from jaxtom.plan_shapes import (PlanError, abstract_model, device_bytes, with_shardings,
                                xla_flops, xla_memory)


def sampler_call_rows(config, processes: int = 1) -> int:
    """Rows of the largest rollout sampler call over the global mesh (the first), before
    padding.

    Every process calls `sampler.generate` with the same global rows (SPMD;
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
    """One sampler call's sizes as `sampler.generate` pads them: `rows` (real), `batch`
    (bucketed to the batch axes), `prompt_len` (prompts as long as `row_len -
    max_new_tokens`), `buffer_len` and `cache_len` (the KV cache's slots)."""
    from jaxtom.sampling import sampler

    t, bucket = config.trainer, sampler.bucket
    n = sampler_call_rows(config, processes)
    B = bucket(n, 1, mesh.shape["data"] * mesh.shape["fsdp"])
    T = bucket(max(1, t.row_len - t.max_new_tokens), 8)
    buffer_len = bucket(t.max_new_tokens, 16)
    S = max(T, min(bucket(T + buffer_len, 64), bucket(mcfg.max_position_embeddings, 64)))
    return {"rows": n, "batch": B, "prompt_len": T, "buffer_len": buffer_len, "cache_len": S}


def abstract_cache(mcfg, mesh, batch: int, cache_len: int):
    """The sampler's KV cache (keys and values) as it is created: sharded by
    `sampling_loop.cache_sharding` over the global mesh."""
    import jax
    import jax.numpy as jnp

    from jaxtom.sampling import loop as sampling_loop

    from jaxtom.models.decoder import KVCache

    one = jax.ShapeDtypeStruct((mcfg.num_layers, batch, mcfg.num_kv_heads, cache_len,
                                mcfg.head_dim), jnp.dtype(mcfg.compute_dtype),
                               sharding=sampling_loop.cache_sharding(mesh))
    return KVCache(one, one)


def plan_rollout(config, mcfg, mesh, processes: int = 1) -> dict[str, Any]:
    """Compiles the sampler's prefill + decode loop for one sampler call (`sampler_call_rows`
    rows, prompts as long as `row_len - max_new_tokens`), sized as `sampler.generate` sizes
    it, through the sampler's own programs (`sampling_loop.programs`: same shardings, donated
    cache).

    The sampler runs SPMD over the run's global mesh on any number of processes, with the
    training params as they are sharded, in the compute dtype (`Learner.sampling_model`: a
    copy when that differs from the parameter dtype, else the train state's own buffers);
    it adds the KV cache (sharded by `sampling_loop.cache_sharding`) and each program's XLA
    temporaries.
    """

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jaxtom import parallel

    from jaxtom.sampling import loop as sampling_loop

    from jaxtom.sampling import sampler
    from jaxtom.models.decoder import KVCache
    from jaxtom.sampling.weights import samples_a_copy, sampling_params

    t = config.trainer
    _, model = abstract_model(config, mcfg)
    graphdef, params = nnx.split(model)
    params = with_shardings(params, parallel.state_shardings(params, mesh))
    # the sampler reads its weights in the compute dtype (`Learner.sampling_model`): a copy
    # of its own when that differs from the parameter dtype, else the train state's buffers
    copy = samples_a_copy(mcfg)
    if copy:
        params = jax.eval_shape(lambda p: sampling_params(p, mcfg), params)
        params = with_shardings(params, parallel.state_shardings(params, mesh))
    shapes = rollout_shapes(config, mcfg, mesh, processes)
    B, T, S = shapes["batch"], shapes["prompt_len"], shapes["cache_len"]
    buffer_len = shapes["buffer_len"]
    greedy = t.temperature <= 0
    sds = jax.ShapeDtypeStruct
    cache = abstract_cache(mcfg, mesh, B, S)
    bucket = sampler.bucket
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
              "explore_tokens": sds((bucket(max(1, len(t.explore_tokens)), 4),), jnp.int32),
              "stop_step": sds((), jnp.int32)}

    def build(cls, known):
        names = ([f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls)
                 else list(cls._fields))
        unknown = [name for name in names if name not in known]
        if unknown:
            raise PlanError(f"the sampler's {cls.__name__} takes {unknown}, which jaxtom.plan "
                            "does not know how to size; update jaxtom.plan.plan_rollout (or "
                            "plan with --no-rollout)")
        return cls(**{name: known[name] for name in names})

    loop = build(sampling_loop.LoopConfig, statics)
    named = dict(zip(("prefill", "decode"), sampling_loop.programs(graphdef, loop, mesh, params)))
    values = {"params": params, "cache": cache, "inp": build(sampling_loop.SamplingInputs, fields),
              "chunk": build(sampling_loop.PromptChunk, fields)}
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
            elif isinstance(out, sampling_loop.LoopState):
                values["state"] = out
    seconds = time.perf_counter() - start
    xla = {name: xla_memory(c) for name, c in programs.items()}
    peak = max(x["peak"] for x in xla.values())
    worst = next(name for name, x in xla.items() if x["peak"] == peak)
    counted = [xla_flops(c) for c in programs.values()]
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
                sum(counted) if None not in counted else None)}


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
