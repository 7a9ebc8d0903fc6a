#!/usr/bin/env bash
# TPU pod slice: every worker runs the same command; jax.distributed.initialize() finds the
# coordinator from the TPU metadata (TPU_WORKER_HOSTNAMES), so no addresses are needed.
#   launch/tpu_pod.sh <tpu-name> <zone> configs/<config>.py mesh.fsdp=-1 [overrides...]
# The repo must be present at the same path on every worker (e.g. cloned by the same command).
set -euo pipefail
TPU_NAME="$1"; ZONE="$2"; shift 2
REPO_DIR="${REPO_DIR:-\$HOME/jaxtom}"
ARGS="$(printf '%q ' "$@")"
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command \
  "cd $REPO_DIR && JAX_PLATFORMS=tpu python -m jaxtom.cli train $ARGS"
