"""CToM controller: kept KV caches vs re-prefilling every phase, on SmolLM2-135M-Instruct.

Greedy conversations (a writing task and a math task, the scripted user simulator) run
through the controller twice in this one process: with each conversation's KV cache kept
between phases and rounds (`SamplerPolicy(reuse_cache=True)`, one shared output buffer),
and as before, every phase prefilling its whole context with a per-phase buffer. Prints
tokens prefilled and wall time per conversation for both and their ratios, checks that the
transcripts are identical, and ends with one JSON object.

Wall time excludes compilation: each run's time less the trace, lowering and compile
durations JAX reports (`jax.monitoring`); `--repeats N` adds N more runs per side (nothing
left to compile), the sides alternating so that load from other processes hits both alike,
and reports their median instead.

    python benchmarks/ctom_controller.py [--conversations 1 --rounds 2 --revisions 1
        --plan-cap 8 --draft-cap 16 --prediction-cap 8 --repeats 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
from jax import monitoring
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_compile_s = [0.0]


def _on_event(name, seconds, **_):
    if name in COMPILE_EVENTS:
        _compile_s[0] += seconds


monitoring.register_event_duration_secs_listener(_on_event)


def load_smollm2():
    from jaxtom import models
    from jaxtom.config import resolve_model_path
    from jaxtom.tokenizer import Tokenizer
    path = resolve_model_path("smollm2")
    return models.from_pretrained(path), Tokenizer.from_gguf(path)


def transcript(conv):
    """Everything the run produced that a cache could change: visible and hidden text,
    and every round's tokens and masks."""
    return (conv.visible, conv.actions, conv.end, conv.submission,
            [(r.plan, r.raw_decision, r.drafts, r.predictions, r.shown, r.reply)
             for r in conv.rounds],
            [(s.tokens, s.policy, s.decision) for s in conv.sequences])


def history_is_reencoding(conv, tok, cfg) -> bool:
    """Whether each round's h_t tokens equal encoding the rendered history afresh (the
    sequences before contexts were built as tokens)."""
    from jaxtom.ctom import protocol as P
    from jaxtom.ctom.prompts import system_prompt
    system = system_prompt(cfg.domain, categorical=cfg.categorical)
    for rnd, seg in zip(conv.rounds, conv.sequences):
        ids = tok.encode(P.render_history(tok, system, conv.visible[:rnd.history_len]))
        if seg.tokens[:len(ids)] != ids or tok.decode(ids) != tok.decode(
                seg.tokens[:len(ids)]):
            return False
    return True


def main(argv=None) -> dict:
    from jaxtom.sampling import loop as sampling_loop
    from jaxtom.ctom.controller import ControllerConfig, run_conversations
    from jaxtom.ctom.data import builtin_tasks
    from jaxtom.ctom.policies import SamplerPolicy
    from jaxtom.ctom.simulators import ScriptedSimulator

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=1, help="per task (one batch)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--revisions", type=int, default=1)
    ap.add_argument("--plan-cap", type=int, default=8)
    ap.add_argument("--draft-cap", type=int, default=16)
    ap.add_argument("--prediction-cap", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=0)
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args(argv)
    record = Run("ctom_controller")
    load_before = os.getloadavg()

    model, tok = load_smollm2()
    tasks = {"writing": builtin_tasks("writing")[0], "math": builtin_tasks("math")[1]}
    caps = dict(max_rounds=args.rounds, max_revisions=args.revisions, plan_cap=args.plan_cap,
                ask_cap=args.draft_cap, draft_cap=args.draft_cap, revision_cap=args.draft_cap,
                prediction_cap=args.prediction_cap)
    sides = {"kept": dict(reuse_cache=True, shared_buffer=True),
             "reprefill": dict(reuse_cache=False, shared_buffer=False)}
    n = args.conversations

    def run(side, domain):
        """(conversations, prefilled tokens per conversation, seconds less compilation,
        config)."""
        cfg = ControllerConfig.for_domain(domain, shared_buffer=sides[side]["shared_buffer"],
                                          **caps)
        policy = SamplerPolicy(model, tok, temperature=0.0,
                               reuse_cache=sides[side]["reuse_cache"])
        compiling, start = _compile_s[0], time.perf_counter()
        convs = run_conversations([tasks[domain]] * n, policy,
                                  ScriptedSimulator(run_code=False), tok, cfg,
                                  key=jax.random.key(0))
        seconds = time.perf_counter() - start - (_compile_s[0] - compiling)
        return convs, [policy.prefilled[i] for i in range(n)], seconds, cfg

    result = {"model": "SmolLM2-135M-Instruct", "conversations_per_task": n, **caps}
    ok = True
    for domain in tasks:
        first = {}
        for side in sides:
            before = dict(sampling_loop.TRACE_COUNT)
            compiling, start = _compile_s[0], time.perf_counter()
            first[side] = run(side, domain)
            result[f"{domain}_{side}_compiles"] = {
                k: sampling_loop.TRACE_COUNT[k] - before[k] for k in before}
            result[f"{domain}_{side}_compile_s"] = round(_compile_s[0] - compiling, 2)
            result[f"{domain}_{side}_first_wall_s"] = round(time.perf_counter() - start, 2)
        times = {side: [first[side][2] / n] if not args.repeats else [] for side in sides}
        for _ in range(args.repeats):
            for side in sides:
                convs, _, seconds, _ = run(side, domain)
                same = [transcript(c) for c in convs] == [transcript(c) for c in first[side][0]]
                assert same, f"{side} run on {domain} is not deterministic"
                times[side].append(seconds / n)
        kept, fresh = first["kept"][0], first["reprefill"][0]
        identical = [transcript(c) for c in kept] == [transcript(c) for c in fresh]
        ok &= identical
        tokens = {side: statistics.mean(first[side][1]) for side in sides}
        wall = {side: statistics.median(times[side]) for side in sides}
        result.update({
            f"{domain}_identical_transcripts": identical,
            f"{domain}_history_is_reencoding": all(history_is_reencoding(c, tok, first["kept"][3])
                                                   for c in kept),
            f"{domain}_actions": kept[0].actions,
            f"{domain}_sequence_tokens": sum(len(s) for s in kept[0].sequences),
            f"{domain}_prefilled_kept": tokens["kept"],
            f"{domain}_prefilled_reprefill": tokens["reprefill"],
            f"{domain}_prefill_ratio": round(tokens["reprefill"] / tokens["kept"], 2),
            f"{domain}_seconds_kept": round(wall["kept"], 2),
            f"{domain}_seconds_reprefill": round(wall["reprefill"], 2),
            f"{domain}_speedup": round(wall["reprefill"] / wall["kept"], 2)})
        print(f"{domain}: {kept[0].actions}, {result[f'{domain}_sequence_tokens']} tokens in "
              f"its round sequences; per conversation: prefilled {tokens['kept']:.0f} "
              f"(kept caches) vs {tokens['reprefill']:.0f} (re-prefill), "
              f"{result[f'{domain}_prefill_ratio']}x fewer; wall {wall['kept']:.1f} s vs "
              f"{wall['reprefill']:.1f} s, {result[f'{domain}_speedup']}x; transcripts "
              f"identical: {identical}", flush=True)
    result["load_before"] = [round(x, 2) for x in load_before]
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    record.emit(result, save=args.save)
    assert ok, "kept-cache transcripts differ from the re-prefill path's"
    return result


if __name__ == "__main__":
    main()
