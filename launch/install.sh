#!/usr/bin/env bash
# Installs jaxtom into a Python >= 3.11 virtual environment on this host, with `uv`, whatever
# Python the host came with (stock TPU VM images ship an older one than jaxtom requires).
#
#   bash launch/install.sh tpu|cuda|cpu [EXTRA ...]    e.g. bash launch/install.sh tpu
#
# tpu and cuda install `.[tpu]` / `.[cuda]`: JAX for the chips plus gcsfs and
# google-cloud-storage, so trainer.workdir and model.path may be gs:// paths; cpu installs
# `.[gcs]`. More extras may follow (e.g. test). Versions are pinned by constraints.txt.
# Run it on every worker of a TPU slice at once:
#   gcloud compute tpus tpu-vm ssh NAME --zone ZONE --worker=all \
#       --command 'bash ~/jaxtom/launch/install.sh tpu'
# Settings (environment variables):
#   VENV            the environment to create or reuse (default: .venv in the checkout)
#   PYTHON_VERSION  the Python uv provides for it (default 3.11; at least 3.11)
#   UV              the uv to use (default: uv on PATH, else $UV_DIR/uv, installed there by
#                   uv's standalone installer when missing)
#   UV_DIR          where that installer puts uv (default: $HOME/.local/bin)
# Afterwards: $VENV/bin/jaxtom, and PYTHON=$VENV/bin/python for launch/tpu_pod.sh.
set -euo pipefail

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
case "$1" in
  tpu) EXTRAS="tpu" ;;
  cuda) EXTRAS="cuda" ;;
  cpu) EXTRAS="gcs" ;;
  *) echo "install.sh: unknown target '$1'; expected tpu, cuda or cpu" >&2; exit 2 ;;
esac
shift
for extra in "$@"; do
  [[ "$extra" =~ ^[a-z0-9_-]+$ ]] || { echo "install.sh: extra '$extra' is not an extra's name" >&2; exit 2; }
  EXTRAS+=",$extra"
done

cd "$(dirname "$0")/.."
REPO="$PWD"
VENV="${VENV:-$REPO/.venv}"
PYTHON_VERSION="${PYTHON_VERSION:-3.11}"
UV_DIR="${UV_DIR:-$HOME/.local/bin}"
if [[ ! "$PYTHON_VERSION" =~ ^3\.([0-9]+) ]] || (( BASH_REMATCH[1] < 11 )); then
  echo "install.sh: PYTHON_VERSION=$PYTHON_VERSION; expected 3.11 or newer (pyproject's" \
       "requires-python)" >&2
  exit 2
fi

if [[ -z "${UV:-}" ]]; then
  if command -v uv > /dev/null; then
    UV="$(command -v uv)"
  elif [[ -x "$UV_DIR/uv" ]]; then
    UV="$UV_DIR/uv"
  else
    echo "install.sh: installing uv into $UV_DIR (uv's standalone installer)"
    curl -LsSf https://astral.sh/uv/install.sh | env UV_UNMANAGED_INSTALL="$UV_DIR" sh
    UV="$UV_DIR/uv"
    [[ -x "$UV" ]] || { echo "install.sh: the uv installer left no $UV" >&2; exit 1; }
  fi
fi

# an existing environment is reused when its Python is new enough, never replaced
if [[ -x "$VENV/bin/python" ]]; then
  if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "install.sh: $VENV holds Python $("$VENV/bin/python" -V 2>&1); expected 3.11 or" \
         "newer: remove it, or set VENV to another directory" >&2
    exit 1
  fi
else
  "$UV" venv --python "$PYTHON_VERSION" "$VENV"
fi
"$UV" pip install --python "$VENV/bin/python" -c constraints.txt -e ".[$EXTRAS]"

# what the runs import first; the devices themselves are `jaxtom doctor`'s to check
"$VENV/bin/python" -c 'import sys, jax, jaxtom; print(f"install.sh: {sys.executable}: Python {sys.version.split()[0]}, jax {jax.__version__}")'
if [[ ",$EXTRAS," =~ ,(tpu|cuda|gcs), ]]; then
  "$VENV/bin/python" -c 'import gcsfs, google.cloud.storage' \
    || { echo "install.sh: gcsfs or google-cloud-storage did not install" >&2; exit 1; }
fi
echo "install.sh: done; next: $VENV/bin/jaxtom doctor CONFIG [overrides]" \
     "(launch/tpu_pod.sh takes PYTHON=$VENV/bin/python)"
