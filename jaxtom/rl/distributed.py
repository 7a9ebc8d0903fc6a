"""What a rollout needs to run on one process of many: sampling its shard, agreeing on sizes,
averaging metrics. On a single process every function is the plain local operation.

Sampling is SPMD over the global mesh, with the training parameters where they live (no
replica, no copy): every process contributes its prompts, all processes run the same sampler
calls over all rows (rows split over every device of the mesh), and each keeps its own
rows' tokens. Rows are sampled with their global row ids (`fold_in(key, row)`), so the tokens
do not depend on the number of processes.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from jaxtom.sampling import sampler
from jaxtom.buckets import power_of_two
from jaxtom.models.decoder import Decoder


def _multi() -> bool:
    return jax.process_count() > 1


def _allgather(x: np.ndarray) -> np.ndarray:
    """[processes, *x.shape]: every process's `x` (all must pass the same shape).

    `process_allgather` compiles a program per shape: each dimension is zero-padded to a
    power of two for the gather and cut back after, so the few small arrays gathered here
    (counts, metric sums) take a few programs whatever their sizes."""
    from jax.experimental import multihost_utils
    x = np.asarray(x)
    padded = np.zeros([power_of_two(n) for n in x.shape], x.dtype)
    real = tuple(slice(0, n) for n in x.shape)
    padded[real] = x
    out = np.asarray(multihost_utils.process_allgather(padded))
    return out.reshape(jax.process_count(), *padded.shape)[(slice(None),) + real]


def max_over_processes(n: int) -> int:
    """The largest `n` any process holds (every process must call it)."""
    if not _multi():
        return int(n)
    return int(np.max(_allgather(np.asarray([n], np.int64))))


def weighted_mean(metrics: dict[str, float], count: int) -> dict[str, float]:
    """Per-process metric means -> means over all processes' items (weighted by `count`)."""
    if not _multi():
        return {k: float(v) for k, v in metrics.items()}
    keys = sorted(metrics)
    local = np.asarray([count] + [metrics[k] * count for k in keys], np.float64)
    total = _allgather(local).sum(0)
    return {k: float(v / max(total[0], 1.0)) for k, v in zip(keys, total[1:])}


GATHER_CHUNK = 1 << 16  # bytes of pickled objects per host all-gather: its one shape


def gather_objects(obj) -> list:
    """Every process's picklable `obj`, in process order (a collective). For host-side
    records (rollouts' token ids, task records), not arrays of weights.

    The pickled bytes travel in chunks of `GATHER_CHUNK` (the last zero-padded), as many
    gathers as the largest process needs: one compiled program serves every size, where a
    gather of the whole would compile one per size met (a rollout's size changes with
    every step's prompts and completions)."""
    if not _multi():
        return [obj]
    import pickle
    blob = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = _allgather(np.asarray([blob.size], np.int64))[:, 0]
    chunks = -(-int(sizes.max()) // GATHER_CHUNK)
    padded = np.zeros(chunks * GATHER_CHUNK, np.uint8)
    padded[:blob.size] = blob
    rows = np.concatenate([_allgather(padded[i * GATHER_CHUNK:(i + 1) * GATHER_CHUNK])
                           for i in range(chunks)], axis=1)
    return [pickle.loads(row[:n].tobytes()) for row, n in zip(rows, sizes)]


def call_slices(counts: Sequence[int], rows_per_call: int):
    """The sampler calls of a global rollout whose processes hold `counts` rows: per call,
    per process, the slice of that process's rows it contributes (each process's next
    `rows_per_call`, all at once when 0), so every process makes the same calls."""
    longest = max(counts, default=0)
    step = rows_per_call if rows_per_call > 0 else max(longest, 1)
    return [[slice(min(lo, n), min(lo + step, n)) for n in counts]
            for lo in range(0, longest, step)]


def gather_token_lists(lists: Sequence[Sequence[int]]) -> list[list[list[int]]]:
    """Every process's token lists, in process order (a collective: `gather_objects`)."""
    return gather_objects([list(map(int, x)) for x in lists])


def generate_rows(model: Decoder, prompts: Sequence[Sequence[int]], row_ids: np.ndarray, *,
                  key: jax.Array, rows_per_call: int = 0, **kwargs) -> list[list[int]]:
    """Samples this process's prompts (global `row_ids`); returns the generated token lists.

    `rows_per_call` > 0 samples at most that many of each process's rows per sampler call
    (the prefill's and the cache's memory grow with the rows of a call); since every row
    draws from its own key the tokens are the same however the rows are split. On several
    processes every call holds each process's next `rows_per_call` rows, so all processes
    make the same number of calls."""
    row_ids = np.asarray(row_ids, np.int64).reshape(-1)
    if len(row_ids) != len(prompts):
        raise ValueError(f"row_ids has {len(row_ids)} entries for {len(prompts)} prompts")
    everyone = gather_token_lists(prompts)
    ids = [x[0] if x else [] for x in gather_token_lists([row_ids.tolist()])]
    me = jax.process_index()
    out: list[list[int]] = []
    for parts in call_slices([len(p) for p in everyone], rows_per_call):
        rows = [r for p, part in zip(everyone, parts) for r in p[part]]
        rids = [i for p, part in zip(ids, parts) for i in p[part]]
        lo = sum(part.stop - part.start for part in parts[:me])
        result = sampler.generate(model, rows, key=key, row_ids=np.asarray(rids), **kwargs)
        out += result.sequences()[lo:lo + parts[me].stop - parts[me].start]
    return out
