"""Sampler: greedy parity with transformers generate, log-probs, resume, stops, errors."""

import jax
import numpy as np
import pytest
import torch

from jaxtom import models

from jaxtom.sampling import loop as sampling_loop

from jaxtom.sampling import sampler
from jaxtom.models.decoder import CACHE_SEQ_AXIS
from jaxtom.models.tiny import save_tiny_hf
from jaxtom.tokenizer import Tokenizer
from tests.tolerance import decoder_depth, decoder_reduction, float32_tol

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [200]]


def cache_len(*results) -> int:
    """The most keys any of `results`' decode steps attended over."""
    return max(r.state.cache.k.shape[CACHE_SEQ_AXIS] for r in results)


def logprob_tol(model, seq_len, sequences, logprobs) -> float:
    """Bound (tests/tolerance.py) on float32 rounding between two programs' log-probs of
    `sequences`: a decoder forward to the logits whose attention sums over `seq_len` keys,
    whose error enters log p = z_token - logsumexp(z) twice, plus the log-softmax's own sum
    over the vocabulary; at the magnitude of the logits (right-padded into one batch, which
    changes no real position's logits) or of the log-probs, whichever is larger."""
    cfg = model.config
    width = max(map(len, sequences))
    ids = np.asarray([list(s) + [0] * (width - len(s)) for s in sequences])
    scale = max(float(np.abs(np.asarray(model(ids))).max()), float(np.abs(logprobs).max()))
    forward = float32_tol(scale, decoder_reduction(cfg, seq_len), decoder_depth(cfg))
    return 2 * forward + float32_tol(scale, cfg.vocab_size + 2)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen")
    torch_model = save_tiny_hf(path, "qwen3")
    return models.from_pretrained(path), torch_model


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    torch_model = save_tiny_hf(path, "llama", num_attention_heads=8, num_key_value_heads=2,
                               head_dim=8, rope_scaling={
                                   "rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 16})
    return models.from_pretrained(path), torch_model


@pytest.mark.parametrize("which", ["qwen", "llama"])
def test_greedy_matches_transformers_generate(request, which):
    model, torch_model = request.getfixturevalue(which)
    result = sampler.generate(model, PROMPTS, max_new_tokens=32, temperature=0.0)
    assert result.tokens.shape == (3, 32) and list(result.lengths) == [32, 32, 32]
    for prompt, ours in zip(PROMPTS, result.sequences()):
        with torch.no_grad():
            ref = torch_model.generate(torch.tensor([prompt]), max_new_tokens=32,
                                       do_sample=False)[0, len(prompt):].tolist()
        assert ours == ref


def test_logprobs_are_model_logprobs(qwen):
    model, _ = qwen
    result = sampler.generate(model, PROMPTS[:1], max_new_tokens=12, temperature=1.0,
                               key=jax.random.key(0))
    seq = PROMPTS[0] + result.sequences()[0]
    logp = jax.nn.log_softmax(model(np.asarray([seq])), -1)[0, len(PROMPTS[0]) - 1:-1]
    expected = np.take_along_axis(np.asarray(logp), np.asarray(result.sequences()[0])[:, None],
                                  1)[:, 0]
    tol = logprob_tol(model, max(cache_len(result), len(seq)), [seq], expected)
    np.testing.assert_allclose(result.logprobs[0], expected, rtol=0, atol=tol)
    # the log-probs one position off are caught
    assert np.abs(result.logprobs[0][1:] - expected[:-1]).max() > tol


def test_same_key_same_samples_and_filters(qwen):
    model, _ = qwen
    kw = dict(max_new_tokens=16, temperature=1.0, key=jax.random.key(7))
    a, b = sampler.generate(model, PROMPTS, **kw), sampler.generate(model, PROMPTS, **kw)
    assert np.array_equal(a.tokens, b.tokens)
    c = sampler.generate(model, PROMPTS, **{**kw, "key": jax.random.key(8)})
    assert not np.array_equal(a.tokens, c.tokens)
    greedy = sampler.generate(model, PROMPTS, max_new_tokens=16, temperature=0.0)
    for filt in (dict(top_k=1), dict(top_p=1e-6)):
        assert np.array_equal(sampler.generate(model, PROMPTS, **kw, **filt).tokens,
                              greedy.tokens)
    top3 = sampler.generate(model, PROMPTS, **{**kw, "temperature": 5.0}, top_k=3)
    first_logits = np.asarray(model(np.asarray([PROMPTS[0]])))[0, -1]
    assert top3.tokens[0, 0] in set(np.argsort(first_logits)[-3:])


def test_resume_equals_generating_from_the_full_prefix(qwen):
    model, _ = qwen
    first = sampler.generate(model, PROMPTS, max_new_tokens=5, temperature=0.0)
    extra = [[1, 2], [3], [4, 5, 6]]
    resumed = sampler.generate(model, extra, max_new_tokens=40, temperature=0.0,
                                resume=first.state)
    for prompt, gen, more, ours in zip(PROMPTS, first.sequences(), extra, resumed.sequences()):
        full = sampler.generate(model, [prompt + gen + more], max_new_tokens=40,
                                 temperature=0.0).sequences()[0]
        assert ours == full


def test_stop_ids_end_rows_and_pad(qwen):
    model, _ = qwen
    greedy = sampler.generate(model, PROMPTS, max_new_tokens=20, temperature=0.0)
    stop_tok = int(greedy.tokens[0, 4])
    first_hit = [int(np.argmax(row == stop_tok)) + 1 if stop_tok in row else 20
                 for row in greedy.tokens]
    result = sampler.generate(model, PROMPTS, max_new_tokens=20, temperature=0.0,
                               stop=[stop_tok], pad_id=0)
    assert list(result.lengths) == first_hit
    assert result.finished[0] and result.lengths[0] <= 5
    for row, n in zip(result.tokens, result.lengths):
        assert np.all(row[n:] == 0)


def test_stop_strings_cut_at_first_occurrence(tmp_path):
    from tokenizers import Tokenizer as HFTokenizer, decoders, models as tm, pre_tokenizers
    from tokenizers import trainers

    corpus = [f"the {a} helper {b} the goal" for a in ("red", "big", "odd") for b in
              ("finds", "asks", "drafts")] * 30
    bpe = HFTokenizer(tm.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = Tokenizer(bpe)
    save_tiny_hf(tmp_path, "qwen3", vocab_size=tok.vocab_size, initializer_range=0.05)
    model = models.from_pretrained(tmp_path)
    stops = ["e t", "ZZ", "he"]
    result = sampler.generate(model, ["the red", "odd"] * 4, max_new_tokens=40,
                               temperature=1.0, key=jax.random.key(0), stop=stops,
                               tokenizer=tok)
    assert result.finished.any()
    for row, n, done, text in zip(result.tokens, result.lengths, result.finished,
                                  result.texts):
        full = tok.decode(row[:n].tolist())
        before = tok.decode(row[:n - 1].tolist())
        hit = any(s in full for s in stops)
        assert bool(done) == hit
        if done:  # stopped on the first token that completed a stop string
            assert not any(s in before for s in stops)
            assert any(text.endswith(s) for s in stops) and full.startswith(text)
        else:
            assert n == 40


def test_bad_requests(qwen):
    model, _ = qwen
    with pytest.raises(ValueError, match="exceeds the cache length 512"):
        sampler.generate(model, [[1] * 500], max_new_tokens=20, temperature=0.0)
    with pytest.raises(ValueError, match="exceeds the cache length 64"):
        sampler.generate(model, [[1] * 50], max_new_tokens=20, temperature=0.0,
                          max_cache_len=64)
    with pytest.raises(ValueError, match="at least one token"):
        sampler.generate(model, [[]], max_new_tokens=2, temperature=0.0)
    with pytest.raises(ValueError, match="explicit PRNG key"):
        sampler.generate(model, [[1]], max_new_tokens=2, temperature=1.0)
    with pytest.raises(ValueError, match="need tokenizer="):
        sampler.generate(model, [[1]], max_new_tokens=2, temperature=0.0, stop=["x"])
    with pytest.raises(ValueError, match=r"lie in \[0, 256\)"):
        sampler.generate(model, [[256]], max_new_tokens=2, temperature=0.0)


def test_rows_sample_from_their_own_keys(qwen):
    """Row i's draws depend on (key, row_ids[i]) only: a shard of the prompts sampled with its
    global row ids equals those rows of the full batch, whatever the batch or padding."""
    model, _ = qwen
    rng = np.random.default_rng(1)
    lengths = [19, 3, 11, 7, 5, 1, 6, 2]  # the shard's longest prompt buckets to fewer slots
    prompts = [rng.integers(1, 256, n).tolist() for n in lengths]
    kw = dict(max_new_tokens=12, temperature=1.0, key=jax.random.key(11))
    full = sampler.generate(model, prompts, **kw)
    shard = sampler.generate(model, prompts[4:], row_ids=[4, 5, 6, 7], **kw)
    assert np.array_equal(shard.tokens, full.tokens[4:])
    assert np.array_equal(shard.lengths, full.lengths[4:])
    # different-shaped float32 programs: within the bound of a forward over the longer cache
    tol = logprob_tol(model, cache_len(full, shard),
                      [p + g for p, g in zip(prompts, full.sequences())], full.logprobs)
    np.testing.assert_allclose(shard.logprobs, full.logprobs[4:], rtol=0, atol=tol)
    assert np.abs(shard.logprobs - full.logprobs[[5, 6, 7, 4]]).max() > tol  # rows mixed up
    default_ids = sampler.generate(model, prompts[4:], **kw)  # ids 0..3: other draws
    assert not np.array_equal(default_ids.tokens, full.tokens[4:])
    greedy = dict(max_new_tokens=12, temperature=0.0)
    assert np.array_equal(sampler.generate(model, prompts[4:], row_ids=[4, 5, 6, 7],
                                            **greedy).tokens,
                          sampler.generate(model, prompts, **greedy).tokens[4:])
    with pytest.raises(ValueError, match="row_ids has 3 entries for 4 prompts"):
        sampler.generate(model, prompts[4:], row_ids=[1, 2, 3], **kw)


def test_equal_prompts_share_one_prefill_and_sample_as_before(qwen, monkeypatch):
    """A GRPO batch (each prompt repeated once per sample) is prefilled once per distinct
    prompt: the prefill's forward sees 4 rows (3 rounded up to a power of two), not 12, and every row still samples from its
    own key what it samples with a prefill per row."""
    from jaxtom.models.decoder import Decoder
    model, _ = qwen
    seen = []
    original = Decoder.forward_cached

    def spy(self, tokens, cache, starts, last=None):
        seen.append(tokens.shape)
        assert last is not None and last.shape == tokens.shape[:1]  # one entry per row
        return original(self, tokens, cache, starts, last=last)

    monkeypatch.setattr(Decoder, "forward_cached", spy)
    sampling_loop._COMPILED.clear()  # trace again, through the spy
    prompts = [p for p in PROMPTS for _ in range(4)]  # 3 prompts x a group of 4
    kw = dict(max_new_tokens=10, temperature=1.0, key=jax.random.key(5))
    shared = sampler.generate(model, prompts, **kw)
    assert seen == [(4, 8)]  # three distinct prompts (a power of two: 4), 8 tokens
    alone = sampler.generate(model, prompts, share_prefill=False, **kw)
    assert seen[-1] == (12, 8)
    sampling_loop._COMPILED.clear()
    assert np.array_equal(shared.tokens, alone.tokens)
    assert np.array_equal(shared.lengths, alone.lengths)
    assert len({tuple(r) for r in shared.tokens[:4].tolist()}) > 1  # a group's draws differ
    tol = logprob_tol(model, cache_len(shared, alone),
                      [p + g for p, g in zip(prompts, alone.sequences())], alone.logprobs)
    np.testing.assert_allclose(shared.logprobs, alone.logprobs, rtol=0, atol=tol)


def test_mostly_distinct_prompts_prefill_every_row(qwen, monkeypatch):
    """Sharing pays only when it halves the prefill: 5 distinct prompts padded to 8 rows with
    copies of the first (an evaluation's call) prefill all 8 rows, the program of their row
    count, and not a 5-row program of their own; 2 distinct prompts in 8 rows share."""
    from jaxtom.models.decoder import Decoder
    model, _ = qwen
    seen = []
    original = Decoder.forward_cached

    def spy(self, tokens, cache, starts, last=None):
        seen.append(tokens.shape[0])
        assert last is not None and last.shape == tokens.shape[:1]  # one entry per row
        return original(self, tokens, cache, starts, last=last)

    monkeypatch.setattr(Decoder, "forward_cached", spy)
    sampling_loop._COMPILED.clear()
    distinct = [[i + 1, i + 2, i + 3] for i in range(5)]
    kw = dict(max_new_tokens=4, temperature=0.0)
    sampler.generate(model, distinct + distinct[:1] * 3, **kw)
    sampler.generate(model, distinct[:2] * 4, **kw)
    sampling_loop._COMPILED.clear()
    assert seen == [8, 2]


def test_bucket_sizes():
    assert [sampler.bucket(n, 8) for n in (1, 8, 9, 11, 16, 17, 33, 100)] == [
        8, 8, 10, 12, 16, 20, 40, 112]
    assert sampler.bucket(3, 1, multiple=4) == 4 and sampler.bucket(9, 1) == 10
    sizes = {sampler.bucket(n, 8) for n in range(1, 4097)}
    assert len(sizes) == 4 * 9 + 1  # four per octave from 8 to 4096


def test_token_cap_is_a_run_time_value(qwen):
    model, _ = qwen
    kw = dict(temperature=1.0, key=jax.random.key(5))
    long = sampler.generate(model, PROMPTS, max_new_tokens=16, **kw)
    sequences = [p + g for p, g in zip(PROMPTS, long.sequences())]
    for cap, buffer_len in [(5, None), (5, 64), (16, 64)]:
        short = sampler.generate(model, PROMPTS, max_new_tokens=cap, buffer_len=buffer_len,
                                  **kw)
        assert short.tokens.shape == (3, cap) and list(short.lengths) == [cap] * 3
        assert np.array_equal(short.tokens, long.tokens[:, :cap])
        tol = logprob_tol(model, cache_len(short, long), sequences, long.logprobs)
        np.testing.assert_allclose(short.logprobs, long.logprobs[:, :cap], rtol=0, atol=tol)
        # one position off is caught
        assert np.abs(short.logprobs[:, 1:] - long.logprobs[:, :cap - 1]).max() > tol
    with pytest.raises(ValueError, match="buffer_len=4 is smaller than max_new_tokens=5"):
        sampler.generate(model, PROMPTS, max_new_tokens=5, buffer_len=4, **kw)


def test_loop_exits_when_every_row_has_stopped(qwen):
    model, _ = qwen
    greedy = sampler.generate(model, PROMPTS, max_new_tokens=20, temperature=0.0)
    assert greedy.steps == 20
    firsts = sorted({int(t) for t in greedy.tokens[:, 0]})
    out = sampler.generate(model, PROMPTS, max_new_tokens=20, temperature=0.0, stop=firsts)
    assert list(out.lengths) == [1, 1, 1] and out.finished.all() and out.steps == 1
    second = sorted({int(t) for t in greedy.tokens[:, 1]} | {int(greedy.tokens[0, 0])})
    out = sampler.generate(model, PROMPTS, max_new_tokens=20, temperature=0.0, stop=second)
    assert out.steps == int(out.lengths.max()) <= 2


def test_compilations_are_bounded_across_prompt_lengths_and_caps(qwen):
    """Varied prompt lengths and token caps compile one prefill per prompt-length bucket and
    one decode loop per (buffer, cache) bucket, not one program per call."""
    model, _ = qwen
    rng = np.random.default_rng(2)
    calls = [(1, 2), (3, 16), (8, 5), (9, 11), (10, 2), (17, 7), (20, 16), (19, 1), (5, 30),
             (18, 17)]
    sampling_loop._COMPILED.clear()  # fresh jit wrappers: earlier tests' programs do not count
    before = dict(sampling_loop.TRACE_COUNT)
    for length, cap in calls:
        prompts = [rng.integers(1, 256, length).tolist(), [7]]
        out = sampler.generate(model, prompts, max_new_tokens=cap, temperature=0.7,
                                key=jax.random.key(length), stop_at_eos=False)
        assert list(out.lengths) == [cap, cap]
    traced = {k: sampling_loop.TRACE_COUNT[k] - before[k] for k in before}
    # prompt buckets 8, 10, 20 with buffer 16, plus (8, 32) and (20, 20) for the caps above
    # 16; three buffers, and every cache fits the first 64-slot bucket
    prefill_shapes = {(sampler.bucket(n, 8), sampler.bucket(cap, 16)) for n, cap in calls}
    assert traced == {"prefill": len(prefill_shapes), "decode": 3}
    assert len(prefill_shapes) == 5


def test_a_prompt_floor_gives_every_call_one_prefill_and_the_same_tokens(qwen):
    """`min_prompt_len` (a run's prompt budget): calls whose prompts fall in different
    buckets share one prefill and one decode program, and sample what they sample without
    it; it pads fresh calls only."""
    model, _ = qwen
    rng = np.random.default_rng(3)
    kw = dict(max_new_tokens=6, temperature=1.0, stop_at_eos=False)
    sampling_loop._COMPILED.clear()
    before = dict(sampling_loop.TRACE_COUNT)
    for i, n in enumerate((3, 9, 17, 30)):  # prompt buckets 8, 10, 20, 32
        prompts = [rng.integers(1, 256, n).tolist(), [7]]
        floored = sampler.generate(model, prompts, key=jax.random.key(i), min_prompt_len=30,
                                    **kw)
        plain = sampler.generate(model, prompts, key=jax.random.key(i), **kw)
        np.testing.assert_array_equal(floored.tokens, plain.tokens)
        assert floored.state.cache.k.shape == plain.state.cache.k.shape or n < 30
    traced = {k: sampling_loop.TRACE_COUNT[k] - before[k] for k in before}
    sampling_loop._COMPILED.clear()
    # one prefill for the floored calls, one per bucket below 32 for the plain ones (the
    # plain call of 30 tokens shares the floored program), one decode per cache size met
    assert traced["prefill"] == 1 + 3, traced
    with pytest.raises(ValueError, match="min_prompt_len=8 pads a fresh call"):
        sampler.generate(model, [[1]], max_new_tokens=2, min_prompt_len=8, temperature=0.0,
                          resume=plain.state)


def test_explore_temperature_applies_only_after_marker_tokens(qwen):
    """A near-zero temperature reproduces greedy decoding; with the greedy first token as the
    marker, the token right after it is drawn at the explore temperature (rows disagree)
    while the first token, drawn with no marker before it, stays greedy. Log-probs stay the
    model's at temperature 1."""
    model, _ = qwen
    prompt, rows = PROMPTS[0], 24
    greedy = sampler.generate(model, [prompt], max_new_tokens=4, temperature=0.0).tokens[0]
    kw = dict(max_new_tokens=4, temperature=1e-4, key=jax.random.key(3))
    cold = sampler.generate(model, [prompt] * rows, **kw).tokens
    assert (cold == greedy).all()
    marker = int(greedy[0])
    hot = sampler.generate(model, [prompt] * rows, **kw, explore_after=[marker],
                            explore_temperature=50.0)
    assert (hot.tokens[:, 0] == marker).all()
    assert len(set(hot.tokens[:, 1].tolist())) >= 5
    # restricted to chosen ids, the explored token is one of them and the rest unchanged
    choices = [3, 30, 77]
    few = sampler.generate(model, [prompt] * rows, **kw, explore_after=[marker],
                            explore_temperature=50.0, explore_tokens=choices)
    assert set(few.tokens[:, 1].tolist()) <= set(choices) and len(set(few.tokens[:, 1])) >= 2
    assert (few.tokens[:, 0] == marker).all()
    # a marker nobody produces changes nothing
    unused = next(i for i in range(256) if i not in set(cold.ravel().tolist()))
    same = sampler.generate(model, [prompt] * rows, **kw, explore_after=[unused],
                             explore_temperature=50.0)
    assert np.array_equal(same.tokens, cold)
    seq = prompt + hot.sequences()[0]
    logp = jax.nn.log_softmax(model(np.asarray([seq])), -1)[0, len(prompt) - 1:-1]
    expected = np.take_along_axis(np.asarray(logp), np.asarray(hot.sequences()[0])[:, None],
                                  1)[:, 0]
    tol = logprob_tol(model, max(cache_len(hot), len(seq)), [seq], expected)
    np.testing.assert_allclose(hot.logprobs[0], expected, rtol=0, atol=tol)
    with pytest.raises(ValueError, match="explore_temperature must be > 0"):
        sampler.generate(model, [[1]], **kw, explore_after=[1], explore_temperature=0.0)
    with pytest.raises(ValueError, match="explore_after ids must lie"):
        sampler.generate(model, [[1]], **kw, explore_after=[256])
    with pytest.raises(ValueError, match="explore_tokens ids must lie"):
        sampler.generate(model, [[1]], **kw, explore_after=[1], explore_tokens=[-2])


def test_compacted_decoding_drops_finished_rows_and_keeps_every_token(qwen, monkeypatch):
    """`compact=True` on a ragged batch (rows stopping anywhere in 100 steps, a GRPO group's
    equal prompts among them, global row ids): the same tokens, lengths and stops as the
    single loop, log-probs equal to float32 rounding, and the loop really ran on fewer rows
    and on a cut cache."""
    from jaxtom.sampling import segments as sampling_segments
    model, _ = qwen
    prompts = [[5 + i, 6, 7 + 2 * i] for i in range(10)] + [[40, 41, 42]] * 6
    kw = dict(max_new_tokens=100, temperature=1.0, key=jax.random.key(5),
              row_ids=np.arange(100, 116))
    probe = sampler.generate(model, prompts, **kw)
    stop = int(np.bincount(probe.tokens[:, :40].ravel()).argmax())  # a token rows emit early
    seen = []  # (rows, slots) of every decode segment
    decode_segments = sampling_segments.decode_segments

    def spy(decode, params, cache, *args, **kwargs):
        def watched(params, cache, *rest):
            seen.append((cache.k.shape[1], cache.k.shape[CACHE_SEQ_AXIS]))
            return decode(params, cache, *rest)
        return decode_segments(watched, params, cache, *args, **kwargs)

    monkeypatch.setattr(sampling_segments, "decode_segments", spy)
    single = sampler.generate(model, prompts, stop=[stop], **kw)
    compact = sampler.generate(model, prompts, stop=[stop], compact=True, **kw)
    assert len(set(single.lengths.tolist())) > 4  # ragged
    np.testing.assert_array_equal(compact.tokens, single.tokens)
    np.testing.assert_array_equal(compact.lengths, single.lengths)
    np.testing.assert_array_equal(compact.finished, single.finished)
    assert compact.steps == single.steps and compact.state is None
    tol = logprob_tol(model, 128, [p + s for p, s in zip(prompts, single.sequences())],
                      single.logprobs)
    np.testing.assert_allclose(compact.logprobs, single.logprobs, atol=tol, rtol=0)
    full = single.state.cache.k.shape[CACHE_SEQ_AXIS]
    assert min(rows for rows, _ in seen) < len(prompts), seen  # finished rows were dropped
    assert min(slots for _, slots in seen) < full, (seen, full)  # attends over fewer slots
    # the two ladders: rows halve from the batch's 16 down to MIN_ROWS, slots are powers of 4
    assert {rows for rows, _ in seen} <= {16, 8, 4}, seen
    assert {slots for _, slots in seen} <= {64, 256, full}, (seen, full)
