#!/usr/bin/env bash
# One multi-GPU host (H100/H200): one process drives every visible GPU; the mesh in the config
# (mesh.data / mesh.fsdp / mesh.tensor) decides how params and batch are split.
#   launch/gpu_host.sh configs/ctom_math_smollm2.py mesh.fsdp=-1
# Multi-node (one process per node): set on every node
#   JAX_COORDINATOR_ADDRESS=host0:1234 JAX_NUM_PROCESSES=<nodes> JAX_PROCESS_ID=<rank>
# (or run under SLURM, which jax.distributed detects), then the same command everywhere.
# PYTHON: the interpreter (default: python on PATH; e.g. .venv/bin/python from install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export JAX_PLATFORMS="${JAX_PLATFORMS:-cuda}"
# let XLA take most of the memory up front, as is usual for training; lower if sharing a GPU
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
# XLA settings for FSDP on NVLink hosts (H100/H200), put before the caller's XLA_FLAGS: XLA
# keeps the last of a repeated flag, so anything set in XLA_FLAGS overrides these.
# - latency hiding scheduler: schedules the all-gathers and reduce-scatters of the fsdp
#   shards early so they run while the previous layer computes (JAX's GPU performance tips);
# - pipelined all-gather / reduce-scatter / all-reduce: the layers are a scan (a while
#   loop), whose per-layer weight all-gather and gradient reduce-scatter otherwise wait for
#   their own iteration; these move them one iteration ahead so the scheduler can overlap them;
# - triton gemm off: matmuls go to cuBLAS instead of autotuned Triton GEMM fusions, whose
#   autotuning adds compile time to every program of the run (an 8B model's programs take
#   minutes to compile already), while cuBLAS has kernels tuned for an LLM's large bf16
#   matmuls. Set --xla_gpu_enable_triton_gemm=true in XLA_FLAGS to compare.
# tests/test_gpu_host.py starts JAX with these flags, so a jaxlib that drops one fails there.
GPU_XLA_FLAGS="--xla_gpu_enable_latency_hiding_scheduler=true \
--xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true \
--xla_gpu_enable_pipelined_all_reduce=true --xla_gpu_enable_triton_gemm=false"
export XLA_FLAGS="$GPU_XLA_FLAGS ${XLA_FLAGS:-}"
if [[ -n "${JAX_COORDINATOR_ADDRESS:-}" ]]; then
  : "${JAX_NUM_PROCESSES:?set JAX_NUM_PROCESSES with JAX_COORDINATOR_ADDRESS}"
  : "${JAX_PROCESS_ID:?set JAX_PROCESS_ID with JAX_COORDINATOR_ADDRESS}"
fi
exec "${PYTHON:-python}" -m jaxtom.cli train "$@"
