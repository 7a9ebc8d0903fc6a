"""Where an update's state and rows live on the mesh, and how rollout rows are padded and
split into mini- and micro-batches for it (`Learner` mixes this in)."""

from __future__ import annotations

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.rl.batch import Batch, pad_rows_to, update_rows
from jaxtom.rl.step_config import TrainState


def tree_shardings(tree, mesh: Mesh, rules=None):
    """Named shardings from variables' logical axes; anything else replicated."""
    rep = NamedSharding(mesh, PartitionSpec())

    def one(x):
        if isinstance(x, nnx.Variable):
            value = x.get_value()
            axes = parallel.variable_axes(x) or (None,) * value.ndim
            return x.replace(parallel.named_sharding(mesh, axes, value.shape, rules))
        return rep

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


class RowPlacement:
    """Mesh placement and row arithmetic of an update; needs `self.mesh`, `self.rules` and
    `self.cfg` (a StepConfig)."""

    def state_shardings(self, state: TrainState):
        return tree_shardings(state, self.mesh, self.rules)

    def batch_shardings(self, batch: Batch):
        return jax.tree.map(lambda x: parallel.batch_sharding(self.mesh, x.ndim, x.shape[0]),
                            batch)

    @property
    def data_parallel(self) -> int:
        """Devices the batch rows are split over: data x fsdp."""
        return self.mesh.shape["data"] * self.mesh.shape["fsdp"]

    @property
    def row_multiple(self) -> int:
        """Every padded row count (policy or prediction rows) is a multiple of this: data x
        fsdp x ppo_mini_batches; `row_split` gives the exact count."""
        return self.data_parallel * self.cfg.ppo_mini_batches

    def row_split(self, rows: int, mini_batches: int | None = None,
                  multiple_of: int = 1) -> tuple[int, int]:
        """(padded rows, micro-batches) the update uses for `rows` policy (or prediction)
        rows split into `mini_batches` (default `ppo_mini_batches`): `batch.update_rows`
        with `micro_batches` as the cap."""
        n = self.cfg.ppo_mini_batches if mini_batches is None else mini_batches
        return update_rows(rows, self.data_parallel, n, self.cfg.micro_batches,
                           multiple_of=multiple_of)

    def padded_rows(self, rows: int) -> int:
        """How many rows an update of `rows` policy (or prediction) rows computes."""
        return self.row_split(rows)[0]

    def _micro(self, rows: int) -> int:
        """Micro-batches of a mini-batch of `rows` rows (already padded: a fixed point)."""
        padded, micro = self.row_split(rows, 1)
        if padded != rows:
            raise ValueError(f"a mini-batch of {rows} rows is not padded for the mesh "
                             f"({self.data_parallel} data x fsdp devices): expected {padded}")
        return micro

    def put_batch(self, local_batch: Batch) -> Batch:
        """Global batch from this process's rows (all rows on a single process), padded.

        Processes whose rollouts packed into different row counts agree on the largest
        (one small host all-gather); the global count is `row_split` of that times the
        processes (kept a multiple of them), and each process pads its rows to its equal
        block of it. Padding rows carry no mask, so a process with fewer real rows simply
        holds more padding.
        """
        nproc = jax.process_count()
        rows = local_batch.tokens.shape[0]
        prows = 0 if local_batch.prediction is None else local_batch.prediction.tokens.shape[0]
        if nproc > 1:
            counts = np.asarray(multihost_utils.process_allgather(np.asarray([rows, prows])))
            rows, prows = (int(c) for c in counts.reshape(-1, 2).max(axis=0))
        total = self.row_split(rows * nproc, multiple_of=nproc)[0]
        ptotal = self.row_split(prows * nproc, multiple_of=nproc)[0]
        local = pad_rows_to(jax.tree.map(np.asarray, local_batch), total // nproc,
                            None if local_batch.prediction is None else ptotal // nproc)
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(
                parallel.batch_sharding(self.mesh, x.ndim, x.shape[0] * nproc), x),
            local)

    def put_global_batch(self, batch: Batch) -> Batch:
        """Global batch from the whole batch, which every process holds alike: padded at
        its end as one process would pad it, each process placing its block of rows. The
        rows, and so the PPO mini-batches, are then those of a single process."""
        nproc = jax.process_count()
        if nproc == 1:
            return self.put_batch(batch)
        rows = batch.tokens.shape[0]
        prows = 0 if batch.prediction is None else batch.prediction.tokens.shape[0]
        total = self.row_split(rows, multiple_of=nproc)[0]
        ptotal = None if batch.prediction is None else self.row_split(
            prows, multiple_of=nproc)[0]
        whole = pad_rows_to(jax.tree.map(np.asarray, batch), total, ptotal)
        me = jax.process_index()
        local = jax.tree.map(lambda x: x[me * (x.shape[0] // nproc):
                                         (me + 1) * (x.shape[0] // nproc)], whole)
        return self.put_batch(local)
