"""The MindZero task registry: the toy task of docs/architecture.md, run as the document
shows it, trains through the unchanged driver; a name nobody registered, or a task of the
other domain's section, is one config error before anything runs."""

import re
import types
from pathlib import Path

import pytest

from jaxtom import cli
from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero import driver, task

ROOT = Path(__file__).resolve().parents[2]
MICRO = ["mindzero.data.train_episodes=8", "mindzero.data.eval_episodes=2",
         "mindzero.warmup.steps=0", "trainer.total_steps=2", "trainer.prompts_per_step=2",
         "trainer.group_size=4", "trainer.max_new_tokens=24", "trainer.eval_every=0",
         "model.vocab_size=320", "trainer.progress=false", "mindzero.data.val_episodes=0"]


def architecture_toy_task() -> str:
    """The first Python block after the document's "Add a MindZero task" heading."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Add a MindZero task"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def toy(monkeypatch):
    """The document's toy task, registered for this test only."""
    monkeypatch.setattr(task, "_TASKS", dict(task._TASKS))
    module = types.ModuleType("early_goals")
    exec(compile(architecture_toy_task(), "docs/architecture.md", "exec"), module.__dict__)
    return module


def test_the_documented_toy_task_trains_through_the_unchanged_driver(tmp_path, toy,
                                                                    monkeypatch):
    assert "early_goals" in task.names() and {"goals", "qa", "household", "household_qa"} <= \
        set(task.names())
    config = load_config("configs/mindzero_gridworld_tiny.py",
                         [f"trainer.workdir={tmp_path}", "mindzero.data.task=early_goals",
                          *MICRO])
    assert task.get(config) is toy.TASK
    trained, run_ssrl = [], driver.run_ssrl

    def recording(model, tasks, *args, **kwargs):
        trained.extend(tasks)
        return run_ssrl(model, tasks, *args, **kwargs)

    monkeypatch.setattr(driver, "run_ssrl", recording)
    out = driver.train(config, progress=False)
    assert int(out["state"].step) == 2 and (tmp_path / "checkpoint").exists()
    steps = {record["t"] for record in trained}
    assert len(steps) > 1 and max(steps) <= toy.EARLY_STEPS


def test_unknown_task_is_one_config_error_listing_the_registered_ones(tmp_path, capsys):
    code = cli.main(["mindzero", "train", "configs/mindzero_gridworld_tiny.py",
                     f"trainer.workdir={tmp_path}", "mindzero.data.task=nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("config error: mindzero.data.task: expected a registered task:")
    assert all(name in err[0] for name in ("'goals'", "'qa'", "'household'", "'household_qa'"))
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_task_needs_its_own_domains_section():
    config = load_config("configs/mindzero_household_tiny.py", ["mindzero.data.task=goals"])
    with pytest.raises(ConfigError, match="mindzero.data.task: expected a task of the config's "
                                          "section"):
        task.get(config)
    assert isinstance(task.get(load_config("configs/mindzero_gridworld_tiny.py", [])),
                      task.Task)
