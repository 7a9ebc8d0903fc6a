"""Memory and FLOPs of a config before renting (`jaxtom plan`, `jaxtom.commands.plan`).

The plan compiles the config's real GRPO update step (`jaxtom.rl.step.Learner`, with its own
state and batch shardings) and the rollout sampler's prefill + decode (`jaxtom.sampling`)
ahead of time on simulated CPU devices arranged like the config's mesh. Parameters are
shape-only (`nnx.eval_shape` from the model's `config.json`): no weights are read and no array
is allocated, so an 8B model's step plans on a laptop. XLA's buffer assignment then says what
one device holds; the parameter, optimiser and gradient figures are computed from the same
shardings, so the two can be checked against each other. The rollout is planned as it runs on
any number of processes: one SPMD sampler call over the global mesh on the train state's
(sharded) params, read in the compute dtype (`Learner.sampling_model`: a copy when that is
not the parameter dtype), so it adds that copy, its KV cache and its programs' temporaries;
`--processes P` (a run over P hosts) sets how many rows a call samples
(`trainer.rollout_rows` per process).
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
import math
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxtom import parallel
from jaxtom.flops import update_flops
from jaxtom.plan_rollout import abstract_cache, kept_store_bytes, plan_rollout, rollout_shapes
from jaxtom.plan_shapes import (
    GB,
    PlanError,
    abstract_state,
    abstract_update_batch,
    device_bytes,
    image_patches,
    mesh_sizes,
    model_config,
    new_model,
    prediction_rows,
    rollout_rows,
    with_shardings,
    xla_flops,
    xla_memory,
)
from jaxtom.rl.batch import update_rows
from jaxtom.sampling.weights import samples_a_copy


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """A chip a plan is checked against, per JAX device (a TPU v5p/v5e/v6e chip, a GPU)."""
    memory_bytes: float  # nominal memory as the vendor quotes it, in 1e9-byte GB
    bf16_tflops: float  # dense bf16 peak (vendor datasheet)
    single_host_devices: int  # the most devices one host holds (v5p-8: 4 chips, v6e-8: 8)
    devices_per_host: int  # devices per host in a multi-host slice or cluster


# The real usable capacity is slightly larger than the nominal one for all of them (e.g. an
# H100 reports ~79.6 GiB = 85.5e9 bytes), so these are conservative. A v5e chip has 16 GiB
# of HBM; 16e9 bytes is planned, like the others' nominal GB.
ACCELERATOR_SPECS: dict[str, Accelerator] = {
    "H100-80GB": Accelerator(80 * GB, 989.0, 8, 8),
    "H200-141GB": Accelerator(141 * GB, 989.0, 8, 8),
    "v5p-95GB": Accelerator(95 * GB, 459.0, 4, 4),
    "v5e-16GB": Accelerator(16 * GB, 197.0, 8, 4),
    "v6e-32GB": Accelerator(32 * GB, 918.0, 8, 4),
}
ACCELERATORS: dict[str, float] = {k: a.memory_bytes for k, a in ACCELERATOR_SPECS.items()}
DEFAULT_HEADROOM = 0.9  # plan to fill at most this fraction of a chip (runtime, fragmentation)
# without --accelerator: a run on more devices than one host holds is planned at the TPU
# slices' 4 devices per host, the most processes (so the largest sampler calls) of them all
POD_DEVICES_PER_HOST = 4
MAX_SINGLE_HOST_DEVICES = 8
PADDING_LIMIT = 0.1  # padding rows per real row above which the report names another mesh


def accelerator(name: str) -> str:
    """The ACCELERATOR_SPECS key `name` names: the key itself or its family ("v5e", "h100"),
    case-insensitively; a PlanError listing them otherwise."""
    for key in ACCELERATOR_SPECS:
        if name.lower() in (key.lower(), key.split("-")[0].lower()):
            return key
    raise PlanError(f"--accelerator {name!r}: expected one of "
                    f"{[k.split('-')[0] for k in ACCELERATOR_SPECS]}")


def infer_processes(devices: int, kind: str | None = None) -> tuple[int, str]:
    """(processes, how they were inferred) of a run on `devices` devices: one when a host
    holds them all, else one per host of the accelerator's `devices_per_host` (for `kind`
    None: up to 8 devices on one host, else the TPU slices' 4 per host, the most processes
    of the listed chips and so the largest sampler calls)."""
    if kind is None:
        single, per = MAX_SINGLE_HOST_DEVICES, POD_DEVICES_PER_HOST
        host = "host"
        also = ("; TPU slices hold 4 devices per host, an 8-GPU host runs half as many "
                "processes: pass --accelerator or --processes")
    else:
        spec = ACCELERATOR_SPECS[kind]
        single, per, host, also = (spec.single_host_devices, spec.devices_per_host,
                                   f"{kind} host", "")
    if devices <= single:
        return 1, f"one {host} holds up to {single} devices"
    if devices % per:
        raise PlanError(f"{devices} devices do not split into hosts of {per} devices; pass "
                        "--processes P")
    return devices // per, f"{devices} devices / {per} per {host}{also}"


def padding(rows: int, padded: int) -> dict[str, Any]:
    """Padding rows an update computes on top of `rows` real ones; `fraction` is padding
    rows per real row, the update's extra compute."""
    return {"rows": rows, "padded_rows": padded, "padding_rows": padded - rows,
            "fraction": (padded - rows) / rows if rows else 0.0}


def less_padding(config, mcfg, sizes) -> dict[str, Any] | None:
    """A mesh over the same devices whose update pads `rollout_rows(config)` least, when
    `sizes` pads more than PADDING_LIMIT: the batch rows split over data x fsdp devices, so
    moving devices onto the tensor axis (which must divide the head counts) changes it."""

    rows, s = rollout_rows(config), config.step
    text = mcfg.text_config
    n = math.prod(sizes)

    def pad(dp: int) -> int:
        return update_rows(rows, dp, s.ppo_mini_batches, s.micro_batches)[0]

    if padding(rows, pad(sizes[0] * sizes[1]))["fraction"] <= PADDING_LIMIT:
        return None
    best = None
    for tensor in (2, 4, 8):
        if n % tensor or text.num_heads % tensor or text.num_kv_heads % tensor:
            continue
        padded = pad(n // tensor)
        if best is None or padded < best["padding"]["padded_rows"]:
            best = {"mesh": (1, n // tensor, tensor), "padding": padding(rows, padded)}
    if best is None or best["padding"]["fraction"] > PADDING_LIMIT:
        return None
    return best


def plan_update(config, mcfg, mesh) -> dict[str, Any]:
    """Compiles the Learner's update for one rollout batch; per-device bytes and FLOPs."""

    learner, state = abstract_state(config, mcfg, mesh)
    batch = abstract_update_batch(config, mcfg, learner)
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
            xla_flops(compiled),
            "flops": update_flops(config, mcfg, rows, config.trainer.row_len, p_rows, p_len),
            "trainable_params": sum(math.prod(x.shape) for x in jax.tree.leaves(state.params))}


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



    mcfg = model_config(config.model) if mcfg is None else mcfg
    loaded = nnx.state(nnx.eval_shape(lambda: new_model(mcfg)))
    loaded = with_shardings(loaded, parallel.state_shardings(loaded, mesh))
    learner, state = abstract_state(config, mcfg, mesh)
    train = {"params": device_bytes(state.params), "frozen_params": device_bytes(state.frozen),
             "reference_params": device_bytes(state.ref_params),
             "optimizer_state": device_bytes(state.opt_state),
             "counters": device_bytes((state.step, state.rng))}
    shapes = rollout_shapes(config, mcfg.text_config, mesh, processes)
    cache = abstract_cache(mcfg.text_config, mesh, shapes["batch"], shapes["cache_len"])
    batch = abstract_update_batch(config, mcfg, learner)
    if config.kind == "mindzero":
        # MindZero (and its VL / household variants) keeps the model it started from alive
        # through the run (`mindzero.driver.train` holds it, and `BestModel` returns it
        # when the warm-up's model scores best):
        # its trained params are its own arrays (init_state copies them), its frozen ones
        # are shared with the state
        train["start_model"] = train["params"]
    text = mcfg.text_config
    if samples_a_copy(mcfg):  # `Learner.sampling_model`
        sampler = (train["params"] + train["frozen_params"]) * (
            jnp.dtype(text.compute_dtype).itemsize / jnp.dtype(text.param_dtype).itemsize)
    else:
        sampler = 0
    rollout = {**train, "sampler_weights": int(sampler), "kv_cache": device_bytes(cache)}
    store = kept_store_bytes(config, mcfg.text_config, mesh, shapes["cache_len"])
    if store:
        rollout["kept_kv_store"] = store
    return {"loaded": {"params": device_bytes(loaded)},
            "init_state": dict(train),
            "rollout": rollout,
            "update": {**train, "batch": device_bytes(batch)}}


def check_processes(config, devices: int, processes: int,
                    inferred: str | None = None) -> None:
    """A run over several processes needs equal devices per process and at least one task
    record per process and step (`rl.trainer.TaskStream`). `inferred`: how `processes` was
    inferred, said in the error."""
    how = f" (inferred: {inferred})" if inferred else ""
    if processes < 1 or devices % processes:
        raise PlanError(f"--processes {processes}{how} must be a positive divisor of the "
                        f"mesh's {devices} devices (one process per host, equal devices per "
                        "host)")
    if config.trainer.prompts_per_step < processes:
        raise PlanError(f"trainer.prompts_per_step={config.trainer.prompts_per_step} is fewer "
                        f"than --processes {processes}{how}: every process needs at least one "
                        "task record per step")


def plan(config, *, devices: int | None = None, rollout: bool = True,
         headroom: float = DEFAULT_HEADROOM, processes: int = 1,
         processes_inferred: str | None = None) -> dict[str, Any]:
    """Every figure of the plan as a dict (the JSON line). JAX must already see the devices.
    `processes_inferred`: how `processes` was inferred (`infer_processes`), None when given."""


    sizes = mesh_sizes(config.mesh, devices)
    n = math.prod(sizes)
    if jax.device_count() < n:
        raise PlanError(f"mesh {sizes} needs {n} devices but JAX sees {jax.device_count()}; "
                        f"start Python with XLA_FLAGS=--xla_force_host_platform_device_count={n}"
                        " (the `jaxtom plan` command does this itself)")
    check_processes(config, n, processes, processes_inferred)
    mesh = parallel.make_mesh(*sizes, devices=jax.devices()[:n])
    mcfg = model_config(config.model)
    text = mcfg.text_config
    update = plan_update(config, mcfg, mesh)
    out: dict[str, Any] = {
        "model": {"path": config.model.path, "family": text.family,
                  "params": mcfg.num_params(), "trainable_params": update.pop("trainable_params"),
                  "param_dtype": text.param_dtype, "compute_dtype": text.compute_dtype,
                  "lora_rank": config.model.lora_rank},
        "mesh": {"data": sizes[0], "fsdp": sizes[1], "tensor": sizes[2], "devices": n,
                 "processes": processes, "processes_inferred": processes_inferred},
        "update": update}
    update["padding"] = padding(rollout_rows(config), update["rows"])
    suggestion = less_padding(config, mcfg, sizes)
    if suggestion is not None:
        update["less_padding"] = suggestion
    out["resident"] = resident_terms(config, mesh, processes, mcfg=mcfg)
    # buffers the run keeps beside the train state through every program (see resident_terms)
    kept = out["resident"]["init_state"].get("start_model", 0)
    update["kept_start_model"] = kept
    update["peak_with_kept"] = update["xla"]["peak"] + kept
    peak = update["peak_with_kept"]
    if mcfg.kind == "vision_language":
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
    out["accelerators"] = {k: dataclasses.asdict(a) for k, a in ACCELERATOR_SPECS.items()}
    return out


def fits(peak_bytes: float, headroom: float = DEFAULT_HEADROOM) -> dict[str, bool]:
    """Whether `peak_bytes` per device stays within `headroom` of each named chip."""
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom must be a fraction in (0, 1], got {headroom}")
    return {name: peak_bytes <= headroom * cap for name, cap in ACCELERATORS.items()}
