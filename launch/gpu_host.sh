#!/usr/bin/env bash
# One multi-GPU host (H100/H200): one process drives every visible GPU; the mesh in the config
# (mesh.data / mesh.fsdp / mesh.tensor) decides how params and batch are split.
#   launch/gpu_host.sh configs/ctom_math_smollm2.py mesh.fsdp=-1
# Multi-node (one process per node): set on every node
#   JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=<nodes> JAX_PROCESS_ID=<rank>
# (or run under SLURM, which jax.distributed detects), then the same command everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
export JAX_PLATFORMS="${JAX_PLATFORMS:-cuda}"
# let XLA take most of the memory up front, as is usual for training; lower if sharing a GPU
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
# overlap collectives with compute on NVLink hosts
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
if [[ -n "${JAX_COORDINATOR_ADDRESS:-}" ]]; then
  : "${JAX_NUM_PROCESSES:?set JAX_NUM_PROCESSES with JAX_COORDINATOR_ADDRESS}"
  : "${JAX_PROCESS_ID:?set JAX_PROCESS_ID with JAX_COORDINATOR_ADDRESS}"
fi
exec python -m jaxtom.cli train "$@"
