"""A household goal: a task name, object types with counts, and one target (MindZero Figure 9's
particle without its probability). Goals are hashable values so that likelihood and prior
scores can be cached by goal."""

from __future__ import annotations

import dataclasses

from jaxtom.household.catalog import (TARGET_RELATION, check_object_type, check_target,
                                      check_task)


@dataclasses.dataclass(frozen=True)
class Goal:
    """`objects` is a tuple of (type, count) sorted by type, each type once, counts >= 1.
    Build one with `Goal.make`, which validates and normalises."""

    task_name: str
    objects: tuple[tuple[str, int], ...]
    target: str

    @staticmethod
    def make(task_name: str, objects, target: str) -> "Goal":
        """Validated goal; `objects` is a mapping or (type, count) pairs, duplicates summed."""
        check_task(task_name)
        check_target(target)
        items = objects.items() if isinstance(objects, dict) else objects
        counts: dict[str, int] = {}
        for kind, count in items:
            check_object_type(kind)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"count of {kind!r} must be an integer >= 1, got {count!r}")
            counts[kind] = counts.get(kind, 0) + count
        if not counts:
            raise ValueError("a goal needs at least one object")
        return Goal(task_name, tuple(sorted(counts.items())), target)

    @property
    def relation(self) -> str:
        """'on' (tables) or 'inside' (fridge, dishwasher, stove)."""
        return TARGET_RELATION[self.target]

    @property
    def total(self) -> int:
        return sum(c for _, c in self.objects)

    def count(self, kind: str) -> int:
        return dict(self.objects).get(kind, 0)

    def predicates(self) -> dict[str, int]:
        """OWAH's predicate form, e.g. {'on_plate_kitchentable': 2}."""
        return {f"{self.relation}_{kind}_{self.target}": c for kind, c in self.objects}

    def render(self) -> str:
        """The public code's text form: '(setup_table) put 2 plate, 2 cutleryfork to kitchentable'
        (object order as listed, here sorted by type)."""
        things = ", ".join(f"{c} {kind}" for kind, c in self.objects)
        return f"({self.task_name}) put {things} to {self.target}"

    def to_json(self) -> dict:
        """Figure 9's schema without `p`."""
        return {"task_name": self.task_name,
                "objects": [{"type": k, "count": c} for k, c in self.objects],
                "target": {"type": self.target}}
