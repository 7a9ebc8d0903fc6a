"""MindZero's goal task on the gridworld (`mindzero.data.task="goals"`): goal particles over
text observations (`jaxtom.mindzero.goals_text`) or over the rendered grid for a vision-language
policy (`jaxtom.mindzero.vl_train`, `mindzero.data.observation="image"`), scored on held-out
episodes with the assistance speedup (`jaxtom.mindzero.goals_eval`)."""

from __future__ import annotations

from pathlib import Path

from jaxtom.mindzero import goals_eval, goals_text, vl_train
from jaxtom.mindzero.config import MindZeroSection, is_image
from jaxtom.mindzero.task import Prepared, Task, register


def prepare(config, run_dir: Path, mesh) -> Prepared:
    """The text or the image modality of the goal task, as `mindzero.data.observation` says."""
    if is_image(config.mindzero.data.observation):
        return vl_train.prepare(config, run_dir, mesh)
    return goals_text.prepare(config, run_dir, mesh)


TASK = register(Task("goals", prepare=prepare, evaluate=goals_eval.evaluate_run,
                     section=MindZeroSection,
                     about="goal particles on the gridworld (Table 1a), text or image"))
