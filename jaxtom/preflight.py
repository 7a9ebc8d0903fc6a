"""Checks of a host against a config before a long run starts (`jaxtom doctor`).

Each check returns a `Check`: its name, whether it passed and one line saying what was found
or, on failure, what is wrong and what was expected. They look at what a run's first hour
would trip over: JAX on the wrong backend (a TPU or GPU host running the CPU build), a mesh
that does not cover the devices, processes that did not all join, a workdir that cannot be
written (a `gs://` path without gcsfs), a model path that is missing or truncated, and a CToM
user simulator nobody answers at.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import socket
import struct
import uuid
from pathlib import Path
from urllib.parse import urlparse

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxtom import storage
from jaxtom.config import resolve_model_path
from jaxtom.http_client import HTTPFailure, get_json
from jaxtom.models.hf_io import open_hf_dir

# the packages a gs:// path needs: etils.epath reads buckets through gcsfs, orbax asks
# google-cloud-storage about the bucket (pyproject's `gcs` extra; `tpu` and `cuda` include it)
GCS_MODULES = ("gcsfs", "google.cloud.storage")
GCS_PIP = "pip install 'gcsfs>=2024.2' 'google-cloud-storage>=2.14'"
INSTALL_HINT = {"tpu": "bash launch/install.sh tpu (or pip install -e '.[tpu]')",
                "gpu": "bash launch/install.sh cuda (or pip install -e '.[cuda]')"}


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def missing_modules(names) -> list[str]:
    """The modules of `names` that cannot be imported."""
    out = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def filesystem_problem(path: str) -> str | None:
    """Why `path`'s storage cannot be reached from this Python (a missing package), or None."""
    scheme = urlparse(path).scheme if "://" in path else ""
    if scheme in ("gs", "gcs"):
        missing = missing_modules(GCS_MODULES)
        if missing:
            return (f"{path} is on Google Cloud Storage, which needs {' and '.join(missing)} "
                    f"(not installed): {GCS_PIP}, or reinstall with launch/install.sh")
    return None


# ---- backend and devices -------------------------------------------------------------------
def accelerator_on_host() -> str | None:
    """"tpu" or "gpu" when the host has such chips (their device files), whatever JAX sees."""
    if any(Path(p).exists() for p in ("/dev/accel0", "/dev/vfio/0")):
        return "tpu"
    if Path("/dev/nvidia0").exists():
        return "gpu"
    return None


def check_backend(expected: str | None = None) -> Check:
    """The backend JAX runs on and the devices' kind, against `expected` (or against the chips
    the host has: a TPU or GPU host whose JAX fell back to the CPU lacks the accelerator
    build of jaxlib)."""

    backend = jax.default_backend()
    kinds = sorted({d.device_kind for d in jax.devices()})
    found = (f"{backend}: {jax.device_count()} x {' + '.join(kinds)} "
             f"({jax.local_device_count()} on this process)")
    if expected is not None and backend != expected:
        hint = INSTALL_HINT.get(expected, "")
        return Check("backend", False, f"JAX runs on {found}; expected {expected} (--backend)"
                     + (f": install JAX for it, {hint}" if hint else ""))
    host = accelerator_on_host()
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if expected is None and backend == "cpu" and host and "cpu" not in platforms.split(","):
        return Check("backend", False, f"this host has {host.upper()} chips but JAX runs on "
                     f"{found}; expected {host}: install JAX for it, {INSTALL_HINT[host]} "
                     "(or set JAX_PLATFORMS=cpu to run on the CPU on purpose)")
    if len(kinds) > 1:
        return Check("backend", False, f"{found}: mixed device kinds; expected one kind "
                     "for every device of the mesh")
    return Check("backend", True, found)


def check_mesh(mesh_section) -> Check:
    """The config's mesh against the devices: data x fsdp x tensor must be every device (one
    size may be -1, the devices the others leave)."""

    sizes = [mesh_section.data, mesh_section.fsdp, mesh_section.tensor]
    n = jax.device_count()
    given = f"mesh (data, fsdp, tensor)={tuple(sizes)}"
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if n % known:
            return Check("mesh", False, f"{given}: {known} does not divide the {n} devices; "
                         f"expected the fixed sizes to divide {n}")
        sizes[sizes.index(-1)] = n // known
    total = math.prod(sizes)
    if total > n:
        return Check("mesh", False, f"{given} needs {total} devices but JAX sees {n}; expected "
                     f"sizes whose product is {n} (or one -1)")
    if total < n:
        return Check("mesh", False, f"{given} covers {total} of the {n} devices; expected "
                     f"all of them: set one size to -1 (e.g. mesh.fsdp=-1)")
    return Check("mesh", True, f"{given} covers all {n} devices")


def check_processes(config, expected: int | None = None) -> Check:
    """How many processes joined (an all-gather of their ids when there are several, so the
    coordination and collectives work), against `expected` and the config's needs."""

    n, me = jax.process_count(), jax.process_index()
    local = jax.local_device_count()
    found = f"{n} process(es), this is {me}, {local} device(s) here"
    if n > 1:
        got = np.asarray(multihost_utils.process_allgather(np.asarray([me, local], np.int64)))
        got = got.reshape(n, 2)
        if sorted(got[:, 0].tolist()) != list(range(n)):
            return Check("processes", False, f"{found}; the all-gather returned process ids "
                         f"{got[:, 0].tolist()}; expected 0..{n - 1}")
        if len(set(got[:, 1].tolist())) != 1:
            return Check("processes", False, f"{found}; devices per process "
                         f"{got[:, 1].tolist()}; expected the same number on every process")
        found += ", all-gather across processes ok"
    if expected is not None and n != expected:
        return Check("processes", False, f"{found}; expected {expected} (--processes): start "
                     "the command on every host (--worker=all) with JAXTOM_DISTRIBUTED=1 or "
                     "the launcher's variables")
    if config.trainer.prompts_per_step < n:
        return Check("processes", False, f"{found}; trainer.prompts_per_step="
                     f"{config.trainer.prompts_per_step} is fewer: expected at least one "
                     "task record per process and step")
    return Check("processes", True, found)


# ---- storage --------------------------------------------------------------------------------
def check_workdir(workdir: str) -> Check:
    """`workdir` is writable from here: the directory is created (as a run creates it), a
    probe file written, read back and deleted, all through etils.epath as the run writes."""

    try:
        storage.check_shared_workdir(workdir)
    except ValueError as err:
        return Check("workdir", False, str(err))
    problem = filesystem_problem(workdir)
    if problem:
        return Check("workdir", False, f"trainer.workdir={problem}")
    root = storage.path(workdir)
    probe = root / f".jaxtom-doctor-{socket.gethostname()}-{os.getpid()}"
    token = uuid.uuid4().hex
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe.write_text(token)
        back = probe.read_text()
        probe.unlink()
    except Exception as err:  # noqa: BLE001  (any storage error is this check's finding)
        return Check("workdir", False, f"trainer.workdir={workdir!r} is not writable: "
                     f"{type(err).__name__}: {err}; expected a directory this host can "
                     "create and write (a shared mount or a bucket it has write access to)")
    if back != token:
        return Check("workdir", False, f"trainer.workdir={workdir!r}: a probe file read back "
                     "other bytes than were written; expected the same bytes")
    where = ("" if storage.is_uri(workdir) or os.path.isabs(workdir)
             else " (relative: fine for one process, not for several hosts)")
    return Check("workdir", True, f"{workdir} writable (probe file written, read, deleted)"
                 + where)


# ---- checkpoints ----------------------------------------------------------------------------
def describe_checkpoint(path: str) -> str:
    """One line on the checkpoint at `path` after reading its headers; raises ValueError or
    OSError naming what is wrong. A .gguf file's magic and version, or a Hugging Face
    directory's config.json and every safetensors header (each tensor's bytes inside its
    file, which finds a truncated download)."""

    p = storage.path(path)
    if p.suffix == ".gguf":
        if storage.is_uri(p):
            raise ValueError(f"{path}: a .gguf checkpoint must be a local file")
        if not p.is_file():
            raise FileNotFoundError(f"{path}: no such .gguf file")
        with p.open("rb") as fh:
            head = fh.read(8)
        if len(head) < 8 or head[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (it starts with {head[:4]!r}, "
                             "expected b'GGUF')")
        version = struct.unpack("<I", head[4:])[0]
        return f"{path}: GGUF v{version}, {os.path.getsize(os.fspath(p))} bytes"
    if not p.is_dir():
        raise FileNotFoundError(f"{path}: neither a Hugging Face model directory nor a "
                                ".gguf file exists there")
    config_file = p / "config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{path}: no config.json in the directory; expected a Hugging "
                                "Face model directory (config.json + *.safetensors)")
    try:
        hf = json.loads(config_file.read_text())
    except ValueError as err:
        raise ValueError(f"{config_file}: not JSON ({err})") from None
    source = open_hf_dir(p)
    return (f"{path}: config.json ({hf.get('model_type', 'no model_type')}), "
            f"{len(source.names)} tensors, safetensors headers intact")


def check_model(path: str, field: str = "model.path") -> Check:
    """The checkpoint a run loads is there and readable (headers only: no weights read)."""

    name = "model" if field == "model.path" else "simulator model"
    if not path:
        return Check(name, True, f"{field} is empty: a random model of the config's sizes, "
                     "nothing to read")
    resolved = resolve_model_path(path)
    problem = filesystem_problem(resolved)
    if problem:
        return Check(name, False, f"{field}={problem}")
    try:
        return Check(name, True, describe_checkpoint(resolved))
    except FileNotFoundError as err:
        return Check(name, False, f"{field}: {err}; expected a Hugging Face directory "
                     "(config.json + *.safetensors) or a .gguf file")
    except (OSError, ValueError, KeyError) as err:
        return Check(name, False, f"{field}: {err}")


# ---- the CToM user simulator ----------------------------------------------------------------
def models_url(base_url: str) -> str:
    """The OpenAI-compatible `/models` listing beside a chat-completions base URL."""
    base = base_url.rstrip("/").removesuffix("/chat/completions")
    return base + "/models"


def check_simulator(config, timeout_s: float = 5.0) -> list[Check]:
    """A CToM config's user simulator: an HTTP one answers a GET of its `/models` listing
    within `timeout_s` (and serves `ctom.simulator_model` when it lists models); an in-process
    LLM one has a readable checkpoint."""

    s = getattr(config, "ctom", None)
    if s is None:
        return [Check("simulator", True, "none (not a CToM config)")]
    if s.simulator == "scripted":
        return [Check("simulator", True, "scripted, in process: nothing to reach")]
    if s.simulator == "llm":
        return [check_model(s.simulator_model, "ctom.simulator_model")]
    if not s.simulator_url:
        return [Check("simulator", False, "ctom.simulator=http without ctom.simulator_url; "
                      "expected the OpenAI-compatible /v1 base URL (CTOM_SIMULATOR_URL)")]
    url = models_url(s.simulator_url)
    try:
        reply = get_json(url, timeout_s=timeout_s)
    except HTTPFailure as err:
        return [Check("simulator", False, f"ctom.simulator_url={s.simulator_url}: GET {url} "
                      f"{err}; expected an OpenAI-compatible server answering within "
                      f"{timeout_s:g} s (start it, or set ctom.simulator_url / "
                      "CTOM_SIMULATOR_URL)")]
    served = [m.get("id") for m in reply.get("data", []) if isinstance(m, dict)] \
        if isinstance(reply, dict) else []
    if served and s.simulator_model and s.simulator_model not in served:
        return [Check("simulator", False, f"{s.simulator_url} serves {served}; expected "
                      f"ctom.simulator_model={s.simulator_model!r} among them")]
    host = urlparse(s.simulator_url).hostname or ""
    note = ("; loopback address: every host talks to its own server"
            if jax.process_count() > 1 and (host == "localhost" or host.startswith("127."))
            else "")
    return [Check("simulator", True, f"{s.simulator_url} answers (serves "
                  f"{served or 'no model list'}){note}")]
