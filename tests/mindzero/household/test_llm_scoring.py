"""Option scoring: parity with a direct transformers computation on a tiny random model, the
bucketed jit (no recompiles for same-shaped batches), the cache, and the HTTP backend against
a local fake server that records what it receives."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from jaxtom.mindzero.household.llm_scoring import (CachedScorer, ModelScorer, OptionQuery,
                                                   ScoringError, normalise_logprobs,
                                                   score_options)
from jaxtom.mindzero.household.llm_scoring_http import (HTTPScorer, _echoed_option_logprob,
                                                        top_k_option_logprobs)

PROMPTS = [
    "Human walks towards the fridge. Is this likely? Answer:",
    "Human grabs the plate. Human walks towards the kitchentable. Which action is next?",
    "The kitchen has 1 fridge, 4 kitchencabinet, 1 stove.",
    "Is putting an apple in the dishwasher plausible?",
]
OPTIONS = [(" A", " B"), (" Human puts the plate on the kitchentable", " Human grabs the apple",
                          " B"),
           (" The fridge contains 2 cupcake", " The stove"), ("A", "B", "C")]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> (tokenizer, transformers model, jaxtom model): a ChatML byte-level BPE trained
    on the test texts, and random fp32 checkpoints written by transformers: a Qwen3 with its
    own LM head and a Llama with tied embeddings (both head layouts)."""
    from jaxtom import models
    from jaxtom.models.tiny import save_tiny_hf
    from tests.ctom.tiny_chat import chatml_bpe

    corpus = PROMPTS + [o for opts in OPTIONS for o in opts]
    tok = chatml_bpe(corpus * 2, vocab_size=1000)
    out = {}
    for name, family, extra in (("qwen3", "qwen3", {}),
                                ("llama-tied", "llama", {"tie_word_embeddings": True})):
        path = tmp_path_factory.mktemp(name)
        tm = save_tiny_hf(path, family, vocab_size=tok.vocab_size,
                          max_position_embeddings=256, **extra)
        out[name] = (tok, tm, models.from_pretrained(path))
    return out


@pytest.fixture(scope="module")
def tiny(checkpoints):
    return checkpoints["qwen3"]


def transformers_logprob(tm, prompt_ids, option_ids):
    """Sum of the option's token log-probs after the prompt, straight from transformers."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(option_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(tm(ids).logits[0].double(), dim=-1)
    return sum(float(logp[len(prompt_ids) - 1 + k, t]) for k, t in enumerate(option_ids))


@pytest.mark.parametrize("name, chat", [("qwen3", False), ("llama-tied", True)])
def test_model_scorer_matches_transformers(checkpoints, name, chat):
    import jax

    tok, tm, model = checkpoints[name]
    scorer = ModelScorer(model, tok, chat=chat, rows_per_call=4, min_length=16)
    queries = [OptionQuery(p, o) for p, o in zip(PROMPTS, OPTIONS)]
    with jax.default_matmul_precision("highest"):  # float32 matmuls on accelerators too
        ours = scorer.option_logprobs(queries)
    worst = 0.0
    for q, lp in zip(queries, ours):
        p_ids = scorer.prompt_ids(q.prompt)
        ref = np.array([transformers_logprob(tm, p_ids, tok.encode(o)) for o in q.options])
        assert lp.shape == (len(q.options),)
        assert np.abs(ref).max() > 1.0  # a meaningful scale, not all near 0
        worst = max(worst, float(np.abs(lp - ref).max()))
        # the normalised variant: P(o | prompt) / sum over the options
        np.testing.assert_allclose(normalise_logprobs(lp), ref - np.logaddexp.reduce(ref),
                                   atol=1e-4)
    assert worst < 1e-4, worst
    print(f"max |jaxtom - transformers| option log-prob ({name}, "
          f"{'chat' if chat else 'raw'}): {worst:.2e}")
    # both paths ran and agree with transformers: single-token (letters) queries, scored
    # from one next-token distribution, and multi-token ones, scored one row per option
    assert any(all(len(tok.encode(o)) == 1 for o in q.options) for q in queries)
    assert any(any(len(tok.encode(o)) > 1 for o in q.options) for q in queries)


def test_same_shaped_batches_do_not_recompile(tiny):
    tok, _, model = tiny
    scorer = ModelScorer(model, tok, rows_per_call=4, min_length=128, share_prefix=False)
    scorer.option_logprobs([OptionQuery(p, ("A", "B")) for p in PROMPTS[:3]])
    first = scorer.compiles
    assert first == 1
    # other prompts and letters, same buckets (3 rows -> 4, length <= 128, 2 options)
    scorer.option_logprobs([OptionQuery(p.replace("the", "a"), ("B", "C"))
                            for p in PROMPTS[1:4]])
    scorer.option_logprobs([OptionQuery(p, ("A", "B")) for p in PROMPTS[:3]])
    assert scorer.compiles == first
    # a batch larger than rows_per_call is chunked into the same shape
    scorer.option_logprobs([OptionQuery(PROMPTS[i % 4], ("A", "B")) for i in range(8)])
    assert scorer.compiles == first


def hypotheses(context, n=6):
    """One sample's questions: a shared context, then one goal each (as llm_prompts builds)."""
    return [OptionQuery(f"{context} Goal: put {k} plate to the kitchentable. Answer:",
                        (" A", " B")) for k in range(1, n + 1)]


def test_shared_prefix_equals_full_rows_with_less_work(tiny):
    tok, _, model = tiny
    context = " ".join(PROMPTS * 2)
    queries = hypotheses(context) + [OptionQuery(context + " Which?", OPTIONS[1])]
    shared = ModelScorer(model, tok, rows_per_call=16, min_length=16, min_shared=16)
    full = ModelScorer(model, tok, rows_per_call=16, min_length=16, share_prefix=False)
    a, b = shared.option_logprobs(queries), full.option_logprobs(queries)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-4, rtol=0)
    assert shared.tokens_run < full.tokens_run / 2, (shared.tokens_run, full.tokens_run)
    # another sample of the same shape: no new program
    compiles = shared.compiles
    shared.option_logprobs(hypotheses(context.replace("Human", "Mary"))
                           + [OptionQuery(context.replace("Human", "Mary") + " Which?",
                                          OPTIONS[1])])
    assert shared.compiles == compiles


def test_model_scorer_bad_input(tiny):
    tok, _, model = tiny
    scorer = ModelScorer(model, tok, max_len=40)
    with pytest.raises(ValueError, match="query 0: no options"):
        scorer.option_logprobs([OptionQuery("prompt", ())])
    with pytest.raises(ValueError, match="query 1: option 1 must be a non-empty string"):
        scorer.option_logprobs([OptionQuery("p", ("A",)), OptionQuery("p", ("A", ""))])
    with pytest.raises(ValueError, match="query 0: the prompt must be a non-empty string"):
        scorer.option_logprobs([OptionQuery("", ("A",))])
    with pytest.raises(ValueError, match="exceeds the model's context of 40 tokens"):
        scorer.option_logprobs([OptionQuery(" ".join(["fridge"] * 60), ("A", "B"))])
    assert scorer.option_logprobs([]) == []


class CountingScorer:
    """A fake backend: option j of any prompt scores -(len(prompt) + j); records its calls."""

    def __init__(self):
        self.calls = []

    def option_logprobs(self, queries):
        self.calls.append(list(queries))
        return [-(len(q.prompt) + np.arange(len(q.options), dtype=float)) for q in queries]


def test_cache_counts_hits_and_misses():
    inner = CountingScorer()
    cache = CachedScorer(inner)
    a, b, c = (OptionQuery("aa", ("A", "B")), OptionQuery("bbb", ("A", "B")),
               OptionQuery("aa", ("A", "B", "C")))
    out = cache.option_logprobs([a, b, a])  # a twice in one call: scored once
    assert [len(x) for x in inner.calls] == [2]
    assert cache.stats() == {"hits": 1, "misses": 2, "entries": 2}
    np.testing.assert_array_equal(out[0], out[2])
    again = cache.option_logprobs([b, a, c])  # options are part of the key
    assert inner.calls[-1] == [c]
    assert cache.stats() == {"hits": 3, "misses": 3, "entries": 3}
    np.testing.assert_array_equal(again[1], out[0])
    again[1][0] = 99.0  # callers get copies: the cache cannot be corrupted
    assert cache.option_logprobs([a])[0][0] == -2.0
    assert len(inner.calls) == 2
    bounded = CachedScorer(CountingScorer(), max_entries=2)
    bounded.option_logprobs([a, b, c])
    assert bounded.stats()["entries"] == 2
    with pytest.raises(ValueError, match="no options"):
        cache.option_logprobs([OptionQuery("x", ())])


def test_score_options_and_normalise():
    lp = score_options(CountingScorer(), "abc", ["A", "B"])
    np.testing.assert_array_equal(lp, [-3.0, -4.0])
    norm = score_options(CountingScorer(), "abc", ["A", "B"], normalised=True)
    np.testing.assert_allclose(np.exp(norm), [1 / (1 + math.e ** -1), 1 / (1 + math.e)])
    assert np.all(normalise_logprobs([-np.inf, -np.inf]) == -np.inf)


# ---- the HTTP backend against a recording fake server ------------------------------------
def char_logprob(ch):
    return -ord(ch) / 100.0


class FakeServer:
    """An OpenAI-compatible fake on localhost. Completions tokenise one character per token
    (log-prob -ord(c)/100, None for the first) and append one generated token 'Z'; chat
    replies list `top` as the first token's top logprobs. `script` holds per-request
    behaviours: an int (HTTP status to return), a float (seconds to stall), 'junk' (a
    non-JSON body); when it is empty, requests succeed."""

    def __init__(self):
        self.requests = []
        self.script = []
        self.top = [("A", math.log(0.6)), (" A", math.log(0.05)), ("B", math.log(0.3))]
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body,
                                        "auth": self.headers.get("Authorization")})
                action = server.script.pop(0) if server.script else None
                if isinstance(action, float):
                    time.sleep(action)
                if isinstance(action, int):
                    self.send_response(action)
                    self.end_headers()
                    return
                reply = (b"not json" if action == "junk" else json.dumps(
                    server.reply(self.path, body)).encode())
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def reply(self, path, body):
        if path.endswith("/completions") and "prompt" in body:
            choices = []
            for i, text in enumerate(body["prompt"]):
                full = text + "Z"
                choices.append({"index": i, "text": full, "logprobs": {
                    "tokens": list(full), "text_offset": list(range(len(full))),
                    "token_logprobs": [None] + [char_logprob(c) for c in full[1:]]}})
            return {"choices": choices[::-1]}  # out of order: the client sorts by index
        return {"choices": [{"index": 0, "message": {"content": "A"}, "logprobs": {"content": [
            {"token": "A", "logprob": self.top[0][1],
             "top_logprobs": [{"token": t, "logprob": lp} for t, lp in self.top]}]}}]}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def test_http_completions_echo(server):
    scorer = HTTPScorer(server.url, "judge-model", api_key="k", backoff_s=0.0)
    queries = [OptionQuery("Q: is it? Answer:", (" A", " B")),
               OptionQuery("Which?", (" plate", " fork"))]
    out = scorer.option_logprobs(queries)
    for q, lp in zip(queries, out):
        expected = [sum(char_logprob(c) for c in o) for o in q.options]
        np.testing.assert_allclose(lp, expected)  # the generated 'Z' is not counted
    assert len(server.requests) == 2
    bodies = sorted((r["body"] for r in server.requests), key=lambda b: b["prompt"][0])
    assert bodies[0]["prompt"] == ["Q: is it? Answer: A", "Q: is it? Answer: B"]
    for r in server.requests:
        assert r["path"] == "/v1/completions" and r["auth"] == "Bearer k"
        b = r["body"]
        assert (b["model"], b["echo"], b["logprobs"], b["temperature"]) == (
            "judge-model", True, 1, 0.0)


def test_http_chat_top_logprobs(server):
    scorer = HTTPScorer(server.url, "judge", mode="chat_top_logprobs", backoff_s=0.0)
    lp = scorer.option_logprobs([OptionQuery("Likely? A or B", ("A", "B", "C"))])[0]
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    b = req["body"]
    assert b["messages"] == [{"role": "user", "content": "Likely? A or B"}]
    assert (b["model"], b["logprobs"], b["top_logprobs"], b["max_tokens"], b["temperature"]) \
        == ("judge", True, 5, 1, 0.0)
    # "A" and " A" both count for A; C is missing: bounded by the leftover mass 0.05
    np.testing.assert_allclose(lp, [math.log(0.65), math.log(0.3), math.log(0.05)])
    # the public estimator's P(A) / (P(A) + P(B)) is the normalised score over A, B
    ab = score_options(scorer, "x", ["A", "B"], normalised=True)
    np.testing.assert_allclose(np.exp(ab[0]), 0.65 / 0.95)


def test_http_retries_on_5xx_timeout_and_junk(server):
    scorer = HTTPScorer(server.url, "m", timeout_s=0.3, retries=3, backoff_s=0.01)
    server.script = [503, 0.8, "junk"]  # three failures, then success
    lp = scorer.option_logprobs([OptionQuery("P", ("x",))])[0]
    np.testing.assert_allclose(lp, [char_logprob("x")])
    assert len(server.requests) == 4
    assert all(r["body"] == server.requests[0]["body"] for r in server.requests)


def test_http_gives_up_with_a_clear_error(server):
    scorer = HTTPScorer(server.url, "m", retries=2, backoff_s=0.0)
    server.script = [500, 500, 500, 500]
    with pytest.raises(ScoringError, match="after 3 attempts: HTTP 500"):
        scorer.option_logprobs([OptionQuery("P", ("x",))])
    assert len(server.requests) == 3
    server.requests.clear()
    server.script = [400]  # a client error is not retried
    with pytest.raises(ScoringError, match="HTTP 400"):
        scorer.option_logprobs([OptionQuery("P", ("x",))])
    assert len(server.requests) == 1
    dead = HTTPScorer("http://127.0.0.1:9/v1", "m", retries=1, backoff_s=0.0, timeout_s=1.0)
    with pytest.raises(ScoringError, match="after 2 attempts"):
        dead.option_logprobs([OptionQuery("P", ("x",))])


def test_http_from_client_reuses_the_ctom_settings():
    from jaxtom.ctom.simulators import HTTPSimulator

    sim = HTTPSimulator("http://h:8000/v1/chat/completions", "qwen", api_key="s",
                        timeout_s=7.0, retries=5, backoff_s=0.5, concurrency=3)
    scorer = HTTPScorer.from_client(sim, mode="chat_top_logprobs")
    assert (scorer.base_url, scorer.model, scorer.api_key, scorer.timeout_s, scorer.retries,
            scorer.backoff_s, scorer.concurrency, scorer.mode) == (
        "http://h:8000/v1", "qwen", "s", 7.0, 5, 0.5, 3, "chat_top_logprobs")
    with pytest.raises(ValueError, match="mode"):
        HTTPScorer("http://h", "m", mode="bogus")


def test_echo_offsets_and_top_k_edge_cases():
    # the tokenizer merged the prompt's last space with the option: that token counts
    lp = {"tokens": ["Answer", ":", " A", "!"], "text_offset": [0, 6, 7, 9],
          "token_logprobs": [None, -1.0, -2.0, -3.0]}
    assert _echoed_option_logprob(lp, prompt_chars=8, option_chars=1) == -2.0
    with pytest.raises(ValueError, match="no log-prob"):
        _echoed_option_logprob(lp, prompt_chars=0, option_chars=6)
    with pytest.raises(ValueError, match="differ in length"):
        _echoed_option_logprob({**lp, "tokens": ["a"]}, 8, 1)
    # all mass listed and an option missing: bounded by the smallest listed, floored
    out = top_k_option_logprobs([("A", 0.0)], ["A", "B"])
    assert out[0] == 0.0 and out[1] == pytest.approx(math.log(1e-30))
    out = top_k_option_logprobs([("A", math.log(0.5)), ("B", math.log(0.1))], ["C"])
    assert out[0] == pytest.approx(math.log(0.1))
