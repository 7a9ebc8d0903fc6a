"""A MindZero run's model parameters on disk: orbax checkpoints of the model's state (local
or `gs://...`), saved and restored into a model of the same structure."""

from __future__ import annotations

from pathlib import Path

from flax import nnx

from jaxtom import storage


def save_model(model, path):
    """Orbax checkpoint of the model's parameters (restore with `load_model`); local or
    `gs://...`."""
    import orbax.checkpoint as ocp
    path = storage.absolute(path)
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(path, nnx.state(model), force=True)
    ckpt.wait_until_finished()
    return path


def restore_params(model, checkpoint: Path):
    """`model` with the parameters saved by `save_model` at `checkpoint`."""
    import orbax.checkpoint as ocp
    graphdef, abstract = nnx.split(model)
    restored = ocp.StandardCheckpointer().restore(storage.absolute(checkpoint), abstract)
    return nnx.merge(graphdef, restored)
