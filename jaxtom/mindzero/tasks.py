"""The built-in MindZero tasks: importing this module registers each one
(`jaxtom.mindzero.task.register`). A new task is its own module plus one line here."""

from jaxtom.mindzero import goals  # noqa: F401
from jaxtom.mindzero import qa_train  # noqa: F401  (qa, household_qa)
from jaxtom.mindzero.household import goals as household_goals  # noqa: F401
