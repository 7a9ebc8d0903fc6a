"""The paper-agnostic training batch and the packer that builds it.

`rl` knows tokens, masks and advantages, not which paper produced them: MindZero's ELBO and
CToM's task reward both arrive as per-sequence advantages; CToM's predicted-reply targets
travel in the optional `PredictionBatch`. Several sequences may share a row (packing): the
`segment_ids` keep them from attending to each other and `positions` restart per sequence.
Per-token arrays are aligned with `tokens` (entry t belongs to token t).
"""

from __future__ import annotations

import dataclasses

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtom.buckets import bucket


@struct.dataclass
class PredictionBatch:
    """Context + one target reply per row; `target_mask` marks the reply tokens."""
    tokens: jax.Array  # [P, Tp] int32
    positions: jax.Array  # [P, Tp] int32
    segment_ids: jax.Array  # [P, Tp] int32, 0 = padding
    target_mask: jax.Array  # [P, Tp] float32


@struct.dataclass
class Batch:
    """One GRPO update's worth of rollouts (rows may hold several packed sequences)."""
    tokens: jax.Array  # [B, T] int32
    positions: jax.Array  # [B, T] int32, restart at 0 for every packed sequence
    segment_ids: jax.Array  # [B, T] int32, 1.. per sequence in the row, 0 = padding
    policy_mask: jax.Array  # [B, T] float32: tokens the policy sampled
    advantages: jax.Array  # [B, T] float32: the sequence's advantage on each of its tokens
    group_ids: jax.Array  # [B, T] int32: the GRPO group of each token's sequence (-1 padding)
    old_logp: jax.Array | None = None  # [B, T] rollout-policy log-probs; None: on-policy
    ref_logp: jax.Array | None = None  # [B, T] reference log-probs; None: computed in the step
    decision_mask: jax.Array | None = None  # [B, T] float32: action-decision tokens
    prediction: PredictionBatch | None = None
    # image+text rows (Qwen3-VL): `positions` are then [B, 3, T] M-RoPE positions, and each
    # row carries its own images, so every field splits, pads and shards by rows alike
    image_index: jax.Array | None = None  # [B, T] int32: the row's vision token, -1 for text
    vision: Any = None  # VisionInputs, leaves [B, I, P, ...]: row b's I images (padded)
    # shared prompts (`pack_shared_prompts`): the segment each token may read besides its own
    parent_ids: jax.Array | None = None  # [B, T] int32

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)


def _check_counts(n: int, **per_sequence) -> None:
    for name, seq in per_sequence.items():
        if len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries, expected one per sequence ({n})")


def _empty(num_rows: int, row_len: int, pad_id: int) -> dict[str, np.ndarray]:
    """The packed arrays before any sequence is placed (pad tokens, no segment, group -1)."""
    shape = (num_rows, row_len)
    return dict(tokens=np.full(shape, pad_id, np.int32), positions=np.zeros(shape, np.int32),
                segments=np.zeros(shape, np.int32), mask=np.zeros(shape, np.float32),
                adv=np.zeros(shape, np.float32), groups=np.full(shape, -1, np.int32),
                old=np.zeros(shape, np.float32), decision=np.zeros(shape, np.float32))


def pack_sequences(sequences: Sequence[Sequence[int]], policy_masks: Sequence[Sequence[float]],
                   advantages: Sequence[float], group_ids: Sequence[int], *, num_rows: int,
                   row_len: int, pad_id: int = 0,
                   old_logps: Sequence[Sequence[float]] | None = None,
                   decision_masks: Sequence[Sequence[float]] | None = None) -> Batch:
    """First-fit packs sequences into a fixed [num_rows, row_len] NumPy batch.

    Fixed shapes keep the jitted step compiled once; a sequence longer than `row_len` or a set
    that does not fit is an error naming the sizes, never a silent truncation.
    """
    n = len(sequences)
    _check_counts(n, policy_masks=policy_masks, advantages=advantages, group_ids=group_ids)
    a = _empty(num_rows, row_len, pad_id)
    tokens, positions, segments, mask = a["tokens"], a["positions"], a["segments"], a["mask"]
    adv, groups, old, decision = a["adv"], a["groups"], a["old"], a["decision"]
    fill = np.zeros(num_rows, np.int64)
    used_segments = np.zeros(num_rows, np.int32)
    for i, seq in enumerate(sequences):
        L = len(seq)
        if len(policy_masks[i]) != L:
            raise ValueError(f"policy mask {i} has length {len(policy_masks[i])}, expected {L}")
        if L > row_len:
            raise ValueError(f"sequence {i} has {L} tokens, longer than row_len={row_len}")
        fits = np.nonzero(fill + L <= row_len)[0]
        if not len(fits):
            raise ValueError(f"{n} sequences ({sum(map(len, sequences))} tokens) do not fit in "
                             f"{num_rows} rows of {row_len} tokens; raise num_rows or row_len")
        r = fits[0]
        s = slice(fill[r], fill[r] + L)
        used_segments[r] += 1
        tokens[r, s] = seq
        positions[r, s] = np.arange(L)
        segments[r, s] = used_segments[r]
        mask[r, s] = policy_masks[i]
        mask[r, fill[r]] = 0.0  # a sequence's first token has no prediction in this row
        adv[r, s] = advantages[i]
        groups[r, s] = group_ids[i]
        if old_logps is not None:
            old[r, s] = old_logps[i]
        if decision_masks is not None:
            decision[r, s] = decision_masks[i]
        fill[r] += L
    return Batch(tokens=tokens, positions=positions, segment_ids=segments, policy_mask=mask,
                 advantages=adv, group_ids=groups,
                 old_logp=old if old_logps is not None else None,
                 decision_mask=decision if decision_masks is not None else None)


def first_fit_rows(lengths: Sequence[int], row_len: int, multiple: int = 1) -> int:
    """Rows `pack_sequences` fills with sequences of `lengths` (in that order), rounded up
    to `multiple`.

    First-fit opens a row only when no earlier row has room, so the filled rows are the
    leading ones: a batch of this many rows holds every sequence, with no trailing rows of
    padding that the update would compute for nothing (one row per sequence of a multi-round
    conversation is mostly empty). The rounding bounds how many shapes the step compiles."""
    if row_len < 1 or multiple < 1:
        raise ValueError(f"row_len and multiple must be positive, got {row_len}, {multiple}")
    fill: list[int] = []
    for L in lengths:
        if L > row_len:
            raise ValueError(f"a sequence of {L} tokens is longer than row_len={row_len}")
        r = next((i for i, f in enumerate(fill) if f + L <= row_len), None)
        if r is None:
            fill.append(L)
        else:
            fill[r] += L
    return -(-max(1, len(fill)) // multiple) * multiple


def bucketed_rows(rows: int, multiple: int = 8) -> int:
    """An update's row count for `rows` filled rows: every multiple of `multiple` up to 8 of
    them (64 for 8), then the `buckets.bucket` ladder (80, 96, 112, 128, 160, ...), so a
    run whose row count varies from step to step compiles a few update programs per octave
    of counts, at <= 25% padding rows (empty: fully masked)."""
    return bucket(max(1, rows), multiple, multiple)


def pack_shared_prompts(sequences: Sequence[Sequence[int]],
                        policy_masks: Sequence[Sequence[float]], advantages: Sequence[float],
                        group_ids: Sequence[int], prompt_lens: Sequence[int], *, num_rows: int,
                        row_len: int, pad_id: int = 0,
                        old_logps: Sequence[Sequence[float]] | None = None,
                        decision_masks: Sequence[Sequence[float]] | None = None,
                        split: bool = False) -> Batch:
    """Packs each GRPO group's prompt once, followed by its completions (`parent_ids`).

    Consecutive sequences with the same group id and the same prompt (their first
    `prompt_lens` tokens) form a family, laid out as the prompt without its last token
    (segment s), then per member that last token again and the member's completion
    (segment s + k, parent s, positions continuing the prompt's). Every token then sees
    exactly the context it has in `pack_sequences` (its prompt and its own completion), and
    each completion's first token is still predicted from the entry before it, so log-probs
    and their gradients match the unshared layout while the prompt's tokens are computed
    once per family instead of once per sample (a group of G samples: G - 1 prompts fewer).
    Families are first-fit into the rows whole; a family longer than `row_len` is an error.
    With `split`, a family that does not fit where first-fit puts its next member goes on in
    another row, its prompt packed again there (`shared_pieces`): rows of any fixed length
    that holds one sequence then take any families.
    """
    n = len(sequences)
    _check_counts(n, policy_masks=policy_masks, advantages=advantages, group_ids=group_ids,
                  prompt_lens=prompt_lens)
    for i, seq in enumerate(sequences):
        if len(policy_masks[i]) != len(seq):
            raise ValueError(f"policy mask {i} has length {len(policy_masks[i])}, "
                             f"expected {len(seq)}")
    a = _empty(num_rows, row_len, pad_id)
    tokens, positions, segments, mask = a["tokens"], a["positions"], a["segments"], a["mask"]
    adv, groups, old, decision = a["adv"], a["groups"], a["old"], a["decision"]
    parents = np.zeros((num_rows, row_len), np.int32)
    used = np.zeros(num_rows, np.int32)
    for r, lo, members in shared_pieces(sequences, group_ids, prompt_lens, row_len, split,
                                        num_rows):
        P = int(prompt_lens[members[0]])
        used[r] += 1
        parent = used[r]
        head = slice(lo, lo + P - 1)  # the shared prompt, without its last token
        first = sequences[members[0]]
        tokens[r, head] = first[:P - 1]
        positions[r, head] = np.arange(P - 1)
        segments[r, head] = parents[r, head] = parent
        groups[r, head] = group_ids[members[0]]
        at = lo + P - 1
        for i in members:
            seq, L = sequences[i], len(sequences[i])
            used[r] += 1
            s = slice(at, at + L - P + 1)
            tokens[r, s] = seq[P - 1:]
            positions[r, s] = np.arange(P - 1, L)
            segments[r, s] = used[r]
            parents[r, s] = parent
            mask[r, s] = policy_masks[i][P - 1:]
            adv[r, s] = advantages[i]
            groups[r, s] = group_ids[i]
            if old_logps is not None:
                old[r, s] = old_logps[i][P - 1:]
            if decision_masks is not None:
                decision[r, s] = decision_masks[i][P - 1:]
            at += L - P + 1
        mask[r, lo] = 0.0  # a row's first entry has no prediction
    return Batch(tokens=tokens, positions=positions, segment_ids=segments, policy_mask=mask,
                 advantages=adv, group_ids=groups,
                 old_logp=old if old_logps is not None else None,
                 decision_mask=decision if decision_masks is not None else None,
                 parent_ids=parents)


def shared_pieces(sequences, group_ids, prompt_lens, row_len: int, split: bool = False,
                  num_rows: int | None = None) -> list[tuple[int, int, list[int]]]:
    """Where `pack_shared_prompts` puts each family: (row, first entry, members) per piece,
    rows first-fit (`num_rows` of them; None: as many as it takes, so the last piece's row
    + 1 is the rows needed).

    Without `split` a family is one piece. With it, a family's members go one at a time
    into its open piece while that piece's row has room, else into a new piece (the prompt
    again, then the member) in the first row with room, so the rows fill up whatever the
    families' lengths; a member longer than `row_len` (with its prompt) is an error."""
    fill: list[int] = [0] * (num_rows or 0)

    def place(need: int, what: str) -> int:
        fits = [r for r, f in enumerate(fill) if f + need <= row_len]
        if fits:
            return fits[0]
        if num_rows is None and need <= row_len:
            fill.append(0)
            return len(fill) - 1
        rows = len(fill) if num_rows is None else num_rows
        raise ValueError(f"{what} of {need} tokens does not fit in {rows} rows of {row_len} "
                         f"tokens; raise num_rows or row_len")

    pieces: list[tuple[int, int, list[int]]] = []
    for members in shared_prompt_families(sequences, group_ids, prompt_lens):
        P = int(prompt_lens[members[0]])
        if not split:
            need = family_length(sequences, prompt_lens, members)
            r = place(need, "a prompt family")
            pieces.append((r, fill[r], list(members)))
            fill[r] += need
            continue
        open_row = None
        for i in members:
            grow = len(sequences[i]) - P + 1
            if open_row is not None and fill[open_row] + grow <= row_len:
                pieces[-1][2].append(i)
                fill[open_row] += grow
                continue
            r = place(P - 1 + grow, "a sequence")
            pieces.append((r, fill[r], [i]))
            fill[r] += P - 1 + grow
            open_row = r
    return pieces


def shared_prompt_families(sequences, group_ids, prompt_lens) -> list[list[int]]:
    """Runs of consecutive sequences that share a group id and a (non-empty) prompt."""
    families: list[list[int]] = []
    for i, seq in enumerate(sequences):
        P = int(prompt_lens[i])
        if not 1 <= P <= len(seq):
            raise ValueError(f"sequence {i}: prompt length {P} must be in 1..{len(seq)} (its "
                             f"length)")
        if families:
            j = families[-1][0]
            if (group_ids[j] == group_ids[i] and int(prompt_lens[j]) == P
                    and list(sequences[j][:P]) == list(seq[:P])):
                families[-1].append(i)
                continue
        families.append([i])
    return families


def family_length(sequences, prompt_lens, members: Sequence[int]) -> int:
    """Entries a family takes in a shared-prompt row (`pack_shared_prompts`)."""
    P = int(prompt_lens[members[0]])
    return P - 1 + sum(len(sequences[i]) - P + 1 for i in members)


def prediction_batch(contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], *,
                     num_rows: int, row_len: int, pad_id: int = 0) -> PredictionBatch:
    """One (context + target reply) per row; rows past len(targets) are empty padding."""
    if len(contexts) != len(targets) or len(targets) > num_rows:
        raise ValueError(f"need equal numbers of contexts and targets, at most num_rows="
                         f"{num_rows}; got {len(contexts)} and {len(targets)}")
    shape = (num_rows, row_len)
    tokens = np.full(shape, pad_id, np.int32)
    positions = np.zeros(shape, np.int32)
    segments = np.zeros(shape, np.int32)
    target = np.zeros(shape, np.float32)
    for i, (ctx, tgt) in enumerate(zip(contexts, targets)):
        L = len(ctx) + len(tgt)
        if not len(ctx) or L > row_len:
            raise ValueError(f"prediction row {i}: context must be non-empty and context + "
                             f"target ({L} tokens) at most row_len={row_len}")
        tokens[i, :L] = list(ctx) + list(tgt)
        positions[i, :L] = np.arange(L)
        segments[i, :L] = 1
        target[i, len(ctx):L] = 1.0
    return PredictionBatch(tokens, positions, segments, target)


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _pad_leading(x, rows: int, fill):
    """Appends rows of `fill` to axis 0 (NumPy in, NumPy out; traced in, traced out)."""
    extra = rows - x.shape[0]
    if extra == 0:
        return x
    xp = np if isinstance(x, np.ndarray) else jnp
    pad = xp.full((extra, *x.shape[1:]), fill, dtype=x.dtype)
    return xp.concatenate([x, pad], axis=0)


def update_rows(rows: int, devices: int, mini_batches: int = 1, micro_cap: int = 1, *,
                multiple_of: int = 1) -> tuple[int, int]:
    """(padded rows, micro-batches) for an update of `rows` rows on `devices` data-parallel
    devices with `mini_batches` optimiser updates and at most `micro_cap` micro-batches.

    Each mini-batch must split evenly over the devices, and each device's share of it into
    the micro-batches: with p = ceil(rows / (devices * mini_batches)) rows per device per
    mini-batch, a micro-batch holds s = ceil(p / micro_cap) rows per device (what the cap
    asks for) and there are m = ceil(p / s) <= min(micro_cap, p) of them. Padding is then
    under one row per device per mini-batch plus under s per device per mini-batch, not a
    multiple of the cap: 1024 rows on 256 devices with 4 mini-batches stay 1024 (m = 1).
    The update is the same for any m (the module docstring of `jaxtom.rl.step`), so m is
    only the memory knob, chosen statically from shapes. The padded count is a fixed point
    (`update_rows(padded, ...)[0] == padded`), and a multiple of `multiple_of` (processes
    each taking an equal block of rows). `rows == 0` stays 0 (one micro-batch).
    """
    for name, value in (("rows", rows), ("devices", devices), ("mini_batches", mini_batches),
                        ("micro_cap", micro_cap), ("multiple_of", multiple_of)):
        least = 0 if name == "rows" else 1
        if not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"update_rows: {name} must be an int >= {least}, got {value!r}")
    if rows == 0:
        return 0, 1
    block = devices * mini_batches
    per = -(-rows // block)
    while True:  # ends: at per = micro_cap * k * multiple_of the padded count divides
        size = -(-per // micro_cap)
        micro = -(-per // size)
        padded = block * micro * size
        if padded % multiple_of == 0:
            return int(padded), int(micro)
        per = micro * size + 1


def pad_rows_to(batch: Batch, rows: int, prediction_rows: int | None = None) -> Batch:
    """Appends empty rows so `batch` has exactly `rows` policy rows and `prediction_rows`
    prediction rows (None: as many as it has); fewer than it holds is an error.

    Padding rows have zero masks, advantages and segment ids (group id -1), so they add
    nothing to any loss, count or gradient: the mesh and micro-/mini-batch splits then never
    need the rollout to produce a particular number of rows.
    """
    have = batch.tokens.shape[0]
    if rows < have:
        raise ValueError(f"pad_rows_to: the batch has {have} rows, more than the {rows} asked")
    fills = {"group_ids": -1, "image_index": -1}
    out = {f.name: (None if getattr(batch, f.name) is None or f.name == "prediction" else
                    jax.tree.map(lambda x, fill=fills.get(f.name, 0): _pad_leading(x, rows, fill),
                                 getattr(batch, f.name)))
           for f in dataclasses.fields(batch)}
    if batch.prediction is not None:
        p = batch.prediction
        prows = p.tokens.shape[0] if prediction_rows is None else prediction_rows
        if prows < p.tokens.shape[0]:
            raise ValueError(f"pad_rows_to: the batch has {p.tokens.shape[0]} prediction rows, "
                             f"more than the {prows} asked")
        out["prediction"] = jax.tree.map(lambda x: _pad_leading(x, prows, 0), p)
    return Batch(**out)


def pad_rows(batch: Batch, multiple: int, *, min_rows: int = 0,
             min_prediction_rows: int = 0) -> Batch:
    """`pad_rows_to` a multiple of `multiple` policy rows and prediction rows (each at least
    `min_rows` / `min_prediction_rows`)."""
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"pad_rows: multiple must be a positive int, got {multiple!r}")
    rows = _round_up(max(batch.tokens.shape[0], min_rows), multiple)
    p = batch.prediction
    prows = None if p is None else _round_up(max(p.tokens.shape[0], min_prediction_rows),
                                             multiple)
    return pad_rows_to(batch, rows, prows)


def split_rows(tree, parts: int):
    """[R, ...] leaves -> [parts, R/parts, ...], row r in part r % parts.

    Interleaved rather than contiguous: the rows are sharded in contiguous blocks over the
    data axes, so every part takes the same number of rows from every shard and no part has
    to move between devices.
    """
    def one(x):
        if x.shape[0] % parts:
            raise ValueError(f"split_rows: {x.shape[0]} rows do not split into {parts} parts; "
                             f"pad them first (pad_rows)")
        return jnp.swapaxes(x.reshape(x.shape[0] // parts, parts, *x.shape[1:]), 0, 1)
    return jax.tree.map(one, tree)


def merge_rows(tree):
    """Inverse of `split_rows`: [parts, R/parts, ...] -> [R, ...] in the original order."""
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]), tree)


def batch_images(batch: Batch):
    """(image_index, vision) of image+text rows, or None for text rows."""
    return None if batch.vision is None else (batch.image_index, batch.vision)
