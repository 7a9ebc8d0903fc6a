"""Orbax checkpoints of what a resumed run needs to continue bit-for-bit.

Saved: step, trainable params, optimiser state, RNG and the data iterator's state. Not
saved: the frozen base weights and the reference copy, which are rebuilt from the model the
run starts from (they never change), so a LoRA checkpoint stays adapter-sized. The state is
stored as its flat list of leaves and restored into the structure (and shardings) of a
freshly initialised TrainState, so no pytree type has to be known to orbax.

Saves are asynchronous: `save` returns once the arrays are copied off the devices and the
write continues in the background (orbax waits for it before the next save and at
`close`). Orbax writes a step under a temporary name and renames (or, on object stores,
marks) it only when complete, so a job killed mid-write resumes from the newest finished
step. The directory may be local, a shared mount or `gs://...` (see `jaxtom.storage`).
"""

from __future__ import annotations

from typing import Any

import jax
import orbax.checkpoint as ocp

from jaxtom import storage
from jaxtom.rl.step_config import TrainState


def _saved_part(state: TrainState):
    return (state.step, state.params, state.opt_state, state.rng)


def _as_dict(leaves) -> dict[str, Any]:
    return {f"{i:06d}": x for i, x in enumerate(leaves)}


class Checkpointer:
    """Periodic saves under `<directory>`, keeping the newest `keep`."""

    def __init__(self, directory, keep: int = 2):
        self.manager = ocp.CheckpointManager(
            storage.absolute(directory),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=True))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState, data_state: dict | None = None) -> None:
        leaves = jax.tree.leaves(_saved_part(state))
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(_as_dict(leaves)),
            data=ocp.args.JsonSave(data_state or {})))

    def restore(self, template: TrainState, step: int | None = None
                ) -> tuple[TrainState, dict]:
        """Restores into `template`'s structure and shardings; returns (state, data_state)."""
        self.manager.wait_until_finished()
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint under {self.manager.directory}")
        part = _saved_part(template)
        leaves, treedef = jax.tree.flatten(part)
        abstract = _as_dict([jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
                             for x in leaves])
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()))
        restored = [out["state"][k] for k in sorted(out["state"])]
        s, params, opt_state, rng = jax.tree.unflatten(treedef, restored)
        state = template.replace(step=s, params=params, opt_state=opt_state, rng=rng)
        return state, dict(out["data"] or {})

    def close(self) -> None:
        """Waits for the save in flight, then releases orbax's threads."""
        self.manager.wait_until_finished()
        self.manager.close()
