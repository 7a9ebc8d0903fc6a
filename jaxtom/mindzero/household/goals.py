"""MindZero's goal task in the household (`mindzero.data.task="household"`): Figure 9's goal
particles (`jaxtom.mindzero.household.train`), scored on the held-out apartments with the
assistance and QA columns (`jaxtom.mindzero.household.evaluate`)."""

from __future__ import annotations

from jaxtom.mindzero.household.config import HouseholdMindZero
from jaxtom.mindzero.household.evaluate import evaluate_run
from jaxtom.mindzero.household.train import prepare
from jaxtom.mindzero.task import Task, register

TASK = register(Task("household", prepare=prepare, evaluate=evaluate_run,
                     section=HouseholdMindZero,
                     about="household goal particles (Table 1b), exact symbolic likelihood"))
