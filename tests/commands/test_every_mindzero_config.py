"""Every MindZero config without an external checkpoint runs two SSRL updates on 8 simulated
devices (the rest of tests/commands/test_every_config.py, in a file of its own so that the two
halves run on different test workers)."""

import pytest

from tests.commands.test_every_config import cpu_configs, run_configs


@pytest.mark.slow  # minutes on 2 cores; each MindZero CPU config keeps its own e2e test
def test_mindzero_cpu_configs_run_two_update_steps(tmp_path):
    paths = cpu_configs(mindzero=True)
    assert len(paths) >= 4, paths
    run_configs(paths, tmp_path)
