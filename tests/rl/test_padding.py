"""Row padding for the update (`batch.update_rows`, `Learner.row_split`): a multiple of the
data-parallel devices x PPO mini-batches, never of the slice times the micro-batches; the
micro-batch count is a cap. Pure arithmetic (no compile): the gradient checks live in
test_step.py (`test_padding_rows_leave_gradients_unchanged`) and test_ppo.py (4 devices)."""

import itertools

import pytest
from jax.sharding import AbstractMesh

from jaxtom import rl
from jaxtom.rl.batch import update_rows
from tests.rl.common import tiny_model


def abstract_learner(data, fsdp, **step):
    """A Learner over a mesh of `data x fsdp` devices that need not exist (shapes only)."""
    mesh = AbstractMesh((data, fsdp, 1), ("data", "fsdp", "tensor"))
    return rl.Learner(tiny_model(), rl.StepConfig(**step), mesh=mesh, total_steps=1000)


@pytest.mark.parametrize("data, fsdp, want_rows, want_micro", [
    (1, 8, 1024, 8),  # 32 rows per device per mini-batch: the whole cap
    (8, 8, 1024, 4),  # 4 rows per device per mini-batch: 4 micro-batches of one row
    (16, 16, 1024, 1),  # one row per device per mini-batch: one micro-batch
    (32, 16, 2048, 1),  # more devices x mini-batches than rows: one row each
])
def test_paper_batch_pads_to_the_devices_not_the_micro_batches(data, fsdp, want_rows,
                                                                 want_micro):
    """The paper's 1024-row batch with 4 PPO mini-batches and micro_batches=8: on 256
    data-parallel devices it stays 1024 (the old rule, devices x 8 x 4, padded to 8192)."""
    learner = abstract_learner(data, fsdp, micro_batches=8, ppo_mini_batches=4)
    rows, micro = learner.row_split(1024)
    assert (rows, micro) == (want_rows, want_micro)
    assert learner.padded_rows(1024) == rows and rows % learner.row_multiple == 0
    if data * fsdp * 4 <= 1024:
        assert rows <= 1.25 * 1024


def test_update_rows_pads_little_and_splits_evenly():
    for rows, devices, mini, cap, procs in itertools.product(
            range(1, 200), (1, 2, 3, 4, 8), (1, 3, 4), (1, 3, 4, 8), (1, 2, 3)):
        padded, micro = update_rows(rows, devices, mini, cap, multiple_of=procs)
        block = devices * mini
        per = -(-rows // block)  # rows a device needs per mini-batch
        size = -(-per // cap)  # rows per device per micro-batch the cap asks for
        assert padded >= rows and padded % block == 0 and padded % procs == 0
        assert 1 <= micro <= min(cap, padded // block)
        assert (padded // block) % micro == 0
        assert update_rows(padded, devices, mini, cap, multiple_of=procs) == (padded, micro)
        if procs == 1:  # under one row per device and one micro-batch per device of padding
            assert padded // block // micro == size
            assert padded - rows < block * (1 + size)


def test_update_rows_refuses_bad_arguments():
    assert update_rows(0, 4, 2, 3) == (0, 1)
    for bad in (dict(rows=-1), dict(devices=0), dict(mini_batches=0), dict(micro_cap=0)):
        args = dict(rows=5, devices=2, mini_batches=1, micro_cap=1) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            update_rows(**args)


def test_pad_rows_to_adds_empty_rows_and_refuses_to_drop_rows():
    from tests.rl.common import random_batch
    batch = random_batch(0)  # 8 policy rows, 8 prediction rows (4 with targets)
    padded = rl.batch.pad_rows_to(batch, 11, 10)
    assert padded.tokens.shape[0] == 11 and padded.prediction.tokens.shape[0] == 10
    assert not padded.policy_mask[8:].any() and (padded.group_ids[8:] == -1).all()
    assert not padded.prediction.target_mask[8:].any()
    assert (padded.tokens[:8] == batch.tokens).all()
    assert rl.batch.pad_rows_to(batch, 8).prediction.tokens.shape[0] == 8
    with pytest.raises(ValueError, match="has 8 rows, more than the 7"):
        rl.batch.pad_rows_to(batch, 7)
    with pytest.raises(ValueError, match="8 prediction rows, more than the 3"):
        rl.batch.pad_rows_to(batch, 8, 3)


def test_first_fit_rows_is_what_pack_sequences_fills():
    """The row count a multi-round rollout packs into: every sequence fits, and the rows past
    it would only be padding (first-fit fills leading rows)."""
    import numpy as np
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(5, 120, size=40)]
    seqs = [list(range(1, n + 1)) for n in lengths]
    rows = rl.first_fit_rows(lengths, 128)
    assert rows < len(lengths) and sum(lengths) <= rows * 128
    batch = rl.pack_sequences(seqs, [[1.0] * n for n in lengths], [0.0] * 40, [0] * 40,
                              num_rows=len(lengths), row_len=128)
    filled = np.nonzero((batch.segment_ids > 0).any(axis=1))[0]
    assert filled.tolist() == list(range(rows))  # exactly the leading `rows` rows
    rl.pack_sequences(seqs, [[1.0] * n for n in lengths], [0.0] * 40, [0] * 40,
                      num_rows=rows, row_len=128)  # and that many suffice
    assert rl.first_fit_rows(lengths, 128, multiple=8) == -(-rows // 8) * 8
    assert rl.first_fit_rows([], 128, multiple=8) == 8
    # the update's row counts: multiples of 8 up to 64, then the bucket ladder (80, 96, ...)
    assert [rl.batch.bucketed_rows(n) for n in (0, 1, 8, 9, 63, 64, 65, 81, 129)] == [
        8, 8, 8, 16, 64, 64, 80, 96, 160]
    with pytest.raises(ValueError, match="longer than row_len=128"):
        rl.first_fit_rows([129], 128)
