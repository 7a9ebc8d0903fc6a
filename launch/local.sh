#!/usr/bin/env bash
# Local run on this machine's devices (CPU, one GPU, or every GPU of one host).
#   launch/local.sh configs/toy_cpu.py trainer.total_steps=60
# Simulate N CPU devices (to try a mesh on a laptop): JAXTOM_CPU_DEVICES=8 launch/local.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${JAXTOM_CPU_DEVICES:-}" ]]; then
  export JAX_PLATFORMS=cpu
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=${JAXTOM_CPU_DEVICES}"
fi
exec python -m jaxtom.cli train "$@"
