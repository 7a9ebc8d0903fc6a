"""What a rollout needs to run on one process of many: sampling its shard, agreeing on sizes,
averaging metrics. On a single process every function is the plain local operation.

Sampling: the training state is sharded over the global mesh, which no single process can
run alone, so each process samples its shard of the prompts with a replica of the weights on
its own devices (rows split over them): the parameters are all-gathered on device, never
through host memory. Rows are sampled with their global row ids (`fold_in(key, row)`), so
the tokens do not depend on the number of processes. The replica costs one copy of the
weights per device during the rollout; a sampler that runs SPMD over the global mesh would
avoid it.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxtom import parallel, sampling
from jaxtom.models.decoder import Decoder


def _multi() -> bool:
    return jax.process_count() > 1


def max_over_processes(n: int) -> int:
    """The largest `n` any process holds (every process must call it)."""
    if not _multi():
        return int(n)
    from jax.experimental import multihost_utils
    return int(np.max(multihost_utils.process_allgather(np.asarray([n], np.int64))))


def weighted_mean(metrics: dict[str, float], count: int) -> dict[str, float]:
    """Per-process metric means -> means over all processes' items (weighted by `count`)."""
    if not _multi():
        return {k: float(v) for k, v in metrics.items()}
    from jax.experimental import multihost_utils
    keys = sorted(metrics)
    local = np.asarray([count] + [metrics[k] * count for k in keys], np.float64)
    total = np.asarray(multihost_utils.process_allgather(local)).reshape(-1, len(local)).sum(0)
    return {k: float(v / max(total[0], 1.0)) for k, v in zip(keys, total[1:])}


def local_replica(model: Decoder) -> Decoder:
    """`model` itself on one process; with several, a copy on this process's devices."""
    mesh = sampling.model_mesh(model)
    if not _multi() or mesh is None:
        return model
    graphdef, state = nnx.split(model)
    replicated = jax.jit(lambda s: s, out_shardings=NamedSharding(mesh, PartitionSpec()))(state)
    devices = jax.local_devices()
    local_mesh = parallel.make_mesh(len(devices), 1, 1, devices=devices)
    rep = NamedSharding(local_mesh, PartitionSpec())
    local = jax.tree.map(lambda x: jax.device_put(x.addressable_data(0), rep), replicated)
    return nnx.merge(graphdef, local)


def generate_rows(model: Decoder, prompts: Sequence[Sequence[int]], row_ids: np.ndarray, *,
                  key: jax.Array, rows_per_call: int = 0, **kwargs) -> list[list[int]]:
    """Samples this process's prompts (global `row_ids`); returns the generated token lists.

    `rows_per_call` > 0 samples at most that many rows per sampler call: the prefill's
    memory grows with the rows of a call, and since every row draws from its own key the
    tokens are the same however the rows are split."""
    model = local_replica(model)
    row_ids = np.asarray(row_ids)
    step = rows_per_call if rows_per_call > 0 else max(len(prompts), 1)
    out: list[list[int]] = []
    for lo in range(0, len(prompts), step):
        out += sampling.generate(model, list(prompts[lo:lo + step]), key=key,
                                 row_ids=row_ids[lo:lo + step], **kwargs).sequences()
    return out
