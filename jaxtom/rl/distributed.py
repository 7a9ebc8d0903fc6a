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

from jaxtom import sampling
from jaxtom.models.decoder import Decoder


def _multi() -> bool:
    return jax.process_count() > 1


def _allgather(x: np.ndarray) -> np.ndarray:
    """[processes, *x.shape]: every process's `x` (all must pass the same shape)."""
    from jax.experimental import multihost_utils
    out = np.asarray(multihost_utils.process_allgather(np.asarray(x)))
    return out.reshape(jax.process_count(), *np.shape(x))


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


def gather_objects(obj) -> list:
    """Every process's picklable `obj`, in process order (a collective; one host
    all-gather of the pickled bytes). For small host-side records, not arrays of weights."""
    if not _multi():
        return [obj]
    import pickle
    blob = np.frombuffer(pickle.dumps(obj), np.uint8)
    size = max_over_processes(blob.size)
    padded = np.zeros(size, np.uint8)
    padded[:blob.size] = blob
    sizes = _allgather(np.asarray([blob.size], np.int64))[:, 0]
    return [pickle.loads(row[:n].tobytes()) for row, n in zip(_allgather(padded), sizes)]


def call_slices(counts: Sequence[int], rows_per_call: int):
    """The sampler calls of a global rollout whose processes hold `counts` rows: per call,
    per process, the slice of that process's rows it contributes (each process's next
    `rows_per_call`, all at once when 0), so every process makes the same calls."""
    longest = max(counts, default=0)
    step = rows_per_call if rows_per_call > 0 else max(longest, 1)
    return [[slice(min(lo, n), min(lo + step, n)) for n in counts]
            for lo in range(0, longest, step)]


def gather_token_lists(lists: Sequence[Sequence[int]]) -> list[list[list[int]]]:
    """Every process's token lists, in process order (a collective; one host all-gather)."""
    if not _multi():
        return [[list(map(int, x)) for x in lists]]
    n = max_over_processes(len(lists))
    width = max_over_processes(max((len(x) for x in lists), default=0))
    table = np.full((max(n, 1), max(width, 1)), -1, np.int64)
    lens = np.full(max(n, 1), -1, np.int64)
    for i, x in enumerate(lists):
        table[i, :len(x)] = x
        lens[i] = len(x)
    tables, all_lens = _allgather(table), _allgather(lens)
    return [[t[:m].tolist() for t, m in zip(tab, ln) if m >= 0]
            for tab, ln in zip(tables, all_lens)]


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
        result = sampling.generate(model, rows, key=key, row_ids=np.asarray(rids), **kwargs)
        out += result.sequences()[lo:lo + parts[me].stop - parts[me].start]
    return out
