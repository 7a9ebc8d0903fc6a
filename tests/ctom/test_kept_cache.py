"""Kept KV caches: the controller's contexts extend each other token for token, a policy that
keeps each conversation's cache prefills only new tokens, and greedy transcripts equal the
re-prefill path's (tiny random model, scripted simulator)."""

import jax
import pytest

from jaxtom.sampling import loop as sampling_loop

from jaxtom.sampling import sampler
from jaxtom.ctom import protocol as P
from jaxtom.ctom.controller import ControllerConfig, run_conversations
from jaxtom.ctom.data import builtin_tasks
from jaxtom.ctom.kept_cache import KeptCaches, common_prefix
from jaxtom.ctom.policies import SamplerPolicy, ScriptedPolicy
from jaxtom.ctom.prompts import SIMULATOR_PROMPTS, system_prompt
from jaxtom.ctom.simulators import ScriptedSimulator

from .scripted import TOK
from .tiny_chat import chatml_bpe, tiny_chat_model

MATH = builtin_tasks("math")[1]
WRITE = builtin_tasks("writing")[0]


@pytest.fixture(scope="module")
def tok():
    """A small byte-level BPE with ChatML specials, trained on the prompts it will encode."""
    corpus = list(SIMULATOR_PROMPTS.values()) + [system_prompt(d) for d in ("math", "writing")]
    corpus += [t.prompt + " " + t.hidden for t in (MATH, WRITE)]
    return chatml_bpe(corpus)


@pytest.fixture(scope="module")
def model(tok):
    return tiny_chat_model(tok, max_positions=4096)


CFG = dict(max_rounds=2, max_revisions=1, plan_cap=6, ask_cap=8, draft_cap=10,
           revision_cap=10, prediction_cap=6)


def transcript(conv):
    return (conv.visible, conv.actions, conv.end, conv.submission,
            [(r.plan, r.raw_decision, r.drafts, r.predictions, r.shown, r.reply)
             for r in conv.rounds], [s.tokens for s in conv.sequences],
            [s.policy for s in conv.sequences])


def test_common_prefix_and_what_a_row_prefills():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2, 3]) == 2 and common_prefix([1, 2, 3], [1, 2]) == 2
    caches = KeptCaches(model=None)
    caches.held = {0: [1, 2, 3, 4], 1: [1, 2, 3, 4], 2: [1, 2, 3]}
    starts, chunks = caches.plan([[1, 2, 3, 4, 5, 6], [1, 2, 9], [1, 2, 3], [7, 8]], [0, 1, 2, 3])
    # extends: only the new tokens; diverges: back to the common prefix; already held: the
    # last token again (its logits choose the first new token); unknown: everything
    assert starts == [4, 2, 2, 0] and chunks == [[5, 6], [9], [3], [7, 8]]


def test_rounds_extend_the_previous_history_token_for_token():
    """Round t+1's h_t starts with round t's h_t, and equals the re-encoded history here."""
    def script(ctx, kind):
        return {"plan": "Go." + P.PLAN_END, "decision": "A",
                "draft": r"x = \boxed{5}" + P.DRAFT_END}.get(kind, "ok" + P.PREDICTION_END)

    cfg = ControllerConfig.for_domain("math", max_rounds=3, max_revisions=0, plan_cap=16,
                                      draft_cap=16, revision_cap=16, prediction_cap=16)
    [conv] = run_conversations([MATH], ScriptedPolicy(TOK, script), ScriptedSimulator(), TOK,
                               cfg, key=jax.random.key(0))
    system = system_prompt("math", categorical=cfg.categorical)
    plan_start = TOK.encode(P.PLAN_START)
    heads = []
    for rnd, seg in zip(conv.rounds, conv.sequences):
        h = seg.tokens[:seg.policy.index(1.0) - len(plan_start)]
        assert TOK.decode(h) == P.render_history(TOK, system, conv.visible[:rnd.history_len])
        assert h == TOK.encode(P.render_history(TOK, system, conv.visible[:rnd.history_len]))
        heads.append(h)
    assert len(heads) == 3
    for a, b in zip(heads, heads[1:]):
        assert b[:len(a)] == a and len(b) > len(a)


def test_every_call_names_its_conversation_and_one_buffer():
    seen = []

    class Spy(ScriptedPolicy):
        def generate(self, contexts, **kw):
            seen.append((kw["conversations"], kw["buffer_len"], [TOK.decode(c) for c in contexts]))
            return super().generate(contexts, **kw)

    def script(ctx, kind):
        return "A" if kind == "decision" else "fine[PLAN_END][DRAFT_END]"

    tasks = [MATH, WRITE]
    for shared, expected in ((True, 16), (False, None)):
        seen.clear()
        cfg = ControllerConfig.for_domain("writing", max_rounds=1, max_revisions=0,
                                          plan_cap=4, ask_cap=8, draft_cap=16,
                                          revision_cap=16, prediction_cap=8,
                                          shared_buffer=shared)
        run_conversations(tasks, Spy(TOK, script), ScriptedSimulator(), TOK, cfg,
                          key=jax.random.key(0))
        assert seen and all(buf == expected for _, buf, _ in seen)
        for convs, _, texts in seen:
            assert all(tasks[c].prompt in text for c, text in zip(convs, texts))


def test_kept_caches_prefill_only_new_tokens_and_transcripts_match(tok, model):
    cfg = ControllerConfig.for_domain("math", **CFG)
    runs = {}
    for reuse in (True, False):
        policy = SamplerPolicy(model, tok, temperature=0.0, reuse_cache=reuse)
        convs = run_conversations([MATH, WRITE], policy, ScriptedSimulator(run_code=False), tok,
                                  cfg, key=jax.random.key(0))
        runs[reuse] = (convs, policy)
        assert policy.caches is None or policy.caches.store is None  # released after the run
    (kept, kept_policy), (fresh, fresh_policy) = runs[True], runs[False]
    assert [transcript(c) for c in kept] == [transcript(c) for c in fresh]
    assert all(len(c.rounds) == 2 for c in kept)  # h_t grew between rounds
    for i, conv in enumerate(kept):
        # every token of a round's sequence is written to the cache once (prefilled, or
        # decoded and then prefilled as the next chunk's first token), apart from h_t's
        # prefix shared with the round before, so the re-prefill path's count is far higher
        total = sum(len(s) for s in conv.sequences)
        assert kept_policy.prefilled[i] <= total
        assert fresh_policy.prefilled[i] > 4 * kept_policy.prefilled[i]


def test_phases_with_different_caps_share_decode_programs(tok, model):
    """One shared output buffer: the compiled decode loop depends on the cache shape only,
    so phases with different caps in one cache-size bucket run one program."""
    cfg = ControllerConfig.for_domain("math", **{**CFG, "max_rounds": 1})
    calls = []
    original = sampler.generate

    def recording(*args, **kw):
        out = original(*args, **kw)
        calls.append((out.state.cache.k.shape, kw["buffer_len"], kw["max_new_tokens"]))
        return out

    sampling_loop._COMPILED.clear()  # fresh jit wrappers: earlier programs do not count
    before = sampling_loop.TRACE_COUNT["decode"]
    sampler.generate = recording
    try:
        run_conversations([MATH, WRITE], SamplerPolicy(model, tok, temperature=0.0),
                          ScriptedSimulator(run_code=False), tok, cfg, key=jax.random.key(0))
    finally:
        sampler.generate = original
    assert {buf for _, buf, _ in calls} == {cfg.largest_cap}
    shapes = {shape for shape, _, _ in calls}
    caps_per_shape = [{cap for s, _, cap in calls if s == shape} for shape in shapes]
    assert max(map(len, caps_per_shape)) >= 2  # some program served several caps
    assert sampling_loop.TRACE_COUNT["decode"] - before <= len(shapes)


SHARDED_STORE = r"""
import json
import jax, numpy as np
from flax import nnx
from jaxtom import parallel
from jaxtom.sampling import loop as sampling_loop
from jaxtom.sampling import sampler
from jaxtom.ctom import kept_cache
from jaxtom.ctom.kept_cache import KeptCaches
from jaxtom.models import init_decoder
from jaxtom.models.config import ModelConfig

cfg = ModelConfig(family="qwen3", vocab_size=128, hidden_size=32, intermediate_size=64,
                  num_layers=1, num_heads=2, num_kv_heads=2, head_dim=16, qk_norm=True,
                  max_position_embeddings=512)
plain = init_decoder(cfg, seed=1)
mesh = parallel.make_mesh(data=2, fsdp=2, tensor=2)
graphdef, state = nnx.split(init_decoder(cfg, seed=1))
sharded = nnx.merge(graphdef, parallel.place_state(state, mesh))
want = sampling_loop.cache_sharding(mesh)
rng = np.random.default_rng(0)
caches = {"plain": KeptCaches(plain), "sharded": KeptCaches(sharded)}
contexts = {}
out = {"calls": []}
# growing conversations and contexts: the store grows in rows and slots, then is reused
for call, convs in enumerate([[0, 1], [3, 4, 5, 6, 7, 9], [0, 1]]):
    for c in convs:
        contexts[c] = contexts.get(c, []) + rng.integers(1, 128, 5 + 30 * call).tolist()
    seqs = {}
    for name, kept in caches.items():
        res, _ = kept.generate([contexts[c] for c in convs], convs, max_new_tokens=6,
                               temperature=0.0, buffer_len=16)
        seqs[name] = res.sequences()
    for c, s in zip(convs, seqs["plain"]):
        contexts[c] = contexts[c] + s
    store = caches["sharded"].store
    per_device = {}
    for a in (store.k, store.v):
        for shard in a.addressable_shards:
            per_device[shard.device.id] = per_device.get(shard.device.id, 0) + shard.data.nbytes
    out["calls"].append(dict(
        same=seqs["plain"] == seqs["sharded"], shape=list(store.k.shape),
        equivalent=all(a.sharding.is_equivalent_to(want, a.ndim) for a in (store.k, store.v)),
        store_bytes=store.k.nbytes + store.v.nbytes, per_device=sorted(per_device.values()),
        planned=kept_cache.device_bytes(cfg, max(contexts) + 1, store.k.shape[3], mesh)))
print("RESULT " + json.dumps(out))
"""


def test_store_is_sharded_like_the_kv_cache_on_8_devices():
    """On a (2, 2, 2) mesh the store's arrays keep `sampling_loop.cache_sharding` through growth
    in rows and slots (conversations over data x fsdp, kv heads over tensor): each device
    holds 1/8 of it, never a replica; greedy samples equal the unsharded model's."""
    from tests.simulated import run_on_devices
    out = run_on_devices(SHARDED_STORE, devices=8)
    shapes = [tuple(c["shape"]) for c in out["calls"]]
    assert len(set(shapes)) == 3  # the store grew (rows, then slots) between calls
    for c in out["calls"]:
        assert c["same"] and c["equivalent"], c
        assert c["per_device"] == [c["store_bytes"] // 8] * 8, c
    assert out["calls"][-1]["planned"] == out["calls"][-1]["per_device"][0]
