"""A fake `uv` for the install script's tests: it records each call (argv, cwd) in $FAKE_LOG
as a JSON line. `uv venv ... DIR` makes an environment whose python is this interpreter (with
DIR/site first on its path) and an `activate` that puts DIR/bin first on PATH; `uv pip
install --python DIR/bin/python ... -e .[EXTRAS]` puts a `jaxtom` script in DIR/bin and, for
the extras that include them (tpu, cuda, gcs; unless $FAKE_SKIP_GCS is set), importable
stand-ins for gcsfs and google-cloud-storage under DIR/site."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

FAKE_UV = """#!@EXE@
import json, os, sys
from pathlib import Path
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd()}) + "\\n")
args = sys.argv[1:]
if args[0] == "venv":
    venv = Path(args[-1])
    (venv / "bin").mkdir(parents=True)
    (venv / "site").mkdir()
    py = venv / "bin" / "python"
    py.write_text(f'#!/bin/sh\\nPYTHONPATH={venv}/site:$PYTHONPATH exec @EXE@ "$@"\\n')
    py.chmod(0o755)
    (venv / "bin" / "activate").write_text(f"export VIRTUAL_ENV={venv} PATH={venv}/bin:$PATH\\n")
elif args[:2] == ["pip", "install"]:
    venv = Path(args[args.index("--python") + 1]).parent.parent
    extras = args[-1].partition("[")[2].rstrip("]").split(",")
    script = venv / "bin" / "jaxtom"
    script.write_text(f'#!/bin/sh\\nexec {venv}/bin/python -m jaxtom.cli "$@"\\n')
    script.chmod(0o755)
    if {"tpu", "cuda", "gcs"} & set(extras) and not os.environ.get("FAKE_SKIP_GCS"):
        site = venv / "site"
        (site / "gcsfs").mkdir(exist_ok=True)
        (site / "gcsfs" / "__init__.py").write_text("")
        (site / "google" / "cloud" / "storage").mkdir(parents=True, exist_ok=True)
        (site / "google" / "cloud" / "storage" / "__init__.py").write_text("")
else:
    sys.exit(f"fake uv: unexpected arguments {args}")
""".replace("@EXE@", sys.executable)


def script(path: Path, text: str) -> Path:
    """`text` written to `path`, made executable."""
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path
