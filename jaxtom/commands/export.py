"""`jaxtom export RUN_DIR OUT [--step N]`: a trained run as a Hugging Face directory.

OUT gets config.json, the safetensors files (sharded with an index when large; LoRA merged)
and the run's tokenizer files when it has any, which `transformers` loads
(`AutoModelForCausalLM.from_pretrained(OUT)`). The run is rebuilt from RUN_DIR/config.json,
which every training command records: its model's structure (the starting checkpoint or
random sizes; LoRA's frozen base weights come from `model.path`), then the trained
parameters restored into it:

- `jaxtom train` runs (the generic task, CToM): the newest trainer checkpoint under
  RUN_DIR/checkpoints, or `--step N`;
- MindZero runs: the model the run kept (RUN_DIR/checkpoint, what `jaxtom eval` scores), or
  with `--step N` that step's SSRL checkpoint (RUN_DIR/ssrl/checkpoints).

The model is restored sharded over a mesh of every device (`--mesh`), and the export
gathers one tensor at a time to process 0, which alone writes
(`jaxtom.models.hf_io.write_entries`): a run saved by several processes is exported by the
same launch, or by one process on any device count (orbax reshards on restore).
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax

from jaxtom import models, parallel, storage
from jaxtom.commands import train as train_command
from jaxtom.config import config_from_dict, resolve_model_path
from jaxtom.ctom.config import CToMSettings
from jaxtom.ctom.tiny import model_and_tokenizer
from jaxtom.ctom.train import load_model_and_tokenizer
from jaxtom.errors import BadInputError, MissingInputError
from jaxtom.mindzero import goals_text
from jaxtom.mindzero.config import MindZeroSection, is_image
from jaxtom.mindzero.household.config import HouseholdMindZero
from jaxtom.mindzero.vl_train import build_vl_model
from jaxtom.models.config import config_to_hf_dict
from jaxtom.models.orbax_io import restore_params
from jaxtom.rl.checkpoint import Checkpointer
from jaxtom.rl.step import Learner
from jaxtom.tokenizer import Tokenizer

# tokenizer files of a Hugging Face model directory that travel with the weights
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja",
                   "generation_config.json", "preprocessor_config.json")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export", help="write a trained run as a Hugging Face directory",
                              description=__doc__.splitlines()[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's trainer.workdir")
    p.add_argument("out", metavar="OUT", help="directory to write (local or gs://...)")
    p.add_argument("--step", type=int, default=None,
                   help="the trainer checkpoint of this step (default: the newest; MindZero: "
                        "the kept model)")
    p.add_argument("--mesh", default="1,-1,1",
                   help="data,fsdp,tensor sizes to restore onto (default 1,-1,1: every device "
                        "on fsdp)")
    p.set_defaults(func=run)


def run_config(run_dir):
    """The Config RUN_DIR/config.json records, with `trainer.workdir` set to RUN_DIR (the run
    may have moved since, or named itself by a relative path)."""
    file = storage.path(run_dir) / "config.json"
    if not file.exists():
        raise MissingInputError(f"{file}: no such file; expected the config.json a training "
                                "command records in its trainer.workdir")
    try:
        data = json.loads(file.read_text())
    except ValueError as err:
        raise BadInputError(f"{file}: not a JSON config ({err}); expected the config.json "
                            "a training command records") from None
    papers = {}
    if isinstance(data, dict) and isinstance(data.get("mindzero"), dict):
        papers["mindzero"] = (HouseholdMindZero if "household" in data["mindzero"]
                              else MindZeroSection)
    if isinstance(data, dict) and data.get("ctom") is not None:
        papers["ctom"] = CToMSettings
    config = config_from_dict(data, papers)
    return dataclasses.replace(config, trainer=dataclasses.replace(
        config.trainer, workdir=str(run_dir)))


def template_model(config, mesh):
    """The run's model before training (its structure, and LoRA's frozen base weights),
    placed on `mesh`; reads the run's own tokenizer.json, never trains one."""
    run_dir = storage.path(config.trainer.workdir)
    own_tokenizer = run_dir / "tokenizer.json"
    if config.kind != "completion" and not config.model.path and not own_tokenizer.exists():
        raise MissingInputError(f"{own_tokenizer}: no such file; a run of a model trained "
                                "from scratch keeps its tokenizer there")
    if config.kind == "completion":
        return train_command.build_model(config, mesh)
    if config.kind == "ctom":
        if config.model.path:
            return load_model_and_tokenizer(config, mesh)[0]
        return model_and_tokenizer(config, mesh, warm_up=False)[0]
    tokenizer = None if config.model.path else own_tokenizer
    if is_image(config.mindzero.data.observation):
        return build_vl_model(config, run_dir, tokenizer_path=tokenizer, mesh=mesh)[0]
    return goals_text.build_model(config, run_dir, tokenizer_path=tokenizer, mesh=mesh)[0]


def restore_trainer_checkpoint(model, config, directory, step: int | None, mesh):
    """(model with the trained parameters of `step` (None: the newest), step) from a
    `jaxtom.rl.checkpoint.Checkpointer` directory, restored into the train state the run's
    Learner builds from `model`."""

    directory = storage.path(directory)
    if not directory.exists():
        raise MissingInputError(f"{directory}: no such checkpoint directory; expected the "
                                "checkpoints a training run writes")
    ckpt = Checkpointer(directory, keep=config.trainer.keep_checkpoints)
    try:
        steps = sorted(ckpt.manager.all_steps())
        if not steps:
            raise MissingInputError(f"{directory}: holds no finished checkpoint")
        if step is None:
            step = steps[-1]
        elif step not in steps:
            raise MissingInputError(f"{directory}: no checkpoint of step {step}; expected one "
                                    f"of {steps}")
        learner = Learner(model, config.step, mesh=mesh,
                          total_steps=config.trainer.total_steps)
        state, _ = ckpt.restore(learner.init_state(model, seed=config.trainer.seed), step)
    finally:
        ckpt.close()
    return learner.model(state), step


def trained_model(config, step: int | None, mesh, model=None):
    """(model, where its parameters came from) of the run in `config.trainer.workdir`;
    `model`: its `template_model` when already built."""

    run_dir = storage.path(config.trainer.workdir)
    model = template_model(config, mesh) if model is None else model
    if config.kind == "mindzero" and step is None:
        kept = run_dir / "checkpoint"
        if not kept.exists():
            raise MissingInputError(f"{kept}: no such directory; a finished MindZero run "
                                    "keeps its model there (or pass --step N for an SSRL "
                                    "checkpoint)")
        return restore_params(model, kept), str(kept)
    directory = run_dir / ("ssrl" if config.kind == "mindzero" else "") / "checkpoints"
    model, step = restore_trainer_checkpoint(model, config, directory, step, mesh)
    return model, f"{directory}/{step}"


def write_tokenizer(config, out) -> list[str]:
    """The run's tokenizer files into `out` (process 0): its own tokenizer.json (a model
    trained from scratch), a model directory's tokenizer files, or a GGUF file's embedded
    tokenizer as tokenizer.json. Returns the names written."""

    run_dir, out = storage.path(config.trainer.workdir), storage.path(out)
    if (run_dir / "tokenizer.json").exists():
        storage.write_text(out / "tokenizer.json", (run_dir / "tokenizer.json").read_text())
        return ["tokenizer.json"]
    if not config.model.path:
        return []
    source = storage.path(resolve_model_path(config.model.path))
    if source.suffix == ".gguf":
        storage.save_tokenizer(out / "tokenizer.json", Tokenizer.from_gguf(source).backend)
        return ["tokenizer.json"]
    names = [n for n in TOKENIZER_FILES if (source / n).exists()]
    for name in names:
        (out / name).write_bytes((source / name).read_bytes())
    return names


def export(run_dir, out, *, step: int | None = None, mesh_sizes=(1, -1, 1)) -> dict:
    """Writes the run in `run_dir` to `out` as a Hugging Face directory; a JSON-able
    summary. Every process of a multi-process launch calls it alike."""


    if not storage.path(run_dir).is_dir():
        raise MissingInputError(f"{run_dir}: no such run directory; expected a training "
                                "command's trainer.workdir")
    config = run_config(run_dir)
    storage.check_writable(out, "OUT")
    mesh = parallel.make_mesh(*mesh_sizes)
    model = template_model(config, mesh)
    try:  # before restoring anything: whether transformers has the architecture
        config_to_hf_dict(getattr(model, "text_decoder", model).config)
    except ValueError as err:
        raise BadInputError(f"{run_dir}: its model cannot be written for transformers: "
                            f"{err}") from None
    model, source = trained_model(config, step, mesh, model)
    models.save_pretrained(model, out)
    tokenizer = write_tokenizer(config, out) if jax.process_index() == 0 else []
    return {"out": str(out), "source": source, "kind": config.kind, "tokenizer": tokenizer}


def run(args: argparse.Namespace) -> int:


    try:
        sizes = tuple(int(x) for x in args.mesh.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3:
        raise BadInputError(f"--mesh {args.mesh}: expected three comma-separated sizes "
                            "data,fsdp,tensor (one may be -1)")
    train_command.start_distributed()
    summary = export(args.run_dir, args.out, step=args.step, mesh_sizes=sizes)
    if jax.process_index() == 0:
        print(json.dumps(summary))
    return 0
