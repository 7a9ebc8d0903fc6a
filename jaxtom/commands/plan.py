"""`jaxtom plan CONFIG [section.field=value ...]`: memory and FLOPs of a config before renting.

The command line of `jaxtom.plan` (which says what a plan compiles and what it is not): it
sets up the simulated devices the config's mesh needs (re-running itself in a fresh process
when JAX already started on others), prints the table and then one JSON line with every
figure. `python -m jaxtom.commands.plan ...` is the same command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from typing import Any

from jaxtom.plan import ACCELERATOR_SPECS, DEFAULT_HEADROOM, accelerator, check_processes, infer_processes, plan
from jaxtom.plan_shapes import GIB, PlanError, mesh_sizes, model_config


def _size(x: float | None) -> str:
    """Bytes as GiB (or MiB below one GiB), right-aligned for the table."""
    if x is None:
        return "-"
    return f"{x / GIB:8.2f} GiB" if x >= GIB else f"{x / 2 ** 20:8.2f} MiB"


def report(result: dict[str, Any]) -> str:
    """The human-readable table printed before the JSON line."""
    m, mesh, u = result["model"], result["mesh"], result["update"]
    count = lambda n: f"{n / 1e9:.3f}B" if n >= 1e8 else f"{n:,}"  # noqa: E731
    lines = [f"model {m['path'] or '(config sizes)'}: {m['family']}, {count(m['params'])} "
             f"params ({count(m['trainable_params'])} trainable), params "
             f"{m['param_dtype']}, compute {m['compute_dtype']}",
             f"mesh data={mesh['data']} fsdp={mesh['fsdp']} tensor={mesh['tensor']} "
             f"({mesh['devices']} devices), {mesh['processes']} process(es)"
             + (f" (inferred: {mesh['processes_inferred']})"
                if mesh.get("processes_inferred") else ""),
             f"update step: {u['rows']} rows x {u['row_len']} tokens "
             f"({u['rows_per_device_per_micro_batch']} per device per micro-batch)"
             + (f" + {u['prediction_rows']} prediction rows x {u['prediction_row_len']}"
                if u["prediction_rows"] else "")
             + f", compiled in {u['compile_seconds']:.0f} s; per device:"]
    pad = u["padding"]
    lines.append(f"  padding: {pad['padding_rows']} empty rows on top of {pad['rows']} "
                 f"(+{pad['fraction']:.0%} update compute)")
    if "less_padding" in u:
        better = u["less_padding"]
        data, fsdp, tensor = better["mesh"]
        lines.append(f"  note: mesh.data={data} mesh.fsdp={fsdp} mesh.tensor={tensor} pads "
                     f"{better['padding']['padding_rows']} rows "
                     f"(+{better['padding']['fraction']:.0%}) on these devices")
    if u["prediction_rows_left_out"]:
        lines.append("  note: the config sizes CToM's prediction rows from the data "
                     "(pred_rows=0), so they are not in this plan; set ctom.pred_rows to "
                     "plan them")
    for key, label in (("params", "trainable parameters"), ("frozen_params", "frozen parameters"),
                       ("reference_params", "reference copy"),
                       ("optimizer_state", "optimizer state"),
                       ("gradients", "gradients (in temporaries)"), ("batch", "batch")):
        lines.append(f"  {label:<38}{_size(u['memory'][key])}")
    lines.append(f"  {'XLA temporaries (activations, grads)':<38}{_size(u['xla']['temporaries'])}")
    lines.append(f"  {'XLA peak (args + outputs + temps)':<38}{_size(u['xla']['peak'])}")
    if u.get("kept_start_model"):
        lines.append(f"  {'starting model the run keeps':<38}{_size(u['kept_start_model'])}"
                     "  (its trained params; on top of both peaks)")
    if "rollout" in result:
        r = result["rollout"]
        procs = (f", {r['rows_per_process']} per process x {r['processes']} processes"
                 if r["processes"] > 1 else "")
        lines += [f"rollout (one sampler call over the global mesh): {r['rows']} rows{procs} "
                  f"({r['rows_per_device']} per device), prompt {r['prompt_len']} + cache "
                  f"{r['cache_len']} slots, compiled in {r['compile_seconds']:.0f} s; per device:",
                  f"  {'KV cache':<38}{_size(r['memory']['kv_cache'])}",
                  f"  {'sampler weights (extra copies)':<38}"
                  f"{_size(r['memory']['sampler_weights_extra'])}  "
                  + ("(a compute-dtype copy of the weights)"
                     if r["memory"]["sampler_weights_extra"]
                     else "(it reads the train state's params in place)")]
        if r["memory"].get("kept_kv_store"):
            lines.append(f"  {'kept KV store (CToM, all conversations)':<38}"
                         f"{_size(r['memory']['kept_kv_store'])}  (2x while it grows)")
        lines += [f"  {'XLA temporaries (' + name + ')':<38}{_size(x['temporaries'])}"
                  for name, x in r["programs"].items()]
        lines.append(f"  {'peak with the train state resident':<38}"
                     f"{_size(r['peak_with_train_state'])}")
    if "resident" in result:
        lines.append("resident per device (live buffers, temporaries aside): " + "; ".join(
            f"{point} {_size(sum(terms.values())).strip()}"
            for point, terms in result["resident"].items()))
    f = result["flops_per_rollout_step"]
    lines.append(f"FLOPs per rollout step: update {f['update_total']:.3e} "
                 f"({f['optimizer_updates']} optimizer update(s), "
                 f"{f['update_per_device']:.3e} per device)"
                 + (f", sampling {f['sampling_total']:.3e}" if f["sampling_total"] else ""))
    peak = result["per_device_peak_bytes"]
    lines.append(f"per-device peak {_size(peak).strip()}; fits (at {result['headroom']:.0%} of "
                 "the chip): " + ", ".join(f"{k} {'yes' if v else 'NO'}"
                                           for k, v in result["fits"].items()))
    lines.append("chips (bf16 peak per device): " + ", ".join(
        f"{k} {a['bf16_tflops']:.0f} TFLOP/s" for k, a in result["accelerators"].items()))
    if not all(result["fits"].values()):
        lines.append("largest term: " + largest_term(result))
    return "\n".join(lines)


def largest_term(result: dict[str, Any]) -> str:
    """The biggest per-device item of the plan and the settings that shrink it."""
    u, r = result["update"], result.get("rollout")
    terms = {"update temporaries": (u["xla"]["temporaries"],
                                    "they grow with rows per device per micro-batch and "
                                    "row_len; raise step.micro_batches or the data/fsdp axes, "
                                    "or shorten trainer.row_len"),
             "train state": (u["memory"]["train_state"],
                             "it shrinks with more fsdp (or tensor) devices, or LoRA")}
    if r is not None:
        terms["rollout temporaries"] = (r["xla"]["temporaries"],
                                        "they grow with a sampler call's rows per device and "
                                        "prompt length; lower trainer.rollout_rows or add "
                                        "data/fsdp devices")
        terms["KV cache"] = (r["memory"]["kv_cache"], "it grows with a sampler call's rows per "
                             "device and row_len; lower trainer.rollout_rows or add data/fsdp "
                             "devices")
        if r["memory"].get("kept_kv_store"):
            terms["kept KV store"] = (r["memory"]["kept_kv_store"],
                                      "it grows with the step's conversations (prompts_per_step"
                                      " x group_size) and row_len; add data/fsdp devices or "
                                      "set ctom.reuse_cache=False")
    name = max(terms, key=lambda k: terms[k][0])
    size, hint = terms[name]
    return f"{name} ({_size(size).strip()}): {hint}"


def _set_device_count(n: int) -> None:
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                   os.environ.get("XLA_FLAGS", "")).strip()
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax  # imported already by the config; its backend has not started yet

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n)


def _jax_ready_for(n: int) -> bool | None:
    """True: JAX already runs on >= n CPU devices; False: initialised otherwise; None: not yet."""
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        return None
    import jax
    return jax.default_backend() == "cpu" and jax.device_count() >= n


def run(args) -> int:
    from jaxtom.config import ConfigError, load_config

    try:
        if not 0 < args.headroom <= 1:
            raise PlanError(f"--headroom must be a fraction in (0, 1], got {args.headroom}")
        config = load_config(args.config, args.overrides)
        n = math.prod(mesh_sizes(config.mesh, args.devices))
        kind = accelerator(args.accelerator) if args.accelerator else None
        processes, inferred = ((args.processes, None) if args.processes is not None
                               else infer_processes(n, kind))
        check_processes(config, n, processes, inferred)
        model_config(config.model)
    except (ConfigError, PlanError) as err:
        print(str(err) if isinstance(err, ConfigError) else f"plan error: {err}",
              file=sys.stderr)
        return 2
    ready = _jax_ready_for(n)
    if ready is False:  # JAX already started on other devices: plan in a fresh process
        env = dict(os.environ)
        flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", ""))
        env.update(XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={n}".strip(),
                   JAX_PLATFORMS="cpu")
        cmd = [sys.executable, "-m", "jaxtom.commands.plan", args.config, *args.overrides,
               "--headroom", str(args.headroom)]
        cmd += ["--devices", str(args.devices)] if args.devices else []
        cmd += ["--no-rollout"] if args.no_rollout else []
        cmd += ["--processes", str(args.processes)] if args.processes is not None else []
        cmd += ["--accelerator", args.accelerator] if args.accelerator else []
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        return done.returncode
    if ready is None:
        _set_device_count(n)
    start = time.perf_counter()
    try:
        result = plan(config, devices=args.devices, rollout=not args.no_rollout,
                      headroom=args.headroom, processes=processes,
                      processes_inferred=inferred)
    except (ConfigError, PlanError) as err:
        print(str(err) if isinstance(err, ConfigError) else f"plan error: {err}",
              file=sys.stderr)
        return 2
    result["seconds"] = time.perf_counter() - start
    print(report(result))
    print(json.dumps(result))
    return 0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="path to a configs/*.py file defining get_config()")
    p.add_argument("overrides", nargs="*", metavar="section.field=value",
                   help="dotted overrides, e.g. mesh.fsdp=8 step.micro_batches=16")
    p.add_argument("--devices", type=int, default=None,
                   help="devices to plan for when the mesh has a -1 axis")
    p.add_argument("--headroom", type=float, default=DEFAULT_HEADROOM,
                   help="fraction of each chip's memory a plan may fill (default 0.9)")
    p.add_argument("--processes", type=int, default=None,
                   help="processes (hosts) the run spans; a sampler call samples up to "
                        "trainer.rollout_rows rows per process (default: inferred from the "
                        "devices and --accelerator, and printed)")
    p.add_argument("--accelerator", default=None,
                   help="the chip the run will use, to infer --processes from its devices "
                        f"per host: one of {[k.split('-')[0] for k in ACCELERATOR_SPECS]} "
                        "(default: one host up to 8 devices, else 4 devices per host)")
    p.add_argument("--no-rollout", action="store_true",
                   help="plan the update step only (skip compiling the sampler)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("plan", help="per-device memory and FLOPs of a config, compiled "
                              "on simulated devices", description=__doc__.splitlines()[0])
    _arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jaxtom plan", description=__doc__.splitlines()[0])
    _arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
