"""CToM rollouts on several processes: every process runs the controller on the step's whole
set of conversations, in lockstep, and keeps only its share of the packed rows.

Why lockstep rather than each process running its own conversations: on a global mesh the
sampler (`jaxtom.sampling.sampler.generate`) is a collective, so every process must call it with the
same arguments, the same number of times. A conversation's phases depend on what it sampled
(ASK or DRAFT, how many revisions, when it ends), so processes running different
conversations would make different sequences of sampler calls; padding them to a common
schedule would need a collective agreement before every call. Running every conversation on
every process makes every call identical by construction, and the results cannot depend on
the number of processes: the step's conversations, sampler calls, targets and packed batch
are exactly those of a single process. The cost is host work (the controller's bookkeeping,
tokenising, packing the batch) repeated on every process; device work is not repeated, as
each sampler call runs once over the global mesh.

Host work that could differ between processes (a simulator behind HTTP, the coding
sandbox's time limits: anything with wall-clock or outside state) is computed once, each
process its share of the items, and the results are all-gathered (`shared_map`), so every
process continues with the same values and none can take another branch and deadlock the
next collective. An error on any process is raised on every process.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import jax
import numpy as np

from jaxtom.rl import distributed
from jaxtom.rl.batch import Batch, pad_rows_to

T = TypeVar("T")
R = TypeVar("R")


def allgather_objects(obj) -> list:
    """`obj` of every process (picklable), in process order; `[obj]` on one process (a host
    all-gather in fixed-size chunks: `rl.distributed.gather_objects`)."""
    return distributed.gather_objects(obj)


def share_bounds(n: int, processes: int | None = None, index: int | None = None
                 ) -> tuple[int, int]:
    """[lo, hi) of process `index`'s contiguous share of n items (sizes differ by <= 1)."""
    processes = jax.process_count() if processes is None else processes
    index = jax.process_index() if index is None else index
    return n * index // processes, n * (index + 1) // processes


def shared_map(fn: Callable[[Sequence[T]], Sequence[R]], items: Sequence[T]) -> list[R]:
    """`fn(items)` computed once: each process applies `fn` to its share of `items` and the
    results are all-gathered, so every process gets the same list. `fn` maps a list to a
    list of the same length. An exception on any process is raised on all of them."""
    items = list(items)
    if jax.process_count() == 1:
        return _checked(fn, items)
    lo, hi = share_bounds(len(items))
    try:
        mine = ("ok", _checked(fn, items[lo:hi]))
    except Exception as err:  # noqa: BLE001 - re-raised below, on every process
        mine = ("error", f"process {jax.process_index()}: {type(err).__name__}: {err}")
    parts = allgather_objects(mine)
    errors = [msg for status, msg in parts if status == "error"]
    if errors:
        raise RuntimeError("a shared host computation failed: " + "; ".join(errors))
    return [x for _, part in parts for x in part]


def _checked(fn, items):
    out = list(fn(items)) if items else []
    if len(out) != len(items):
        raise ValueError(f"{fn!r} returned {len(out)} results for {len(items)} items")
    return out


def global_tasks(tasks: Sequence[dict]) -> list[dict]:
    """The step's task records of every process, ordered by their global `row`."""
    records = [r for part in allgather_objects(list(tasks)) for r in part]
    rows = [int(r["row"]) for r in records]
    if len(set(rows)) != len(rows):
        raise ValueError(f"task records of one step must have distinct rows, got {rows}")
    return sorted(records, key=lambda r: int(r["row"]))


class SharedSimulator:
    """A host-side simulator (scripted, HTTP) whose replies are computed once across
    processes: each process asks for its share of the requests, every process gets all
    replies. Request i of a call keeps seed `seed + i` for a simulator that seeds requests
    by position (HTTPSimulator), so the replies do not depend on the number of processes.

    A simulator whose `collective` attribute is true (LLMSimulator: the sampler, a
    collective on a global mesh) is not wrapped: every process calls it with the same
    requests (see `shared_simulator`)."""

    def __init__(self, inner):
        self.inner = inner

    def reply(self, requests, seed: int = 0):
        requests = list(requests)
        lo, _ = share_bounds(len(requests))
        return shared_map(lambda share: self.inner.reply(share, seed=seed + lo), requests)


def shared_simulator(simulator):
    """`simulator` itself when it is a collective (or on one process), else shared."""
    if getattr(simulator, "collective", False) or jax.process_count() == 1:
        return simulator
    return SharedSimulator(simulator)


def process_rows(batch: Batch, padded_rows: Callable[[int], int] | None = None) -> Batch:
    """This process's rows of the step's global `batch` (built alike on every process).

    The policy rows and the prediction rows are each padded with empty rows at the end to
    `padded_rows(rows)` (default: the next multiple of the process count) and split into
    equal contiguous blocks in process order, which is how `Learner.put_batch` puts them
    back together. With the learner's own count (`Learner.row_split(rows,
    multiple_of=processes)`, which `ConversationRollout.padded_rows` gives) put_batch adds no padding between
    the blocks: every real row keeps the place it has on a single process, so it falls in
    the same PPO mini-batch (rows are split by index), whatever the process count."""
    n = jax.process_count()
    if padded_rows is None:
        padded_rows = lambda rows: -(-rows // n) * n  # noqa: E731
    batch = jax.tree.map(np.asarray, batch)
    pred = batch.prediction
    total = padded_rows(batch.tokens.shape[0])
    ptotal = None if pred is None else padded_rows(pred.tokens.shape[0])
    for what, have, want in (("rows", batch.tokens.shape[0], total),
                             ("prediction rows", 0 if pred is None else pred.tokens.shape[0],
                              ptotal or 0)):
        if want < have or want % n:
            raise ValueError(f"padded_rows gave {want} {what} for {have}: expected a multiple "
                             f"of the {n} processes and at least {have}")
    batch = pad_rows_to(batch, total, ptotal)
    if n == 1:
        return batch
    i = jax.process_index()

    def take(x):
        share = x.shape[0] // n
        return x[i * share:(i + 1) * share]

    return jax.tree.map(take, batch)  # every leaf leads with its rows
