"""The household domain's fixed vocabulary (MindZero appendix C, Figure 9; Online
Watch-And-Help's task generator): rooms, furniture, object types, goal targets and tasks.

Every other household module names things with these strings, so a hypothesis that mentions
anything else can be rejected in one place (`check_object_type`, `check_target`).
"""

from __future__ import annotations

ROOMS = ("bathroom", "bedroom", "kitchen", "livingroom")

# Furniture that holds objects inside (opened before put/grab) or on top.
CONTAINERS = ("bathroomcabinet", "cabinet", "dishwasher", "fridge", "kitchencabinet",
              "microwave", "stove")
SURFACES = ("coffeetable", "desk", "kitchentable", "sofa")
FURNITURE = tuple(sorted(CONTAINERS + SURFACES))

# The object types a goal can name (Figure 9's schema enum).
GOAL_OBJECT_TYPES = ("apple", "chips", "condimentbottle", "cupcake", "cutleryfork", "plate",
                     "pudding", "remotecontrol", "salmon", "waterglass", "wineglass")
# Clutter: present in apartments, never in a goal.
OTHER_OBJECT_TYPES = ("book", "dishbowl", "wine")
OBJECT_TYPES = tuple(sorted(GOAL_OBJECT_TYPES + OTHER_OBJECT_TYPES))

# Goal targets (Figure 9's schema enum) and how an object relates to each.
TARGETS = ("coffeetable", "dishwasher", "fridge", "kitchentable", "stove")
TARGET_RELATION = {"coffeetable": "on", "kitchentable": "on", "dishwasher": "inside",
                   "fridge": "inside", "stove": "inside"}

# Tasks: the object types each may use and the targets it may put them to (notes section 1).
TASKS = ("prepare_food", "put_dishwasher", "put_fridge", "setup_table", "watch_tv")
TASK_OBJECTS = {
    "setup_table": ("cutleryfork", "plate", "waterglass", "wineglass"),
    "prepare_food": ("apple", "cupcake", "pudding", "salmon"),
    "put_fridge": ("apple", "cupcake", "pudding", "salmon"),
    "put_dishwasher": ("cutleryfork", "plate", "waterglass", "wineglass"),
    "watch_tv": ("chips", "condimentbottle", "remotecontrol"),
}
TASK_TARGETS = {
    "setup_table": ("coffeetable", "kitchentable"),
    "prepare_food": ("coffeetable", "kitchentable", "stove"),
    "put_fridge": ("fridge",),
    "put_dishwasher": ("dishwasher",),
    "watch_tv": ("coffeetable",),
}
# MindZero drops watch_tv from its data ("no_tv"); generators default to these.
MINDZERO_TASKS = ("prepare_food", "put_dishwasher", "put_fridge", "setup_table")


def _check(kind: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {kind} {value!r}; expected one of {', '.join(allowed)}")
    return value


def check_object_type(value) -> str:
    """`value` if it is a goal object type, else a ValueError naming the allowed types."""
    return _check("object type", value, GOAL_OBJECT_TYPES)


def check_target(value) -> str:
    """`value` if it is a goal target, else a ValueError naming the allowed targets."""
    return _check("target", value, TARGETS)


def check_task(value) -> str:
    """`value` if it is a task name, else a ValueError naming the allowed tasks."""
    return _check("task", value, TASKS)
