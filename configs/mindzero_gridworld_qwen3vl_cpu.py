"""The CPU image default of MindZero: a from-scratch Qwen3-VL reads the rendered grid (32 px
cells, the ranked-ahead partner outlined), is warmed up on label-free teacher answers and
trained by SSRL, all within 15 minutes on 2 cores; `jaxtom mindzero run` prints its held-out
table against its warm-up. Settings and why: `jaxtom.mindzero.experiments_vl.cpu_vl_config`;
three seeds in benchmarks/README.md (issue 37)."""

from jaxtom.mindzero.experiments_vl import cpu_vl_config


def get_config():
    return cpu_vl_config()
