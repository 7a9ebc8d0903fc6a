"""Device meshes, logical-axis rules and placement helpers.

Parameters and activations name their axes logically ("embed", "q_heads", "batch", ...);
one rule table maps those names to the mesh axes `data`, `fsdp` and `tensor`, so a model
never mentions a mesh and the same code runs on one CPU or a pod slice.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# logical axis -> mesh axis (or tuple of mesh axes, or None for replicated)
DEFAULT_RULES: dict[str, Any] = {
    "batch": BATCH_AXES,
    "layers": None,
    "vocab": "tensor",
    "embed": "fsdp",
    "q_heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "norm": None,
    "head_dim": None,
    "lora_rank": None,
    "seq": None,
    "cache_seq": None,
}


def make_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (all devices by default).

    One size may be -1 to take whatever the others leave over.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got (data, fsdp, tensor)={sizes}")
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"mesh sizes must be positive (or one -1), got {sizes}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if len(devices) % known:
            raise ValueError(f"mesh {sizes}: {known} does not divide {len(devices)} devices")
        sizes[sizes.index(-1)] = len(devices) // known
    if math.prod(sizes) != len(devices):
        raise ValueError(
            f"mesh (data, fsdp, tensor)={tuple(sizes)} needs {math.prod(sizes)} devices but "
            f"{len(devices)} are available; the product of the sizes must equal the device count")
    return Mesh(device_grid(sizes, devices), MESH_AXES)


def device_grid(sizes: Sequence[int], devices: Sequence[jax.Device]) -> np.ndarray:
    """`devices` as a (data, fsdp, tensor) array laid out on the interconnect by
    `mesh_utils.create_device_mesh`: on TPU the chips of the most talkative axes (tensor,
    then fsdp) are physical neighbours; on GPU devices are ordered by id; on CPU it is
    `devices` in order. Devices of several slices (`device.slice_index`, multi-slice TPU)
    are joined by `create_hybrid_device_mesh` with the data axis across the slices, so only
    the gradient all-reduce crosses the data-centre network."""
    from jax.experimental import mesh_utils

    sizes = [int(s) for s in sizes]
    slices = sorted({getattr(d, "slice_index", 0) for d in devices})
    if len(slices) > 1:
        n = len(slices)
        if sizes[0] % n:
            raise ValueError(f"mesh (data, fsdp, tensor)={tuple(sizes)} spans {n} slices; the "
                             f"data axis runs across slices, so mesh.data must be a multiple "
                             f"of {n} (e.g. mesh.data={n})")
        return mesh_utils.create_hybrid_device_mesh(
            [sizes[0] // n, *sizes[1:]], [n, 1, 1], devices, allow_split_physical_axes=True)
    return mesh_utils.create_device_mesh(sizes, devices, allow_split_physical_axes=True)


def logical_to_spec(axes: Sequence[str | None], rules: dict[str, Any] | None = None
                    ) -> PartitionSpec:
    """Maps logical axis names to a PartitionSpec; a mesh axis is used at most once."""
    rules = DEFAULT_RULES if rules is None else rules
    used: set[str] = set()
    out = []
    for name in axes:
        target = rules.get(name) if name is not None else None
        names = (target,) if isinstance(target, str) else tuple(target or ())
        names = tuple(n for n in names if n not in used)
        used.update(names)
        out.append(None if not names else names[0] if len(names) == 1 else names)
    return PartitionSpec(*out)


def fit_spec(spec: PartitionSpec, shape: Sequence[int], mesh: Mesh) -> PartitionSpec:
    """Drops mesh axes that do not divide a dimension, so odd sizes are replicated."""
    out = []
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        names = (entry,) if isinstance(entry, str) else tuple(entry or ())
        kept, size = [], 1
        for n in names:
            if dim % (size * mesh.shape[n]) == 0:
                kept.append(n)
                size *= mesh.shape[n]
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    return PartitionSpec(*out)


def named_sharding(mesh: Mesh, axes: Sequence[str | None], shape: Sequence[int],
                   rules: dict[str, Any] | None = None) -> NamedSharding:
    return NamedSharding(mesh, fit_spec(logical_to_spec(axes, rules), shape, mesh))


def batch_sharding(mesh: Mesh, ndim: int, batch_size: int | None = None) -> NamedSharding:
    """Leading axis over data x fsdp, the rest replicated."""
    spec = PartitionSpec(BATCH_AXES, *([None] * (ndim - 1)))
    if batch_size is not None:
        spec = fit_spec(spec, (batch_size,) + (1,) * (ndim - 1), mesh)
    return NamedSharding(mesh, spec)


def shard_batch(x: Any, mesh: Mesh) -> Any:
    """Places every array leaf of a batch with its leading axis over data x fsdp."""
    return jax.tree.map(lambda a: jax.device_put(a, batch_sharding(mesh, np.ndim(a),
                                                                   np.shape(a)[0])), x)


def variable_axes(var) -> tuple | None:
    """Logical axes stored on an NNX variable (its `logical_axes` metadata)."""
    meta = var.get_metadata() if hasattr(var, "get_metadata") else {}
    return meta.get("logical_axes")


def state_shardings(state: Any, mesh: Mesh, rules: dict[str, Any] | None = None) -> Any:
    """NamedShardings for an NNX state whose variables carry logical axes."""
    from flax import nnx

    def one(var):
        axes = variable_axes(var) or (None,) * len(var.get_value().shape)
        return var.replace(named_sharding(mesh, axes, var.get_value().shape, rules))

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def place_state(state: Any, mesh: Mesh, rules: dict[str, Any] | None = None) -> Any:
    """Moves an NNX state onto the mesh according to its logical axes."""
    return jax.device_put(state, state_shardings(state, mesh, rules))


def host_value(x) -> np.ndarray:
    """The whole value of array `x` as NumPy on this host. An array other processes hold
    parts of is all-gathered (a collective: every process must call it, in the same order);
    a replicated one is read from a local shard."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.sharding.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


_ZEROS: dict = {}


def sharded_zeros(shapes: Any, shardings: Any) -> Any:
    """Zeros of `shapes` (a pytree of ShapeDtypeStructs) created in place, each device
    writing only its own shard: no full-size transient on one device, and usable on a mesh
    that spans several processes. The program is kept per structure, shapes and shardings:
    a sampler call per rollout step would otherwise compile a fresh one each time."""
    leaves, treedef = jax.tree.flatten(shapes)
    key = (treedef, tuple((s.shape, jnp.dtype(s.dtype)) for s in leaves),
           tuple(jax.tree.leaves(shardings)))
    if key not in _ZEROS:
        _ZEROS[key] = jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                                   shapes), out_shardings=shardings)
    return _ZEROS[key]()


def init_sharded(make, mesh: Mesh | None):
    """The NNX module `make()` builds, each parameter created in its sharded place on `mesh`
    (one compiled program writing each device's shard), never whole on one device. The
    compiled initialiser may round differently from `make()` in the last bit, so a mesh of
    one device (where nothing is split) keeps `make()`'s exact values: a run on one device
    reproduces eager initialisation. `mesh` None: `make()` as it is."""
    from flax import nnx
    if mesh is None or mesh.devices.size == 1:
        module = make()
        if mesh is not None:
            graphdef, state = nnx.split(module)
            module = nnx.merge(graphdef, place_state(state, mesh))
        return module
    graphdef, state = nnx.split(nnx.eval_shape(make))
    state = jax.jit(lambda: nnx.split(make())[1], out_shardings=state_shardings(state, mesh))()
    return nnx.merge(graphdef, state)


def run_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1) -> Mesh:
    """The mesh of a run's `mesh` section: over all devices with a -1 size, else over the
    first data x fsdp x tensor devices (a (1, 1, 1) config runs on one device of a bigger
    host). Several processes must all take part, so there the mesh must cover every device.
    """
    sizes = (data, fsdp, tensor)
    n = jax.device_count()
    if -1 in sizes or math.prod(sizes) == n:
        return make_mesh(data, fsdp, tensor)
    if jax.process_count() > 1:
        raise ValueError(f"mesh (data, fsdp, tensor)={sizes} covers {math.prod(sizes)} of the "
                         f"{n} devices of this {jax.process_count()}-process run; every "
                         "process must take part: set one size to -1 (e.g. mesh.fsdp=-1)")
    if math.prod(sizes) > n:
        return make_mesh(data, fsdp, tensor)  # raises: not enough devices
    return make_mesh(data, fsdp, tensor, devices=jax.devices()[:math.prod(sizes)])


DISTRIBUTED_ENV = "JAXTOM_DISTRIBUTED"
# variables a launcher sets when the run spans several processes (GKE TPU, SLURM, Open MPI)
_CLUSTER_VARS = ("JAX_COORDINATOR_ADDRESS", "TPU_WORKER_HOSTNAMES", "SLURM_NTASKS",
                 "OMPI_COMM_WORLD_SIZE")


def on_tpu_vm() -> bool:
    """Whether JAX found TPU chips and libtpu on this host when it was imported (a Cloud TPU
    VM), unless `JAX_PLATFORMS` rules TPUs out. Read from JAX's own import-time check, so no
    backend is started; `JAXTOM_DISTRIBUTED=1` is the switch that works whatever JAX exposes.
    """
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    if platforms and "tpu" not in platforms.split(","):
        return False  # e.g. CPU tests on a TPU VM: one process, no pod to join
    try:
        from jax._src import cloud_tpu_init
    except ImportError:
        return False
    return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> bool:
    """Starts multi-host JAX when asked to or when the host says it is part of a cluster.

    Triggers, in order: `JAXTOM_DISTRIBUTED=0` never starts it, `=1` always does (what
    launch/tpu_pod.sh sets); explicit arguments; the variables of a multi-process launcher
    (JAX_COORDINATOR_ADDRESS, GKE's TPU_WORKER_HOSTNAMES, SLURM with more than one task, Open
    MPI); a Cloud TPU VM, where `jax.distributed.initialize()` reads the slice's workers from
    the TPU metadata (one worker is a slice of one process). Arguments left None are
    detected by JAX. Returns True when `jax.distributed.initialize` was called.
    """
    flag = os.environ.get(DISTRIBUTED_ENV, "").strip()
    if flag not in ("", "0", "1"):
        raise ValueError(f"{DISTRIBUTED_ENV}={flag!r}: expected 1 (start jax.distributed), "
                         "0 (never) or unset (detect)")
    if flag == "0":
        return False
    explicit = coordinator_address is not None or num_processes is not None
    env_says = any(k in os.environ for k in _CLUSTER_VARS)
    if flag != "1":
        if env_says and os.environ.get("SLURM_NTASKS") == "1":
            return False  # a one-task SLURM job is a single process
        if not (explicit or env_says or on_tpu_vm()):
            return False
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
    return True
