"""Run outputs on any storage orbax accepts: a local path, a shared mount, or `gs://...`.

Everything a run writes (checkpoints, metrics, TensorBoard events, phase models, best.json,
tokenizer.json, config.json, results) goes through `etils.epath`, orbax's own path library,
so a workdir may be an object-store URI. `pathlib.Path` would turn `gs://b/x` into `gs:/b/x`
and `open()` only reaches local files. A multi-process run needs a workdir every host
sees, which a relative path cannot promise. Buckets need `pip install jaxtom[gcs]` (gcsfs for
epath, google-cloud-storage for orbax).
"""

from __future__ import annotations

import json
import os

import jax
from etils import epath

from jaxtom.errors import BadInputError, StorageError


def is_uri(p) -> bool:
    """Whether `p` names an object store (`gs://`, `s3://`, ...) rather than a local path."""
    return "://" in os.fspath(p)


def path(p) -> epath.Path:
    """`p` as an epath.Path (a relative local path stays relative, so a workdir derived from
    `trainer.workdir` still shows whether the user gave a relative one)."""
    return p if isinstance(p, epath.Path) else epath.Path(os.fspath(p))


def absolute(p) -> epath.Path:
    """`p` with a local path made absolute, as orbax needs; a URI unchanged (epath's own
    `absolute()` would prefix it with the working directory)."""
    s = os.fspath(p)
    return epath.Path(s if is_uri(s) else os.path.abspath(s))


def check_shared_workdir(workdir, what: str = "trainer.workdir") -> None:
    """Refuses a relative workdir when several processes would each resolve it on their
    own disk: checkpoints and metrics would split across hosts and a resume would see
    only its host's part."""
    n = jax.process_count()
    s = os.fspath(workdir)
    if n > 1 and not is_uri(s) and not os.path.isabs(s):
        raise BadInputError(f"{what}={s!r} is relative, but this run has {n} processes and every "
                            f"host must see the same storage: give an absolute path on a "
                            f"shared mount or a bucket URI such as gs://BUCKET/{s}")


def check_writable(directory, what: str = "trainer.workdir") -> None:
    """Creates `directory` if needed, then writes, reads back, lists and deletes a probe file
    in it, so a run whose outputs cannot be stored fails at once, before any model is built,
    with a `StorageError` naming the directory. Every process writes its own probe."""
    d = path(directory)
    probe = d / f".jaxtom-write-probe-{jax.process_index()}-{os.getpid()}"
    # an object store's client fails in its own ways (permissions, credentials, a missing
    # gcsfs); a local file system with an OSError
    failures = Exception if is_uri(d) else OSError
    step = "create"
    try:
        d.mkdir(parents=True, exist_ok=True)
        step = "write a file in"
        probe.write_text("probe")
        step = "read a file back from"
        if probe.read_text() != "probe":
            raise OSError(f"read back something else than was written to {probe}")
        step = "list"
        next(iter(d.iterdir()), None)
        step = "delete a file in"
        probe.unlink()
    except failures as err:
        raise StorageError(f"{what}={os.fspath(directory)}: cannot {step} the directory "
                           f"({type(err).__name__}: {err}); expected a directory this process "
                           f"can create, write and read") from err


def run_dir(workdir, what: str = "trainer.workdir") -> epath.Path:
    """The workdir as an epath.Path, after `check_shared_workdir`."""
    check_shared_workdir(workdir, what)
    return path(workdir)


def write_text(p, text: str) -> None:
    """Writes `p` whole: a local file through a temporary name and a rename, so a reader
    never sees half of it (an object-store upload is already all-or-nothing)."""
    p = path(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    if is_uri(p):
        p.write_text(text)
        return
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(p)


def write_json(p, obj, **kwargs) -> None:
    write_text(p, json.dumps(obj, **kwargs))


def read_json(p):
    return json.loads(path(p).read_text())


def save_tokenizer(p, backend) -> None:
    """A Hugging Face `tokenizers.Tokenizer` as tokenizer.json at `p`, the same text its own
    `save` writes (which reaches only local files)."""
    write_text(p, backend.to_str(pretty=True))
