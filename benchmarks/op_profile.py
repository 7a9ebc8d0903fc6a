"""Where a compiled program's time goes, by the decoder's named scopes.

`scope_times` runs a jitted call under `jax.profiler`, reads the trace JAX writes
(`*.trace.json.gz`: one event per executed XLA op, with its HLO module and op name), and
sums the ops' times by the JAX scope each op came from, read from the compiled HLO's
`op_name` metadata: `attention` (scores, mask, softmax, weighted values), `qkv` (input norm,
q/k/v projections, RoPE), `o_proj`, `mlp` (post-attention norm, gate/up/down), `lm_head`
(`jaxtom.rl.logprobs`), and `other` (embedding, masks built once per forward, the loss,
the optimiser). Forward and backward ops of a scope count together.

Op times are summed over the executor's threads, so their total exceeds the wall-clock
time where ops run in parallel; the shares are what a profile can say, not seconds saved.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import tempfile
from pathlib import Path

import jax

SCOPES = ("attention", "qkv", "o_proj", "mlp", "lm_head")
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]*)\"")


def op_scopes(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> the scope its `op_name` names (`other` when none)."""
    scopes = {}
    for line in hlo_text.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            parts = re.split(r"[/()]", m.group(2))
            scopes[m.group(1)] = next((s for s in SCOPES if s in parts), "other")
    return scopes


def scope_times(jitted, make_args, repeats: int = 2) -> dict:
    """Op time per scope (ms per call, mean of `repeats` profiled calls) of
    `jitted(*make_args())`; `make_args` returns fresh arguments for each call (a program
    that donates its inputs cannot take the same ones twice)."""
    scopes = op_scopes(jitted.lower(*make_args()).compile().as_text())
    with tempfile.TemporaryDirectory(prefix="jaxtom-profile-") as out:
        jax.profiler.start_trace(out)
        try:
            for _ in range(repeats):
                jax.block_until_ready(jitted(*make_args()))
        finally:
            jax.profiler.stop_trace()
        trace = json.load(gzip.open(next(Path(out).rglob("*.trace.json.gz"))))
    totals: collections.Counter = collections.Counter()
    for event in trace["traceEvents"]:
        info = event.get("args") or {}
        if event.get("ph") == "X" and info.get("hlo_op") in scopes:
            totals[(info.get("hlo_module"), scopes[info["hlo_op"]])] += event["dur"]
    by_module = collections.Counter()
    for (module, _), t in totals.items():
        by_module[module] += t
    if not by_module:
        raise RuntimeError("the profile holds no op of the program: was it traced?")
    module = by_module.most_common(1)[0][0]  # the program's own ops (not a copy's)
    per_scope = {s: totals[(module, s)] / 1e3 / repeats for s in (*SCOPES, "other")}
    total = sum(per_scope.values())
    return {"module": module, "op_ms": {k: round(v, 1) for k, v in per_scope.items()},
            "op_ms_total": round(total, 1),
            "share": {k: round(v / total, 3) for k, v in per_scope.items()}}
