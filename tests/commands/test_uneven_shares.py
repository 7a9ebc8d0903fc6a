"""`trainer.prompts_per_step` that the process count does not divide: 3 prompts on 2
processes (shares 2 and 1, so one process packs padding rows the other fills) train like
one process with all 3: same per-step metrics (weighted by each process's count) and
parameters."""

import pytest

from tests.commands.test_multiprocess import TOY, assert_same_run, finish, launch

UNEVEN = [*TOY, "trainer.prompts_per_step=3"]


@pytest.mark.slow  # three JAX processes compiling: a few minutes on 2 cores
def test_three_prompts_on_two_processes_equal_one(tmp_path):
    single, multi = tmp_path / "single", tmp_path / "multi"
    finish(launch(UNEVEN, single, nproc=1))
    finish(launch(UNEVEN, multi, nproc=2))
    assert_same_run(single, multi, 3, UNEVEN)
