import dataclasses

import jax
import numpy as np
import pytest

from jaxtom.mindzero import data as data_lib, parse_particles
from jaxtom.mindzero.observation import (
    HostEpisodes, approach_order, compact_observation, get_observation, partner_ranks, phase_start,
)
from jaxtom.mindzero.policy import Codec, train_bpe


@pytest.fixture(scope="module")
def view(episodes):
    return HostEpisodes.from_episodes(episodes)


def test_records_cover_every_step(view):
    records = data_lib.timestep_records(view)
    assert len(records) == int(sum(view.length - 1))
    assert all(1 <= t < view.length[e] for e, t in records)


def test_grain_pipeline_is_deterministic_and_label_free(view):
    ds = data_lib.timestep_dataset(view, batch_size=8, seed=3, epochs=1)
    first = [b for _, b in zip(range(3), ds)]
    again = [b for _, b in zip(range(3), data_lib.timestep_dataset(view, batch_size=8, seed=3,
                                                                   epochs=1))]
    assert all((a["t"] == b["t"]).all() and list(a["prompt"]) == list(b["prompt"])
               for a, b in zip(first, again))
    assert set(first[0]) == {"episode", "t", "prompt"}  # nothing about goals
    other = next(iter(data_lib.timestep_dataset(view, batch_size=8, seed=4, epochs=1)))
    assert not (other["episode"] == first[0]["episode"]).all() or not (
        other["t"] == first[0]["t"]).all()


def test_compact_observation(view):
    text = compact_observation(view, 0, 3, 2)
    assert text.startswith("n=2 | ")
    assert text.count("|") == 8  # one slot per object, held or not
    for e, t in data_lib.timestep_records(view, 5):
        slots = compact_observation(view, e, t, 2).split(" | ")[1:]
        order = approach_order(view, e, t)
        assert [s.split(" ", 3)[3] for s in slots] == [view.labels[e][k] for k in order]
        held = int(view.holding[e, t])
        assert ("held" in slots[0]) == (held >= 0) and sum("held" in s for s in slots) <= 1
        now = view.distances(e, t)
        d = np.stack([view.distances(e, s) for s in range(phase_start(view, e, t), t + 1)])
        closing = np.sign(d[:-1] - d[1:]).sum(0) if len(d) > 1 else np.zeros(len(now))
        lead = order[0]
        if held < 0:  # the most consistently approached object leads
            assert closing[lead] == closing.max()
        start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
        partner = [(start[k], k) > (start[lead], lead) for k in order[1:]]
        assert partner == sorted(partner, reverse=True)  # the rule's partners come first
        for group in (True, False):  # each group: label order, after closing while carrying
            members = [k for k, p in zip(order[1:], partner) if p == group]
            key = [(-int(closing[k]) if held >= 0 else 0, view.labels[e][k]) for k in members]
            assert key == sorted(key)
        assert all(int(s.split()[2]) == now[k] for s, k in zip(slots, order) if "held" not in s)
    with pytest.raises(ValueError, match="timestep"):
        compact_observation(view, 0, 0, 2)
    with pytest.raises(ValueError, match="unknown observation"):
        get_observation("video")


def test_partners_keep_their_places_until_the_path_ranks_them(view):
    """Before the pick the listed partners do not move while the lead stays (the path says
    nothing about the partner), so a model answering in listed order keeps its most likely
    goal and the helper's teleport rule can commit at the pick."""
    steady = 0
    for e in range(len(view)):
        previous = None
        for t in range(1, int(view.length[e])):
            order = approach_order(view, e, t)
            if int(view.holding[e, t]) >= 0:
                break
            if previous is not None and previous[0] == order[0]:
                assert order == previous
                steady += 1
            previous = order
    assert steady > 20


def test_compact_closing_adds_each_slots_closing_count_and_keeps_the_rest(view):
    render = get_observation("compact_closing")
    for e, t in data_lib.timestep_records(view, 5):
        plain = compact_observation(view, e, t, 2).split(" | ")
        slots = render(view, e, t, 2).split(" | ")
        assert slots[0] == plain[0]
        d = np.stack([view.distances(e, s) for s in range(phase_start(view, e, t), t + 1)])
        closing = np.sign(d[:-1] - d[1:]).sum(0) if len(d) > 1 else np.zeros(d.shape[1])
        for with_count, without, k in zip(slots[1:], plain[1:], approach_order(view, e, t)):
            words = with_count.split(" ")
            assert " ".join(words[:3] + words[4:]) == without
            assert int(words[3]) == max(-9, min(9, int(closing[k])))
            assert words[3][0] in "+-"


def test_compact_ranked_marks_partners_ranked_ahead_on_evidence_while_carrying(view):
    """`compact_closing` with `>` between partner slots ranked strictly apart (allowed by the
    nearest-first rule first, then closing count), only while the lead is carried."""
    render = get_observation("compact_ranked")
    seen = set()
    for e, t in data_lib.timestep_records(view, 2):
        plain = get_observation("compact_closing")(view, e, t, 4)
        text = render(view, e, t, 4)
        assert text.replace(" > ", " | ") == plain
        seps = text.split(" ")[1:]
        seps = [w for w in seps if w in ("|", ">")][1:]  # between the 8 slots
        assert len(seps) == 7 and seps[0] == "|"
        order = approach_order(view, e, t)
        d = np.stack([view.distances(e, s) for s in range(phase_start(view, e, t), t + 1)])
        closing = np.sign(d[:-1] - d[1:]).sum(0) if len(d) > 1 else np.zeros(d.shape[1])
        start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
        key = [((start[k], k) > (start[order[0]], order[0]), closing[k]) for k in order[1:]]
        carried = int(view.holding[e, t]) >= 0
        want = [">" if carried and a > b else "|" for a, b in zip(key, key[1:])]
        assert seps[1:] == want
        seen.update(seps[1:])
    assert seen == {"|", ">"}



def test_figure_observation_is_the_paper_prompt(view):
    text = get_observation("figure")(view, 1, 4, 2)
    assert "Please output the minified JSON." in text and "t=4:" in text


def test_random_warmup_targets_are_valid_and_never_the_true_goal(view):
    rng = np.random.default_rng(0)
    for e in range(len(view)):
        true = tuple(view.goal[e])
        for _ in range(20):
            parsed = parse_particles(data_lib.warmup_target(view, e, 2, rng), view.labels[e],
                                     num_particles=2)
            assert parsed.ok
            assert true not in parsed.pairs and true[::-1] not in parsed.pairs


def test_approached_teacher_is_label_free_and_reads_the_observation(view):
    """Same targets whatever the goal; object1 is the first listed (carried) object, object2
    one of the next three listed."""
    blind = dataclasses.replace(view, goal=np.zeros_like(view.goal))
    for e in range(len(view)):
        for t in range(1, int(view.length[e]), 2):
            seed = 1000 * e + t
            target = data_lib.warmup_target(view, e, 2, np.random.default_rng(seed), t,
                                            "approached")
            assert target == data_lib.warmup_target(blind, e, 2, np.random.default_rng(seed),
                                                    t, "approached")
            parsed = parse_particles(target, view.labels[e], num_particles=2)
            assert parsed.ok
            order = approach_order(view, e, t)
            if int(view.holding[e, t]) >= 0:
                assert order[0] == int(view.holding[e, t])
                assert all(a == order[0] and b in order[1:4] for a, b in parsed.pairs)
    with pytest.raises(ValueError, match="teacher"):
        data_lib.warmup_pairs(view, 0, 2, np.random.default_rng(0), 1, "oracle")


def test_bpe_codec_round_trip(view):
    rng = np.random.default_rng(0)
    texts = [compact_observation(view, e, t, 2) for e, t in data_lib.timestep_records(view, 4)]
    texts += [data_lib.warmup_target(view, e, 2, rng) for e in range(len(view))]
    codec = Codec(train_bpe(texts, 420))
    target = data_lib.warmup_target(view, 0, 2, rng)
    ids = codec.completion_ids(target)
    assert ids[-1] in codec.eos_ids and codec.decode(ids) == target
    assert len(ids) < 50  # JSON boilerplate collapses
    brown = codec.tokenizer.token_to_id("brown")
    assert brown is not None and brown in codec.tokenizer.encode('{"color":"brown"')


def test_listed_teacher_pairs_the_lead_with_the_next_listed_objects_in_order(view):
    """`listed` copies the observation's order; `pictured` names the ranked-ahead partner
    first where there is one, then the others in label order (blind to the goal too)."""
    blind = dataclasses.replace(view, goal=np.zeros_like(view.goal))
    ranked_seen = 0
    for e in range(len(view)):
        labels = view.labels[e]
        for t in range(1, int(view.length[e]), 3):
            order = approach_order(view, e, t)
            for teacher in ("listed", "pictured"):
                pairs = data_lib.warmup_pairs(view, e, 3, np.random.default_rng(t), t, teacher)
                assert pairs == data_lib.warmup_pairs(blind, e, 3, np.random.default_rng(t), t,
                                                      teacher)
                assert [a for a, _ in pairs] == [order[0]] * 3
                if teacher == "listed":
                    assert pairs == [(order[0], order[1]), (order[0], order[2]),
                                     (order[0], order[3])]
                    continue
                partners = [b for _, b in pairs]
                ranked = partner_ranks(view, e, t, order)[1:2] == [">"]
                ranked_seen += ranked
                rest = sorted((k for k in order[1:] if not (ranked and k == order[1])),
                              key=lambda k: labels[k])
                assert partners == ([order[1]] if ranked else []) + rest[:3 - ranked]
    assert ranked_seen > 0  # the ranked-ahead branch ran


def test_lead_teacher_pairs_the_lead_with_any_allowed_partner_blind_to_the_goal(view):
    """object1 is the lead, object2 any object the nearest-first rule allows after it (not
    only the first three listed), the same whatever the goal; over many draws it reaches
    partners beyond the third listed slot."""
    blind = dataclasses.replace(view, goal=np.zeros_like(view.goal))
    beyond_three = 0
    for e in range(len(view)):
        start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
        for t in range(1, int(view.length[e]), 3):
            seed = 1000 * e + t
            pairs = data_lib.warmup_pairs(view, e, 2, np.random.default_rng(seed), t, "lead")
            assert pairs == data_lib.warmup_pairs(blind, e, 2, np.random.default_rng(seed), t,
                                                  "lead")
            order = approach_order(view, e, t)
            allowed = [b for b in order[1:] if data_lib._ordered(order[0], b, start)]
            if len(allowed) >= 2:
                assert all(a == order[0] and b in allowed for a, b in pairs)
                beyond_three += any(b not in order[1:4] for _, b in pairs)
            assert len({frozenset(p) for p in pairs}) == 2
    assert beyond_three > 0


def test_teacher_orders_only_rearrange_its_random_probabilities(view):
    """`order` only rearranges the random probabilities: the same pairs in the same order (so
    no goal information enters); "descending" never puts the first below the second,
    "either" does so in some answers and not in others; the split itself stays random; an
    unknown order is refused by name."""
    firsts, directions = [], set()
    for e in range(min(len(view), 6)):
        for seed in range(8):
            t = int(view.length[e]) // 2
            target = lambda order: parse_particles(data_lib.warmup_target(  # noqa: E731
                view, e, 2, np.random.default_rng(seed), t, "approached", order=order),
                view.labels[e])
            plain, ordered, either = target("drawn"), target("descending"), target("either")
            assert ordered.pairs == plain.pairs == either.pairs
            assert ordered.q[0] >= ordered.q[1]
            assert sorted(ordered.q) == pytest.approx(sorted(plain.q))
            assert sorted(either.q) == pytest.approx(sorted(plain.q))
            if abs(either.q[0] - either.q[1]) > 1e-9:
                directions.add(either.q[0] > either.q[1])
            firsts.append(ordered.q[0])
    assert len(set(np.round(firsts, 1))) >= 3 and directions == {True, False}
    with pytest.raises(ValueError, match="order"):
        data_lib.warmup_target(view, 0, 2, np.random.default_rng(0), 5, "listed", order="up")


def test_evidence_order_sorts_only_where_the_first_partner_is_ranked_ahead(view):
    """`evidence_order`: the `listed` teacher's probabilities are sorted exactly where
    `partner_ranks` writes `>` after the first listed partner ("descending": largest first;
    "either": largest or smallest first, both seen) and left as drawn elsewhere (same pairs
    in every mode); an unknown mode is refused by name."""
    from jaxtom.mindzero.observation import partner_ranks
    seen, directions = set(), set()
    for e, t in data_lib.timestep_records(view, 3):
        target = lambda **kw: parse_particles(data_lib.warmup_target(  # noqa: E731
            view, e, 4, np.random.default_rng(t), t, "listed", **kw), view.labels[e],
            num_particles=4)
        plain, sorted_ = target(), target(order="descending")
        got, either = target(evidence_order="descending"), target(evidence_order="either")
        ahead = partner_ranks(view, e, t, approach_order(view, e, t))[1] == ">"
        assert got.pairs == either.pairs == plain.pairs
        assert got.q == (sorted_.q if ahead else plain.q)
        if ahead:
            up = bool(np.all(np.diff(either.q[:3]) > -1e-9))  # parsed q carry float noise
            assert up or either.q == sorted_.q
            if abs(either.q[0] - either.q[2]) > 1e-9:
                directions.add(up)
        else:
            assert either.q == plain.q
        seen.add(ahead)
    assert seen == {True, False} and directions == {True, False}
    with pytest.raises(ValueError, match="evidence_order"):
        data_lib.warmup_target(view, 0, 4, np.random.default_rng(0), 5, "listed",
                               evidence_order="ascending")


def test_probability_markers_precede_each_probability_digit_and_reach_the_sampler(
        view, monkeypatch):
    """`Codec.probability_markers` are the tokens right before a p's first decimal and the
    digits, and the SSRL rollout hands them to the sampler with
    `trainer.explore_temperature` (recorded, not assumed); with exploration off or a single
    hypothesis, nothing."""
    from jaxtom.mindzero import goals_text as mz_trainer
    from jaxtom.mindzero.experiments import tiny_config
    rng = np.random.default_rng(0)
    texts = [compact_observation(view, e, t, 2) for e, t in data_lib.timestep_records(view, 4)]
    texts += [data_lib.warmup_target(view, e, 2, rng) for e in range(len(view))]
    codec = Codec(train_bpe(texts, 420))
    markers, digits = codec.probability_markers
    assert markers and all(codec.decode([i]).endswith("0.") for i in markers)
    assert sorted(codec.decode([i]) for i in digits) == list("0123456789")
    target = data_lib.warmup_target(view, 0, 2, rng)
    ids = codec.completion_ids(target)
    after = [codec.decode([ids[j + 1]]) for j in range(len(ids) - 1) if ids[j] in markers]
    assert len(after) == 2 and all(text in "0123456789" for text in after)

    seen = []
    monkeypatch.setattr(mz_trainer, "generate_rows",
                        lambda model, prompts, rows, **kw: seen.append(kw) or [[1]] * len(rows))
    base = tiny_config()
    for temp, expected in ((0.0, None), (2.5, (markers, 2.5, digits))):
        config = dataclasses.replace(
            base, trainer=dataclasses.replace(base.trainer, explore_temperature=temp))
        rollout = mz_trainer.ParticleRollout(config, codec, view, table=None)
        rollout.generate(None, [[1]] * 8, [{"row": 0}], jax.random.key(0))
        got = seen[-1]
        if expected is None:
            assert "explore_after" not in got
        else:
            assert (tuple(got["explore_after"]), got["explore_temperature"],
                    tuple(got["explore_tokens"])) == expected
    # a single hypothesis is written at p 1.0: nothing to explore, so nothing is sent
    single = dataclasses.replace(base, trainer=dataclasses.replace(
        base.trainer, explore_temperature=2.5), mindzero=dataclasses.replace(
        base.mindzero, data=dataclasses.replace(base.mindzero.data, num_particles=1)))
    mz_trainer.ParticleRollout(single, codec, view, table=None).generate(
        None, [[1]] * 8, [{"row": 0}], jax.random.key(0))
    assert "explore_after" not in seen[-1]


def test_read_steps_teach_the_lead_name_then_the_teacher(view):
    """`warmup.read_steps`: the first steps' targets are an answer's opening naming the lead
    (the teachers' object1, label-free), later ones the teacher's answers; the field is
    checked."""
    from jaxtom.config import ConfigError
    from jaxtom.mindzero.experiments import tiny_config
    from jaxtom.mindzero.warmup import WarmupRollout, lead_name, lead_opening

    cfg = tiny_config()
    mz = cfg.mindzero
    cfg = dataclasses.replace(cfg, mindzero=dataclasses.replace(mz, warmup=dataclasses.replace(
        mz.warmup, steps=4, read_steps=2, check_at=0)))
    rng = np.random.default_rng(0)
    texts = [compact_observation(view, e, t, 4) for e, t in data_lib.timestep_records(view, 4)]
    texts += [data_lib.warmup_target(view, e, 4, rng) for e in range(len(view))]
    codec = Codec(train_bpe(texts, 420))
    rollout = WarmupRollout(cfg, codec, view)
    records = data_lib.timestep_records(view, 3)[:6]
    tasks = [{"episode": e, "t": t, "row": i} for i, (e, t) in enumerate(records)]

    def targets(step):
        r = rollout(None, tasks, None, step)
        return [codec.decode([s for s, m in zip(seq, mask) if m]) for seq, mask in
                zip(r.sequences, r.policy_masks)]

    openings = targets(1)
    assert openings == [lead_opening(view, e, t) for e, t in records]
    for (e, t), text in zip(records, targets(2)):
        assert text.startswith(lead_opening(view, e, t))  # the same words, then the rest
        pairs = parse_particles(text, view.labels[e], num_particles=4).pairs
        assert pairs and view.labels[e][pairs[0][0]] == lead_name(view, e, t)
    # read_share: after the reading phase some rows keep the opening, with no end token
    shared = dataclasses.replace(cfg, mindzero=dataclasses.replace(
        cfg.mindzero, warmup=dataclasses.replace(cfg.mindzero.warmup, read_share=0.5)))
    many = [{"episode": e, "t": t, "row": i} for i, (e, t) in enumerate(records * 4)]
    r = WarmupRollout(shared, codec, view)(None, many, None, 3)
    kept = [[s for s, m in zip(seq, mask) if m] for seq, mask in zip(r.sequences,
                                                                      r.policy_masks)]
    reading = [ids for ids in kept if ids[-1] not in codec.eos_ids]
    assert 0 < len(reading) < len(kept)  # both kinds of row, about half each
    for ids, (e, t) in zip(kept, records * 4):  # a reading row: an answer's first tokens
        if ids in reading:
            assert codec.decode(ids).startswith(lead_opening(view, e, t))
            assert not codec.decode(ids[:-1]).startswith(lead_opening(view, e, t))
            answer = codec.completion_ids(data_lib.warmup_target(
                view, e, 4, np.random.default_rng(1), t, "listed"))
            assert ids == answer[:len(ids)]  # the answers' own tokens
    # where the picture outlines the ranked partner (cells_ranked), reading rows name it too
    from jaxtom.mindzero.observation import ranked_partner
    marked = dataclasses.replace(shared, mindzero=dataclasses.replace(
        shared.mindzero, data=dataclasses.replace(shared.mindzero.data,
                                                  image_style="cells_ranked")))
    every = data_lib.timestep_records(view, 1)
    ranked = [(e, t) for e, t in every if ranked_partner(view, e, t) >= 0][:8]
    assert ranked
    rows = [{"episode": e, "t": t, "row": i} for i, (e, t) in enumerate(ranked * 4)]
    r = WarmupRollout(marked, codec, view)(None, rows, None, 3)
    texts = [codec.decode([s for s, m in zip(seq, mask) if m]) for seq, mask in
             zip(r.sequences, r.policy_masks)]
    read = [(text, e, t) for text, (e, t) in zip(texts, ranked * 4)
            if not text.endswith("}]}")]
    assert read and all(text.startswith(lead_opening(view, e, t, with_partner=True))
                        and view.labels[e][ranked_partner(view, e, t)].split()[0] in
                        text[len(lead_opening(view, e, t)):] for text, e, t in read)
    for field, value in (("read_steps", 4), ("check_at", 2), ("read_share", 1.0)):
        bad = dataclasses.replace(cfg, mindzero=dataclasses.replace(
            cfg.mindzero, warmup=dataclasses.replace(cfg.mindzero.warmup, **{field: value})))
        with pytest.raises(ConfigError, match=f"warmup.{field}"):
            bad.mindzero.validate(bad)
