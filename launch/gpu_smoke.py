#!/usr/bin/env python3
"""One GRPO update and one rollout of a paper config on every GPU of a host, measured beside
`jaxtom plan`.

    python launch/gpu_smoke.py                       # Qwen3-4B paper config, sized by the plan
    python launch/gpu_smoke.py CONFIG [section.field=value ...] [--rows-divisor D]
    python launch/gpu_smoke.py --tiny                # a scaled-down model and shapes (CPU)

Why: `jaxtom plan` predicts per-device memory by compiling on simulated CPU devices; this
runs the same programs on the real devices (FSDP over all of them: the NCCL path) and prints
what the devices' allocators saw.

The mesh is (1, N, 1) over the host's N local devices (`--devices` takes fewer). The size is
the config's rollout rows (`trainer.prompts_per_step`, `num_rows`, `rollout_rows`) divided by
the smallest power of two whose plan fits `--chip` (default H100-80GB) within `--headroom`
(default 90%): `jaxtom plan` runs on the CPU for each candidate until one fits
(`choose_size`); `--rows-divisor D` fixes the divisor instead (the plan then runs in the
background). With `--tiny` the divisor is 8. What it runs on that mesh:
- random weights of the config's architecture (only `config.json` is read, under
  `$JAXTOM_MODELS`, default launch/models/), built with the train state in one program,
  sharded over the mesh (`Learner.init_state` under `jax.jit`);
- one rollout call (`jaxtom.sampling.sampler.generate`, on `Learner.sampling_model` as a run samples)
  of the rows and prompt length `jaxtom plan` plans (distinct random prompts of
  `row_len - max_new_tokens` tokens, every row decoding `max_new_tokens`), after a warm-up
  call that compiles it;
- one GRPO update (`Learner.update`: every PPO mini-batch and micro-batch of the batch) on a
  random batch shaped as `jaxtom plan` shapes it (`plan_shapes.abstract_batch`), every position
  scored, so it is the program the plan compiles.
Memory is each device's own `memory_stats()` (`peak_bytes_in_use`, cumulative) after each
phase, the largest over the devices set beside the plan's per-device figures for the same
config and overrides (`--plan-json FILE` reads a saved plan's JSON line instead, `--no-plan`
skips it; both need `--rows-divisor`). XLA allocates on demand
(XLA_PYTHON_CLIENT_PREALLOCATE=false unless set), so the check holds no more memory than the
programs use. FLOPs are the plan's analytic counts (model FLOPs: rematerialisation not
counted), MFU against `--peak-tflops` per device (default 989, the H100/H200 SXM dense bf16
figure) times the devices.

The last line printed is one JSON object: shapes, seconds, tokens/s, MFU, memory, the plan's
prediction and the JAX / CUDA / device versions. Only JAX, Flax, Optax and jaxtom's model,
sampling, step and plan modules are imported; `jaxtom.config` imports grain (the data
pipeline, not used here), so where grain is missing a placeholder stands in for it and the
JSON says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = str(REPO / "configs" / "mindzero_gridworld_qwen3_4b.py")
DEFAULT_PEAK_TFLOPS = 989.0  # H100 / H200 SXM, dense bf16 (vendor datasheet)
DEFAULT_CHIP = "H100-80GB"  # a key of jaxtom.plan.ACCELERATORS
TINY_DIVISOR = 8
# a Qwen3-shaped model small enough for a CPU test, and short rows
TINY_OVERRIDES = ("model.path=", "model.family=qwen3", "model.vocab_size=256",
                  "model.hidden_size=64", "model.intermediate_size=128", "model.num_layers=2",
                  "model.num_heads=4", "model.num_kv_heads=2", "model.head_dim=16",
                  "trainer.row_len=64", "trainer.max_new_tokens=16")
STUBBED: list[str] = []


class SmokeError(ValueError):
    """The smoke check cannot run as asked (the message says what to change)."""


# ---- environment ------------------------------------------------------------------------
def prepare_environment() -> None:
    """Before JAX starts: the repo on sys.path, the shipped config.json files as the model
    root, memory allocated as the programs ask for it (no preallocation: the check reserves
    only what it uses) up to 95% of each GPU (JAX's default 75% cap would hide what the plan
    calls fitting), and a placeholder for grain when it is not installed."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("JAXTOM_MODELS", str(REPO / "launch" / "models"))
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    if "grain" not in sys.modules and importlib.util.find_spec("grain") is None:
        stub = types.ModuleType("grain")

        def missing(name):
            raise ImportError(f"grain is not installed; launch/gpu_smoke.py put a placeholder "
                              f"in its place (grain.{name} was asked for): install grain")

        stub.__getattr__ = missing
        sys.modules["grain"] = stub
        STUBBED.append("grain")
        print("gpu_smoke: grain is not installed; a placeholder stands in for it (the smoke "
              "runs no data pipeline)", file=sys.stderr)


def load(config_path: str, overrides: list[str]):
    from jaxtom.config import load_config
    return load_config(config_path, overrides)


def mesh_overrides(devices: int) -> tuple[str, ...]:
    """FSDP over `devices`: the parameters and the rows split over all of them."""
    return ("mesh.data=1", f"mesh.fsdp={devices}", "mesh.tensor=1")


def smoke_overrides(config_path: str, user: list[str], tiny: bool, divisor: int,
                    devices: int = 1) -> list[str]:
    """The overrides of the run: --tiny's sizes, the user's, mesh (1, devices, 1), rows /
    divisor."""
    if divisor < 1:
        raise SmokeError(f"--rows-divisor must be a positive int, got {divisor}")
    if devices < 1:
        raise SmokeError(f"--devices must be a positive int, got {devices}")
    base = [*(TINY_OVERRIDES if tiny else ()), *user, *mesh_overrides(devices)]
    t = load(config_path, base).trainer
    out = list(base)
    for name in ("prompts_per_step", "num_rows", "rollout_rows"):
        value = getattr(t, name)
        if value % divisor:
            raise SmokeError(f"trainer.{name}={value} does not divide by --rows-divisor "
                             f"{divisor}; override it or pick another divisor")
        if value:
            out.append(f"trainer.{name}={value // divisor}")
    return out


# ---- the size: the largest rows whose plan fits the chip ----------------------------------
def candidate_divisors(trainer) -> list[int]:
    """Row divisors to try, largest size first: 1, 2, 4, ... while each of the config's row
    counts (prompts per step, rows, rows per sampler call; 0 means unset) divides."""
    counts = [v for v in (trainer.prompts_per_step, trainer.num_rows, trainer.rollout_rows)
              if v]
    out, d = [], 1
    while all(v % d == 0 for v in counts):
        out.append(d)
        d *= 2
    return out


def choose_size(divisors, plan_for, capacity_bytes: float,
                headroom: float) -> tuple[int, dict]:
    """(divisor, its plan): the first of `divisors` (largest rows first) whose plan's
    per-device peak fits `headroom` x `capacity_bytes`. `plan_for(divisor)` returns the plan's
    JSON (`jaxtom plan`) or {"error": ...}. Stops early when the train state alone (with the
    starting model a MindZero run keeps) is over the budget: fewer rows cannot help then."""
    budget = headroom * capacity_bytes
    tried = []
    for d in divisors:
        plan = plan_for(d)
        if "error" in plan:
            raise SmokeError(f"jaxtom plan for rows / {d} failed: {plan['error']}")
        peak = plan["per_device_peak_bytes"]
        tried.append(f"rows / {d}: {peak / 2 ** 30:.2f} GiB")
        if peak <= budget:
            return d, plan
        u = plan["update"]
        fixed = u["memory"]["train_state"] + u.get("kept_start_model", 0)
        if fixed > budget:
            raise SmokeError(
                f"the train state alone is {fixed / 2 ** 30:.2f} GiB per device, over the "
                f"budget of {budget / 2 ** 30:.2f} GiB ({headroom:.0%} of "
                f"{capacity_bytes / 1e9:.0f} GB), whatever the rows: use more devices "
                "(--devices), LoRA (model.lora_rank=...), or a larger --chip")
    raise SmokeError(f"no size fits {budget / 2 ** 30:.2f} GiB per device ({headroom:.0%} of "
                     f"{capacity_bytes / 1e9:.0f} GB); planned {'; '.join(tried)}: use more "
                     "devices or give the rows yourself")


# ---- the plan's prediction ----------------------------------------------------------------
def start_plan(config_path: str, overrides: list[str]) -> tuple[subprocess.Popen, Path]:
    """`jaxtom plan` for the same config and overrides, on the CPU, in the background."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    for name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        env.pop(name, None)
    out = Path(tempfile.mkstemp(prefix="gpu-smoke-plan-", suffix=".log")[1])
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--plan-only",
                             config_path, *overrides], env=env, stdout=out.open("w"),
                            stderr=subprocess.STDOUT, cwd=REPO)
    return proc, out


def plan_for(args, divisor: int, devices: int) -> dict:
    """`jaxtom plan`'s JSON for the run at rows / `divisor` on `devices`, waited for."""
    overrides = smoke_overrides(args.config, args.overrides, args.tiny, divisor, devices)
    print(f"gpu_smoke: planning rows / {divisor} on {devices} device(s) (jaxtom plan, CPU)",
          file=sys.stderr, flush=True)
    return finish_plan(*start_plan(args.config, overrides), timeout=args.plan_timeout)


def local_device_count() -> int:
    import jax
    return jax.local_device_count()


def finish_plan(proc: subprocess.Popen, log: Path, timeout: float) -> dict:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"error": f"jaxtom plan did not finish within {timeout:.0f} s (--plan-timeout)"}
    text = log.read_text()
    log.unlink()
    lines = [line for line in text.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        return {"error": f"jaxtom plan exited with status {proc.returncode}: "
                         + " | ".join(text.strip().splitlines()[-3:])}
    return json.loads(lines[-1])


def plan_summary(result: dict) -> dict:
    """The plan's figures this check measures, in bytes (or the plan's error)."""
    if "error" in result:
        return result
    u, r = result["update"], result.get("rollout")
    out = {"per_device_peak_bytes": result["per_device_peak_bytes"],
           # MindZero's entry point keeps the model it started from (both peaks include it);
           # this check keeps no such model, so the comparison takes it off
           "kept_start_model_bytes": u.get("kept_start_model", 0),
           "train_state_bytes": u["memory"]["train_state"],
           "update_peak_bytes": u["xla"]["peak"], "update_rows": u["rows"],
           "update_row_len": u["row_len"], "update_flops": u["flops"],
           "backend": "cpu (simulated devices)"}
    if r is not None:
        out.update(rollout_peak_with_train_state_bytes=r["peak_with_train_state"],
                   kv_cache_bytes=r["memory"]["kv_cache"], rollout_rows=r["rows"],
                   rollout_prompt_len=r["prompt_len"], rollout_cache_len=r["cache_len"])
    return out


# ---- device facts ---------------------------------------------------------------------------
def memory(devices) -> dict | None:
    """The allocators' own statistics of the device with the largest peak, and every
    device's peak (None where the backend keeps none: CPU)."""
    per_device = [d.memory_stats() for d in devices]
    if not all(per_device):
        return None
    peaks = [int(s.get("peak_bytes_in_use", 0)) for s in per_device]
    top = max(range(len(peaks)), key=peaks.__getitem__)
    out = {k: int(per_device[top][k]) for k in ("bytes_in_use", "peak_bytes_in_use",
                                                "bytes_limit") if k in per_device[top]}
    out.update(device=top, per_device_peak_bytes=peaks)
    return out


def versions() -> dict:
    import flax
    import jax
    import jaxlib
    import optax
    from importlib import metadata

    dev = jax.devices()[0]
    out = {"python": sys.version.split()[0], "jax": jax.__version__,
           "jaxlib": jaxlib.__version__, "flax": flax.__version__, "optax": optax.__version__,
           "backend": jax.default_backend(), "device_kind": dev.device_kind,
           "device_count": jax.device_count(),
           "platform_version": getattr(dev.client, "platform_version", None),
           "compute_capability": getattr(dev, "compute_capability", None)}
    prefixes = ("jax-cuda", "jax_cuda", "nvidia-cuda-runtime", "nvidia-cudnn", "nvidia-cublas",
                "nvidia-nccl")
    out["cuda_packages"] = {d.metadata["Name"]: d.version for d in metadata.distributions()
                            if (d.metadata["Name"] or "").lower().startswith(prefixes)}
    try:  # JAX's own record of the CUDA libraries it loaded (private; absent without CUDA)
        from jax._src.lib import cuda_versions
    except ImportError:
        cuda_versions = None
    for key, fn in (("cuda_runtime", "cuda_runtime_get_version"),
                    ("cuda_driver", "cuda_driver_get_version"),
                    ("cudnn", "cudnn_get_version")):
        f = getattr(cuda_versions, fn, None) if cuda_versions is not None else None
        try:
            out[key] = f() if f is not None else None
        except Exception as err:  # noqa: BLE001  (reported, not hidden)
            out[key] = f"unavailable: {err}"
    return out


# ---- the work ---------------------------------------------------------------------------------
def random_batch(config, mcfg, learner, rows: int, seed: int):
    """A Batch of `rows` x row_len filled field by field in the plan's shapes: every token after
    the first scored (the plan's full scoring width), advantages per GRPO group."""
    import numpy as np

    from jaxtom import plan_shapes

    shapes = plan_shapes.abstract_batch(config, mcfg, rows, plan_shapes.padded_rows(1, learner))
    rng = np.random.default_rng(seed)
    T, group = config.trainer.row_len, config.trainer.group_size
    row_adv = rng.normal(size=(rows, 1)).astype(np.float32)
    mask = np.ones((rows, T), np.float32)
    mask[:, 0] = 0.0
    values = {
        "tokens": rng.integers(1, mcfg.vocab_size, (rows, T), dtype=np.int32),
        "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (rows, T)).copy(),
        "segment_ids": np.ones((rows, T), np.int32),
        "policy_mask": mask,
        "advantages": np.broadcast_to(row_adv, (rows, T)).copy(),
        "group_ids": np.broadcast_to((np.arange(rows, dtype=np.int32) // group)[:, None],
                                     (rows, T)).copy(),
        "ref_logp": -np.abs(rng.normal(size=(rows, T))).astype(np.float32),
        "decision_mask": mask.copy(),
    }
    fields = {}
    for f in dataclasses.fields(shapes):
        want = getattr(shapes, f.name)
        if want is None:
            fields[f.name] = None
            continue
        if f.name not in values:
            raise SmokeError(f"the update batch has a '{f.name}' field (a CToM prediction or "
                             "Qwen3-VL image batch), which gpu_smoke.py does not fill; use a "
                             "text MindZero or generic config")
        v = values[f.name]
        if v.shape != want.shape or v.dtype != want.dtype:
            raise SmokeError(f"batch field {f.name}: built {v.shape} {v.dtype}, the plan "
                             f"shapes it {want.shape} {want.dtype}; update random_batch")
        fields[f.name] = v
    return type(shapes)(**fields)


def run(config_path: str, overrides: list[str], args, out: dict) -> None:
    """Fills `out` phase by phase, so that a failure (out of memory, say) still reports what
    was measured before it."""
    import jax
    import numpy as np

    from jaxtom import parallel, plan_shapes
    from jaxtom.sampling import sampler
    from jaxtom.flops import inference_flops
    from jaxtom.rl.step import Learner

    config = load(config_path, overrides)
    mcfg = plan_shapes.model_config(config.model)
    if hasattr(mcfg, "vision"):
        raise SmokeError("gpu_smoke.py runs text decoders; the config's model is Qwen3-VL")
    n = config.mesh.data * config.mesh.fsdp * config.mesh.tensor
    devices = jax.local_devices()[:n]
    if len(devices) < n:
        raise SmokeError(f"the mesh needs {n} devices, this host has {len(devices)}")
    mesh = parallel.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor,
                              devices=devices)
    t = config.trainer
    peak = args.peak_tflops * 1e12 * n  # the whole mesh's
    out["devices"] = n
    out["model"] = {"params": mcfg.num_params(), "layers": mcfg.num_layers,
                    "hidden": mcfg.hidden_size, "vocab": mcfg.vocab_size,
                    "param_dtype": mcfg.param_dtype, "compute_dtype": mcfg.compute_dtype}
    mem = out["memory"] = {}

    # the train state, built on the device in one program
    build, abstract = plan_shapes.abstract_model(config, mcfg)
    learner = Learner(abstract, config.step, mesh, total_steps=config.trainer.total_steps)
    start = time.perf_counter()
    state = jax.jit(lambda: learner.init_state(build(), seed=config.model.seed))()
    jax.block_until_ready(state)
    out["init_seconds"] = time.perf_counter() - start
    mem["after_init"] = memory(devices)

    # one rollout call at the plan's shapes
    n = t.prompts_per_step * t.group_size
    n = min(n, t.rollout_rows) if t.rollout_rows else n
    prompt_len = t.row_len - t.max_new_tokens
    rng = np.random.default_rng(args.seed)
    prompts = rng.integers(1, mcfg.vocab_size, (n, prompt_len)).tolist()
    model = learner.sampling_model(state)  # what a run samples from (compute dtype)
    kw = dict(temperature=t.temperature, top_p=t.top_p, stop_at_eos=False, pad_id=t.pad_id,
              share_prefill=False, buffer_len=sampler.bucket(t.max_new_tokens, 16))
    start = time.perf_counter()
    warm = sampler.generate(model, prompts, max_new_tokens=min(2, t.max_new_tokens),
                             key=jax.random.key(args.seed + 1), **kw)
    cache_shape = tuple(warm.state.cache.k.shape)
    del warm
    compile_s = time.perf_counter() - start
    times, new_tokens = [], 0
    for i in range(args.repeats):
        start = time.perf_counter()
        res = sampler.generate(model, prompts, max_new_tokens=t.max_new_tokens,
                                key=jax.random.key(args.seed + 2 + i), **kw)
        times.append(time.perf_counter() - start)  # generate returns host arrays: synced
        new_tokens = int(res.lengths.sum())
        del res
    del model
    seconds = statistics.median(times)
    flops = inference_flops(mcfg.num_params(), n * prompt_len + new_tokens)
    out["rollout"] = {"rows": n, "padded_rows": cache_shape[1], "prompt_len": prompt_len,
                      "prompt_slots": sampler.bucket(prompt_len, 8),
                      "cache_len": cache_shape[3], "new_tokens": new_tokens,
                      "compile_and_warmup_seconds": compile_s, "seconds": seconds,
                      "new_tokens_per_s": new_tokens / seconds,
                      "tokens_per_s": (n * prompt_len + new_tokens) / seconds,
                      "flops": flops, "mfu": flops / seconds / peak}
    mem["after_rollout"] = memory(devices)

    # one GRPO update (all PPO mini-batches and micro-batches of the batch)
    rows = plan_shapes.rollout_rows(config)
    batch = learner.put_batch(random_batch(config, mcfg, learner, rows, args.seed))
    start = time.perf_counter()
    compiled = learner.program(state, batch).lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    xla = plan_shapes.xla_memory(compiled)
    del compiled
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        state, metrics = learner.update(state, batch)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    seconds = statistics.median(times)
    padded = batch.tokens.shape[0]
    flops = flops.update_flops(config, mcfg, padded, t.row_len)
    out["update"] = {"rows": rows, "padded_rows": padded, "row_len": t.row_len,
                     "optimizer_updates": config.step.ppo_mini_batches * config.step.ppo_epochs,
                     "micro_batches": config.step.micro_batches,
                     "compile_seconds": compile_s, "seconds": seconds,
                     "tokens_per_s": padded * t.row_len / seconds, "flops": flops,
                     "mfu": flops / seconds / peak, "xla_memory_on_device": xla,
                     "metrics": metrics,
                     "metrics_finite": all(math.isfinite(v) for v in metrics.values())}
    mem["after_update"] = memory(devices)


def compare(measured: dict, predicted: dict) -> dict:
    """The run's shapes beside the plan's, and the measured peaks (the largest device's) over
    the plan's per-device figures per phase (the allocator's peak is cumulative: after the
    update it covers the whole step), less the starting model a MindZero run keeps and this
    check does not."""
    if "error" in predicted:
        return {}
    r, u = measured["rollout"], measured["update"]
    shapes = {"update_rows": (u["padded_rows"], predicted["update_rows"]),
              "update_row_len": (u["row_len"], predicted["update_row_len"])}
    if "rollout_rows" in predicted:
        shapes.update(rollout_rows=(r["padded_rows"], predicted["rollout_rows"]),
                      rollout_prompt_len=(r["prompt_slots"], predicted["rollout_prompt_len"]),
                      rollout_cache_len=(r["cache_len"], predicted["rollout_cache_len"]))
    out: dict = {"shapes_match": all(a == b for a, b in shapes.values()),
                 "shapes": {k: {"run": a, "plan": b} for k, (a, b) in shapes.items()}}
    if predicted.get("update_peak_bytes"):  # the device compiler's figure, same program
        out["update_xla_on_device_over_plan"] = (u["xla_memory_on_device"]["peak"]
                                                 / predicted["update_peak_bytes"])
    mem = measured["memory"]
    kept = predicted.get("kept_start_model_bytes", 0)
    pairs = {"rollout": ("after_rollout", "rollout_peak_with_train_state_bytes"),
             "update": ("after_update", "update_peak_bytes"),
             "whole_step": ("after_update", "per_device_peak_bytes")}
    for name, (phase, key) in pairs.items():
        if mem.get(phase) and predicted.get(key):
            m = mem[phase]["peak_bytes_in_use"]
            planned = predicted[key] - (kept if name != "update" else 0)
            out[name] = {"measured_peak_bytes": m, "plan_bytes": planned,
                         "measured_over_plan": m / planned}
    return out


def human(result: dict) -> str:
    gib = 1024 ** 3
    v = result["versions"]
    lines = [f"device {v['device_kind']} ({v['backend']}), jax {v['jax']}, "
             f"platform {v['platform_version']!r}"]
    size = result.get("size")
    if size:
        lines.append(f"size: rows / {size['rows_divisor']} ({size['chosen_by']}) on "
                     f"{size['devices']} device(s)"
                     + (f", planned {size['planned_bytes'] / gib:.2f} GiB per device within "
                        f"{size['headroom']:.0%} of {size['chip']}"
                        if size.get("planned_bytes") else ""))
    if "rollout" in result:
        r = result["rollout"]
        lines.append(f"rollout: {r['rows']} rows x {r['prompt_len']} prompt + "
                     f"{r['new_tokens'] // r['rows']} new tokens in {r['seconds']:.2f} s "
                     f"({r['new_tokens_per_s']:.0f} new tokens/s, MFU {r['mfu']:.1%})")
    if "update" in result:
        u = result["update"]
        lines.append(f"update: {u['padded_rows']} rows x {u['row_len']} in "
                     f"{u['seconds']:.2f} s ({u['tokens_per_s']:.0f} tokens/s, MFU "
                     f"{u['mfu']:.1%}), compiled in {u['compile_seconds']:.0f} s")
    memory_stats = result.get("memory", {})
    if not any(memory_stats.values()):
        lines.append(f"memory: the {v['backend']} backend keeps no allocator statistics")
    for phase, stats in memory_stats.items():
        if stats:
            lines.append(f"memory {phase}: peak {stats['peak_bytes_in_use'] / gib:.2f} GiB, "
                         f"in use {stats['bytes_in_use'] / gib:.2f} GiB")
    plan = result.get("plan") or {}
    if "error" in plan:
        lines.append(f"plan: {plan['error']}")
    versus = result.get("versus_plan", {})
    if "shapes_match" in versus:
        lines.append("shapes as the plan's: " + ("yes" if versus["shapes_match"] else
                                                 f"NO {versus['shapes']}"))
    for name in ("rollout", "update", "whole_step"):
        if name in versus:
            c = versus[name]
            lines.append(f"{name}: measured {c['measured_peak_bytes'] / gib:.2f} GiB, plan "
                         f"{c['plan_bytes'] / gib:.2f} GiB ({c['measured_over_plan']:.2f}x)")
    if "error" in result:
        lines.append(f"FAILED: {result['error'][:500]}")
    return "\n".join(lines)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default=DEFAULT_CONFIG,
                   help="a configs/*.py file (default: the repo's "
                        "configs/mindzero_gridworld_qwen3_4b.py)")
    p.add_argument("overrides", nargs="*", metavar="section.field=value")
    p.add_argument("--tiny", action="store_true",
                   help="a scaled-down Qwen3-shaped model and short rows (CPU tests)")
    p.add_argument("--rows-divisor", type=int, default=None,
                   help="divide the config's rows per step and per rollout call by this "
                        "(default: the smallest power of two whose plan fits --chip; 8 with "
                        "--tiny)")
    p.add_argument("--devices", type=int, default=None,
                   help="devices of the fsdp mesh (default: every local device)")
    p.add_argument("--chip", default=DEFAULT_CHIP,
                   help=f"the memory the plan must fit when it picks the size: one of "
                        f"jaxtom.plan.ACCELERATORS (default {DEFAULT_CHIP})")
    p.add_argument("--headroom", type=float, default=0.9,
                   help="the fraction of --chip the plan may fill (default 0.9)")
    p.add_argument("--peak-tflops", type=float, default=DEFAULT_PEAK_TFLOPS,
                   help="the device's dense bf16 peak for MFU (default 989: H100/H200 SXM)")
    p.add_argument("--repeats", type=int, default=1, help="timed calls of each (median)")
    p.add_argument("--seed", type=int, default=0)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--plan-json", type=Path,
                   help="a saved `jaxtom plan` output (its last JSON line) instead of running it")
    g.add_argument("--no-plan", action="store_true", help="skip the plan's prediction")
    p.add_argument("--plan-timeout", type=float, default=300.0,
                   help="seconds to wait for each `jaxtom plan` (the background one: once "
                        "the device work is done; default 300)")
    p.add_argument("--plan-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    if Path(args.config).is_file():  # the background plan runs from the repo root
        args.config = str(Path(args.config).resolve())
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    prepare_environment()
    if args.plan_only:  # the background plan: the overrides are final already
        from jaxtom.commands import plan as plan_cli
        return plan_cli.main([args.config, *args.overrides])
    from jaxtom.config import ConfigError
    from jaxtom.plan import ACCELERATORS
    background, predicted = None, None
    try:
        if args.chip not in ACCELERATORS:
            raise SmokeError(f"--chip {args.chip!r}: expected one of {sorted(ACCELERATORS)}")
        if not 0 < args.headroom <= 1:
            raise SmokeError(f"--headroom must be a fraction in (0, 1], got {args.headroom}")
        devices = args.devices or local_device_count()
        divisor, chosen_by = args.rows_divisor, "--rows-divisor"
        if divisor is None and args.tiny:
            divisor, chosen_by = TINY_DIVISOR, "--tiny"
        if divisor is None:
            if args.no_plan or args.plan_json:
                raise SmokeError("--no-plan and --plan-json need --rows-divisor: without it "
                                 "the plan picks the size")
            trainer = load(args.config, [*args.overrides]).trainer
            divisor, chosen = choose_size(
                candidate_divisors(trainer),
                lambda d: plan_for(args, d, devices), ACCELERATORS[args.chip], args.headroom)
            chosen_by, predicted = "plan", plan_summary(chosen)
        overrides = smoke_overrides(args.config, args.overrides, args.tiny, divisor, devices)
        if args.plan_json:
            lines = [x for x in args.plan_json.read_text().splitlines() if x.startswith("{")]
            if not lines:
                raise SmokeError(f"--plan-json {args.plan_json} holds no JSON line")
            predicted = plan_summary(json.loads(lines[-1]))
        result: dict = {"config": args.config, "overrides": overrides,
                        "peak_tflops": args.peak_tflops,
                        "size": {"rows_divisor": divisor, "chosen_by": chosen_by,
                                 "devices": devices, "chip": args.chip,
                                 "headroom": args.headroom,
                                 "budget_bytes": args.headroom * ACCELERATORS[args.chip]}}
        if predicted is None and not args.no_plan and not args.plan_json:
            background = start_plan(args.config, overrides)
        status = 0
        try:
            run(args.config, overrides, args, result)
        except (ConfigError, SmokeError):
            raise
        except Exception as err:  # noqa: BLE001  (reported in the JSON line, exit status 1)
            import jax
            result["error"] = f"{type(err).__name__}: {str(err)[:4000]}"
            result.setdefault("memory", {})["at_error"] = memory(jax.local_devices())
            status = 1
        result["versions"] = versions()
        result["stubbed_modules"] = STUBBED
        result["xla_python_client_mem_fraction"] = os.environ.get(
            "XLA_PYTHON_CLIENT_MEM_FRACTION")
        result["xla_python_client_preallocate"] = os.environ.get(
            "XLA_PYTHON_CLIENT_PREALLOCATE")
        if background is not None:
            predicted = plan_summary(finish_plan(*background, timeout=args.plan_timeout))
            background = None
    except (ConfigError, SmokeError) as err:
        print(str(err) if isinstance(err, ConfigError) else f"gpu_smoke: {err}",
              file=sys.stderr)
        return 2
    finally:
        if background is not None:  # never leave the plan running past this script
            background[0].kill()
            background[0].wait()
            background[1].unlink(missing_ok=True)
    result["plan"] = predicted
    if predicted and "per_device_peak_bytes" in predicted:
        result["size"]["planned_bytes"] = predicted["per_device_peak_bytes"]
    result["versus_plan"] = (compare(result, predicted)
                             if predicted is not None and "update" in result else {})
    print(human(result))
    print(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main())
