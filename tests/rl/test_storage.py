"""Run outputs go through etils.epath, so a workdir may be `gs://...` or a shared mount.

- A fake `gs://` backend (a bucket in a temporary directory) shows the checkpoint directory,
  metrics, TensorBoard, JSON outputs, tokenizers and Hugging Face exports reach storage
  only through epath, with the URI intact. Orbax's array data is written by tensorstore
  (its own gcs/file drivers), which the fake cannot stand in for, so a checkpoint *save*
  on the fake bucket is not run; the in-process run below covers orbax on a local path.
- A short training run under `epath.testing.mock_epath` finds every file Python opens for
  writing under the workdir was opened through epath.
- A source check keeps the converted modules off `open(` and `pathlib.Path(`.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from etils.epath import backend as epath_backend
from etils.epath import gpath

from jaxtom import storage

ROOT = Path(__file__).resolve().parents[2]


class _Bucket(epath_backend._OsPathBackend):
    """`gs://NAME/...` kept under a local directory; records what was opened."""

    def __init__(self, root: Path):
        self.root, self.opened = str(root), []

    def _local(self, p) -> str:
        s = os.fspath(p)
        assert s.startswith("gs://"), f"a non-gs path reached the gs backend: {s}"
        return os.path.join(self.root, s[len("gs://"):])

    def _uri(self, p) -> str:
        return "gs://" + os.path.relpath(p, self.root)

    def open(self, path, mode):
        self.opened.append((os.fspath(path), mode))
        return super().open(self._local(path), mode)

    def exists(self, path):
        return super().exists(self._local(path))

    def isdir(self, path):
        return super().isdir(self._local(path))

    def listdir(self, path):
        return super().listdir(self._local(path))

    def glob(self, path):
        return [self._uri(p) for p in super().glob(self._local(path))]

    def walk(self, top, *, top_down=True, on_error=None):
        for d, dirs, files in super().walk(self._local(top), top_down=top_down,
                                           on_error=on_error):
            yield self._uri(d), dirs, files

    def makedirs(self, path, *, exist_ok=False, mode=None):
        return super().makedirs(self._local(path), exist_ok=exist_ok)

    def mkdir(self, path, *, exist_ok=False, mode=None):
        return super().mkdir(self._local(path), exist_ok=exist_ok)

    def rmtree(self, path):
        return super().rmtree(self._local(path))

    def remove(self, path):
        return super().remove(self._local(path))

    def rename(self, path, dst):
        return super().rename(self._local(path), self._local(dst))

    def replace(self, path, dst):
        return super().replace(self._local(path), self._local(dst))

    def copy(self, path, dst, overwrite):
        return super().copy(self._local(path), self._local(dst), overwrite=overwrite)

    def stat(self, path):
        return super().stat(self._local(path))


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    fake = _Bucket(tmp_path / "gcs")
    (tmp_path / "gcs").mkdir()
    monkeypatch.setitem(gpath._PREFIX_TO_BACKEND, "gs", fake)
    monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)
    # orbax asks GCS itself (google-cloud-storage) whether a bucket has folders
    from orbax.checkpoint._src.path import gcs_utils
    monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda *_: False)
    return fake


def test_gs_workdir_outputs_go_through_epath(bucket, tmp_path):
    from jaxtom.models import from_pretrained, save_pretrained
    from jaxtom.rl.checkpoint import Checkpointer
    from jaxtom.rl.logging import MetricsLogger
    from jaxtom.tokenizer import Tokenizer
    from tests.models.test_export_sharded import random_hf_checkpoint

    local = tmp_path / "gcs" / "b" / "run"
    ckpt = Checkpointer("gs://b/run/checkpoints")
    assert str(ckpt.manager.directory) == "gs://b/run/checkpoints"  # not gs:/... nor cwd/gs:
    assert (local / "checkpoints").is_dir() and ckpt.latest_step() is None
    ckpt.close()

    logger = MetricsLogger("gs://b/run")
    logger.log(1, {"loss": 0.5})
    logger.log(2, {"loss": 0.25})
    logger.close()
    logger = MetricsLogger("gs://b/run")  # a resumed run keeps the earlier lines
    logger.log(3, {"loss": 0.125})
    logger.close()
    rows = [json.loads(line) for line in (local / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    events = list((local / "tensorboard").glob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)

    storage.write_json("gs://b/run/best.json", {"step": 2})
    assert storage.read_json("gs://b/run/best.json") == {"step": 2}
    from tokenizers import Tokenizer as HF
    from tokenizers.models import WordLevel
    storage.save_tokenizer("gs://b/run/tokenizer.json",
                           HF(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")))
    assert Tokenizer.from_file("gs://b/run").encode("a") == [0]

    # a Hugging Face export and reload by byte ranges through epath (no memmap)
    model = from_pretrained(random_hf_checkpoint(tmp_path / "src"))
    save_pretrained(model, "gs://b/model", max_shard_bytes=30_000)
    assert (tmp_path / "gcs" / "b" / "model" / "model.safetensors.index.json").exists()
    back = from_pretrained("gs://b/model")
    for a, b in zip(jax.tree.leaves(jax.tree.map(np.asarray, jax.tree.leaves(model))),
                    jax.tree.leaves(jax.tree.map(np.asarray, jax.tree.leaves(back)))):
        np.testing.assert_array_equal(a, b)
    opened = {p for p, _ in bucket.opened}
    assert {"gs://b/run/metrics.jsonl", "gs://b/run/best.json", "gs://b/run/tokenizer.json",
            "gs://b/model/config.json"} <= opened
    assert any(p.startswith("gs://b/run/tensorboard/events.out") for p in opened)
    assert any(re.fullmatch(r"gs://b/model/model-\d+-of-\d+\.safetensors", p) for p in opened)


def test_check_writable_probes_through_epath_and_leaves_nothing(bucket, tmp_path,
                                                                 monkeypatch):
    from jaxtom.errors import StorageError

    storage.check_writable("gs://b/new/run")
    made = tmp_path / "gcs" / "b" / "new" / "run"
    assert made.is_dir() and not list(made.iterdir())  # the probe is gone
    assert any(p.startswith("gs://b/new/run/.jaxtom-write-probe-0-") and "w" in mode
               for p, mode in bucket.opened)
    local = tmp_path / "local" / "run"
    storage.check_writable(local)
    assert local.is_dir() and not list(local.iterdir())
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError) as err:  # nobody can create a directory below a file
        storage.check_writable(tmp_path / "file" / "run", "trainer.workdir")
    line = str(err.value)
    assert line.startswith(f"trainer.workdir={tmp_path / 'file' / 'run'}: cannot create the "
                           "directory (") and "\n" not in line

    def refuse(path, mode):  # an object store refusing writes (no permission)
        if "w" in mode:
            raise PermissionError(403, "Forbidden")
        return open(bucket._local(path), mode)
    monkeypatch.setattr(bucket, "open", refuse)
    with pytest.raises(StorageError, match=r"^OUT=gs://b/ro: cannot write a file in the "
                                           r"directory \(PermissionError: "):
        storage.check_writable("gs://b/ro", "OUT")


@pytest.mark.slow  # builds and compiles a trainer: ~30 s on 2 cores
def test_short_run_writes_only_through_epath(tmp_path, monkeypatch):
    """Every file Python opens for writing under the workdir was opened through epath
    (orbax's array data goes through tensorstore, which opens no Python file)."""
    from etils.epath import testing as epath_testing

    from jaxtom import rl
    from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks
    from jaxtom.rl.trainer import CompletionRollout, Trainer, TrainerConfig
    from tests.rl.common import TINY, tiny_model

    workdir = tmp_path / "run"
    via_epath, via_python = set(), set()
    real_open = builtins.open

    def writes(mode) -> bool:
        return any(c in mode for c in "wax+")

    def python_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and writes(mode):
            via_python.add(os.path.abspath(os.fspath(file)))
        return real_open(file, mode, *args, **kwargs)

    def epath_open(original, path, mode):
        if writes(mode):
            via_epath.add(os.path.abspath(os.fspath(path)))
        return original(path, mode)

    cfg = TrainerConfig(workdir=str(workdir), total_steps=2, group_size=4, prompts_per_step=4,
                        max_new_tokens=8, row_len=16, checkpoint_every=1, progress=False)
    trainer = Trainer(tiny_model(seed=1), toy_token_tasks(8, 4, TINY.vocab_size, seed=0),
                      CompletionRollout(TargetTokenReward(3), cfg),
                      rl.StepConfig(learning_rate=1e-3), cfg)
    monkeypatch.setattr(builtins, "open", python_open)
    with epath_testing.mock_epath(open=epath_open):
        trainer.run()
    monkeypatch.undo()
    under = {p for p in via_python if p.startswith(str(workdir) + os.sep)}
    assert under <= via_epath, f"written without epath: {sorted(under - via_epath)}"
    names = {os.path.relpath(p, workdir) for p in via_epath}
    assert "metrics.jsonl" in names, names
    assert any(n.startswith("tensorboard" + os.sep + "events.out") for n in names), names
    assert any(n.startswith("checkpoints" + os.sep) for n in names), names
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()
                  if p.name.isdigit()) == ["1", "2"]


def test_relative_workdir_refused_on_many_processes(monkeypatch):
    from jaxtom.rl.trainer import Trainer, TrainerConfig

    storage.check_shared_workdir("runs/x")  # one process: fine
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    with pytest.raises(ValueError) as err:
        storage.check_shared_workdir("runs/x")
    msg = str(err.value)
    assert "\n" not in msg and "every host must see the same storage" in msg
    assert "trainer.workdir='runs/x'" in msg and "4 processes" in msg
    storage.check_shared_workdir("/mnt/shared/run")
    storage.check_shared_workdir("gs://bucket/run")
    # the trainer checks before it opens anything
    with pytest.raises(ValueError, match="every host must see the same storage"):
        Trainer._run(types.SimpleNamespace(cfg=TrainerConfig(workdir="runs/x")), stop=None)


def _tiny_state(value: float, step: int):
    from jaxtom.rl.step_config import TrainState
    return TrainState(step=jnp.int32(step), params={"w": jnp.full((4,), value)}, frozen=None,
                      ref_params=None, opt_state=(jnp.full((4,), -value),),
                      rng=jnp.zeros((2,), jnp.uint32))


def test_async_save_resumes_from_newest_finished(tmp_path):
    """`save` returns while the step is still being written (its directory is renamed into
    place in the background), and a step left unfinished is skipped on resume."""
    import threading
    import time

    from etils.epath import testing as epath_testing

    from jaxtom.rl.checkpoint import Checkpointer

    gate, renamed = threading.Event(), []

    def rename(original, path, dst):  # orbax finalises a local step by renaming its tmp dir
        assert gate.wait(60), "the finalising rename was never released"
        renamed.append(os.path.basename(os.fspath(dst)))
        return original(path, dst)

    with epath_testing.mock_epath(rename=rename):
        ckpt = Checkpointer(tmp_path / "c", keep=3)
        t0 = time.perf_counter()
        ckpt.save(1, _tiny_state(1.0, 1), {"pos": 1})
        returned_s = time.perf_counter() - t0
        assert ckpt.manager.is_saving_in_progress() and not renamed
        assert ckpt.latest_step() is None or not (tmp_path / "c" / "1").exists()
        gate.set()
        ckpt.save(2, _tiny_state(2.0, 2), {"pos": 2})
        ckpt.close()
    steps = [n for n in renamed if n.isdigit()]  # (items are renamed into place too)
    assert returned_s < 50 and steps == ["1", "2"], (returned_s, renamed)
    # a job killed while writing step 3 leaves orbax's temporary directory behind
    partial = tmp_path / "c" / "3.orbax-checkpoint-tmp-1234567"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "half").write_bytes(b"\0" * 10)
    again = Checkpointer(tmp_path / "c", keep=3)
    assert again.latest_step() == 2
    state, data = again.restore(_tiny_state(0.0, 0))
    again.close()
    assert int(state.step) == 2 and data == {"pos": 2}
    np.testing.assert_array_equal(state.params["w"], np.full(4, 2.0))
    np.testing.assert_array_equal(state.opt_state[0], np.full(4, -2.0))


# Modules whose run outputs were moved to epath, and the rule the check below enforces: no
# call of the builtin `open(...)` or of `Path(...)`/`pathlib.Path(...)` (either would drop a
# `gs://` workdir or mangle it to `gs:/`); paths are made with `jaxtom.storage.path` and
# opened with epath's own methods. Packaged data (ctom/data.py) and the sandbox's scratch
# files (ctom/sandbox.py) are local by nature and not listed.
CONVERTED = ["jaxtom/storage.py", "jaxtom/rl/checkpoint.py", "jaxtom/rl/logging.py",
             "jaxtom/rl/trainer.py", "jaxtom/models/hf_io.py", "jaxtom/models/vl_io.py",
             "jaxtom/models/byte_ranges.py",
             "jaxtom/mindzero/goals_text.py", "jaxtom/mindzero/qa_train.py",
             "jaxtom/mindzero/vl_train.py", "jaxtom/mindzero/qa_eval.py",
             "jaxtom/mindzero/goals_eval.py", "jaxtom/mindzero/household/train.py",
             "jaxtom/mindzero/household/evaluate.py", "jaxtom/ctom/evaluate.py",
             "jaxtom/commands/export.py"]


def _banned_calls(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in ("open", "Path"):
                yield node.lineno, f.id
            elif (isinstance(f, ast.Attribute) and f.attr == "Path"
                  and isinstance(f.value, ast.Name) and f.value.id == "pathlib"):
                yield node.lineno, "pathlib.Path"


def test_banned_call_finder_sees_both():
    found = sorted(_banned_calls("x = Path('a')\nwith open(x) as f: pass\ny = pathlib.Path(1)\n"
                               "z = p.open('r')  # fine: epath's method\n"))
    assert found == [(1, "Path"), (2, "open"), (3, "pathlib.Path")]


def test_converted_modules_use_no_open_or_pathlib():
    bad = [f"{rel}:{line}: {name}(...)" for rel in CONVERTED
           for line, name in _banned_calls((ROOT / rel).read_text())]
    assert not bad, "run outputs must go through jaxtom.storage / etils.epath: " + ", ".join(bad)
