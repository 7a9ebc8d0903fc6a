"""What `jaxtom plan` sizes, shape-only: a config's mesh, model config, abstract model, train
state and batches (no weights read, nothing allocated), and the bytes and XLA figures of
trees and compiled programs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom import config as jaxtom_config
from jaxtom import models
from jaxtom.config import ConfigError
from jaxtom.gridworld import EnvParams
from jaxtom.models.config import load_hf_config
from jaxtom.models.gguf_io import gguf_config
from jaxtom.models.image_processing import VisionInputs, smart_resize
from jaxtom.models.vl_config import is_vl_dict, load_vl_config
from jaxtom.rl.batch import Batch, PredictionBatch
from jaxtom.rl.step import Learner

GB = 1e9
GIB = 1024 ** 3


class PlanError(ValueError):
    """A plan cannot be made for this config (what is wrong is in the message)."""


# ---- sizes --------------------------------------------------------------------------------
def mesh_sizes(mesh_section, devices: int | None) -> tuple[int, int, int]:
    """(data, fsdp, tensor) with a -1 axis resolved from `devices`."""
    sizes = [mesh_section.data, mesh_section.fsdp, mesh_section.tensor]
    if -1 in sizes:
        if devices is None:
            raise PlanError(f"mesh (data, fsdp, tensor)={tuple(sizes)} has a -1 axis; say how "
                            "many devices to plan for with --devices N")
        known = math.prod(s for s in sizes if s != -1)
        if devices % known:
            raise PlanError(f"--devices {devices} is not a multiple of {known}, the product "
                            f"of the mesh's fixed axes {tuple(sizes)}")
        sizes[sizes.index(-1)] = devices // known
    elif devices is not None and devices != math.prod(sizes):
        raise PlanError(f"--devices {devices} disagrees with the config's mesh "
                        f"{tuple(sizes)} ({math.prod(sizes)} devices); drop --devices or "
                        "override mesh.*")
    return tuple(sizes)


def rollout_rows(config) -> int:
    """Rows of one rollout's update batch before padding: `trainer.num_rows`, or one
    sequence per row (prompts_per_step x group_size) when it is 0."""
    t = config.trainer
    return t.num_rows or t.prompts_per_step * t.group_size


def padded_rows(rows: int, learner) -> int:
    """`rows` padded as the update pads them (`Learner.padded_rows`: a multiple of data x
    fsdp x ppo_mini_batches); padding rows compute like real ones."""
    return learner.padded_rows(rows)


def model_config(model_section):
    """The decoder's ModelConfig from `<model.path>/config.json` (or the config's own sizes);
    a `VLConfig` (text decoder + vision tower) for a Qwen3-VL config.json."""


    param, compute = model_section.param_dtype, model_section.compute_dtype
    m = model_section
    path = jaxtom_config.resolve_model_path(m.path) if m.path else ""
    if not path:
        return m.random_model_config()
    path = Path(path)
    if path.suffix == ".gguf":
        import gguf  # only GGUF checkpoints need it

        return gguf_config(gguf.GGUFReader(str(path)), dtype=param, compute_dtype=compute)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError("model.path", "a Hugging Face directory holding config.json (only "
                          "config.json is read)", m.path)
    try:
        if is_vl_dict(json.loads(file.read_text())):
            return load_vl_config(file, dtype=param, compute_dtype=compute)
        return load_hf_config(file, dtype=param, compute_dtype=compute)
    except ValueError as err:  # json errors are ValueErrors too
        raise ConfigError("model.path", f"a supported config.json ({err})", str(file)) from None


def image_patches(config, vcfg) -> int:
    """Patches of one observation picture of a Qwen3-VL config: the gridworld rendered at
    `mindzero.data.image_cell_size` px per cell, resized as the preprocessing resizes it."""

    cell = config.mindzero.data.image_cell_size if config.kind == "mindzero" else 50
    g = EnvParams()
    h, w = smart_resize(g.height * cell, g.width * cell, vcfg.patch_size * vcfg.spatial_merge_size,
                        vcfg.min_pixels, vcfg.max_pixels)
    return h * w // vcfg.patch_size ** 2


# ---- per-device bytes from shardings ----------------------------------------------------
def device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (the largest shard)."""

    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def with_shardings(shapes, shardings):
    return jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h),
                        shapes, shardings)


def xla_memory(compiled) -> dict[str, int]:
    """Bytes of a compiled program by XLA's memory analysis; `peak` = arguments + outputs -
    aliased (donated) + temporaries, the most its buffers hold at once."""
    m = compiled.memory_analysis()
    out = {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
           "aliased": int(m.alias_size_in_bytes), "temporaries": int(m.temp_size_in_bytes)}
    out["peak"] = out["arguments"] + out["outputs"] - out["aliased"] + out["temporaries"]
    return out


def xla_flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


# ---- analytic FLOPs ---------------------------------------------------------------------


def new_model(mcfg):
    """A decoder (or Qwen3-VL model) of `mcfg`, as a checkpoint loads it (no LoRA)."""

    return (models.init_qwen3_vl(mcfg, seed=0) if mcfg.kind == "vision_language"
            else models.init_decoder(mcfg, seed=0))


def abstract_model(config, mcfg):


    def build():
        model = new_model(mcfg)
        if config.model.lora_rank:
            models.add_lora(model, rank=config.model.lora_rank,
                            alpha=config.model.lora_alpha or None)
        return model

    return build, nnx.eval_shape(build)


def prediction_rows(config) -> tuple[int, int] | None:
    """(rows, row_len) of CToM's prediction sub-batch when the config fixes them; None when
    the step has no prediction loss. rows is 0 when it is sized from the data (one row per
    target reply), which a plan cannot know: such a plan leaves the sub-batch out."""
    if config.step.lambda_pred <= 0:
        return None
    section = getattr(config, "ctom", None)
    return (int(getattr(section, "pred_rows", 0) or 0),
            int(getattr(section, "pred_row_len", 0) or config.trainer.row_len))


def abstract_batch(config, mcfg, rows: int, pad):


    T = config.trainer.row_len
    s = config.step
    i32 = jax.ShapeDtypeStruct((rows, T), jnp.int32)
    f32 = jax.ShapeDtypeStruct((rows, T), jnp.float32)
    prediction = None
    pred = prediction_rows(config)
    if pred and pred[0]:  # padded like the policy rows (`jaxtom.rl.batch.pad_rows`)
        shape = (pad(pred[0]), pred[1])
        p_i32, p_f32 = (jax.ShapeDtypeStruct(shape, d) for d in (jnp.int32, jnp.float32))
        prediction = PredictionBatch(tokens=p_i32, positions=p_i32, segment_ids=p_i32,
                                     target_mask=p_f32)
    images = {}
    if mcfg.kind == "vision_language":  # one picture per row (`jaxtom.rl.vl_batch`)
        v, P = mcfg.vision, image_patches(config, mcfg.vision)
        def sds(*shape, dtype=jnp.int32):
            return jax.ShapeDtypeStruct((rows, 1) + shape, dtype)
        images = dict(positions=jax.ShapeDtypeStruct((rows, 3, T), jnp.int32), image_index=i32,
                      vision=VisionInputs(patches=sds(P, v.patch_dim, dtype=jnp.float32),
                                          valid=sds(P, dtype=jnp.bool_), pos_index=sds(P, 4),
                                          pos_weight=sds(P, 4, dtype=jnp.float32),
                                          rot_pos=sds(P, 2)))
    # as the trainer packs it: old log-probs are scored inside the update (not in the batch)
    return Batch(**{"tokens": i32, "positions": i32, "segment_ids": i32, "policy_mask": f32,
                    "advantages": f32, "group_ids": i32,
                    "ref_logp": f32 if s.resolved_reference() == "batch" else None,
                    "decision_mask": f32 if s.lambda_entropy > 0 else None,
                    "prediction": prediction, **images})


def abstract_state(config, mcfg, mesh):
    """(learner, train state) as `Learner.init_state` makes it, shapes with their shardings."""


    build, model = abstract_model(config, mcfg)
    learner = Learner(model, config.step, mesh, total_steps=config.trainer.total_steps)
    state = jax.eval_shape(lambda: learner.init_state(build(), seed=0))
    return learner, with_shardings(state, learner.state_shardings(state))


def abstract_update_batch(config, mcfg, learner):
    rows = padded_rows(rollout_rows(config), learner)
    batch = abstract_batch(config, mcfg, rows, learner.padded_rows)
    return with_shardings(batch, learner.batch_shardings(batch))
