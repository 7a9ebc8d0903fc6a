"""CToM tasks: one record type for the three domains, loaders for the paper's public sources
(MATH level-5 problems; CollabLLM BigCodeBench and MediumDocEdit rows) from local files, and
the small task sets this project wrote itself (`jaxtom/ctom/data/*.jsonl`, same formats).

The assistant sees only `prompt`; `hidden` (the user's private specification or notes) and
`reference` (answer, unit tests' target, or reference article) go to the simulator and scorer.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterable

from jaxtom.ctom.scoring import extract_boxed

DATA_DIR = Path(__file__).resolve().parent / "data"
DOMAIN_NAMES = ("math", "coding", "writing", "packing")  # packing: jaxtom.ctom.packing


@dataclasses.dataclass(frozen=True)
class Task:
    id: str
    domain: str  # math | coding | writing | packing
    prompt: str  # the opening request u_0, all the assistant sees
    hidden: str = ""  # what only the user knows (spec, notes); empty for math
    reference: str = ""  # math answer, coding reference solution, or writing reference article
    tests: str | None = None  # coding: unittest source calling task_func
    target_words: int | None = None  # writing: the length the user has in mind

    def __post_init__(self):
        if self.domain not in DOMAIN_NAMES:
            raise ValueError(f"task {self.id}: domain must be one of {DOMAIN_NAMES}, "
                             f"got {self.domain!r}")
        if self.domain == "coding" and not self.tests:
            raise ValueError(f"coding task {self.id} has no unit tests")
        if not self.prompt.strip():
            raise ValueError(f"task {self.id} has an empty prompt")


def _records(path: str | Path) -> Iterable[dict]:
    """Rows of a .jsonl file, a .json file (object or list) or a directory of them."""
    path = Path(path)
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.suffix in (".json", ".jsonl"):
                yield from _records(p)
        return
    if not path.exists():
        raise FileNotFoundError(f"task file not found: {path}")
    if path.suffix == ".jsonl":
        for i, line in enumerate(path.read_text().splitlines()):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i + 1} is not valid JSON: {e}") from None
        return
    data = json.loads(path.read_text())
    yield from (data if isinstance(data, list) else [data])


def load_math(path: str | Path, *, level: str | None = "Level 5") -> list[Task]:
    """MATH rows {problem, level, type, solution}; keeps `level` (None: all levels)."""
    tasks = []
    for i, row in enumerate(_records(path)):
        if level is not None and row.get("level") != level:
            continue
        for key in ("problem", "solution"):
            if key not in row:
                raise ValueError(f"MATH row {i} lacks {key!r}; expected problem/level/type/"
                                 "solution")
        answer = row.get("answer") or extract_boxed(row["solution"])
        if answer is None:
            continue  # no gradable answer
        tasks.append(Task(id=str(row.get("id", row.get("unique_id", f"math-{i}"))),
                          domain="math", prompt=row["problem"], reference=answer))
    return tasks


_ALIASES = {
    "prompt": ("prompt", "problem", "question", "instruction"),
    "hidden": ("hidden_information", "single_turn_prompt", "specification", "notes"),
    "reference": ("reference", "single_turn_completion", "canonical_solution", "article",
                  "completion"),
    "tests": ("test", "tests", "unit_tests"),
}


def _field(row: dict, name: str) -> Any:
    nested = [row] + [row[k] for k in ("single_turn_metadata", "metadata", "extra_info")
                      if isinstance(row.get(k), dict)]
    for d in nested:
        for key in _ALIASES[name]:
            if d.get(key):
                value = d[key]
                if isinstance(value, list) and value and isinstance(value[0], dict):
                    users = [m.get("content", "") for m in value if m.get("role") == "user"]
                    value = users[0] if users else ""
                return value
    return None


def load_collabllm(path: str | Path, domain: str) -> list[Task]:
    """CollabLLM-style rows (BigCodeBench for coding, MediumDocEdit for writing).

    Field names accepted (first present wins; also inside `single_turn_metadata`/`metadata`):
    prompt ~ prompt|problem|question (a message list uses its first user turn); hidden ~
    hidden_information|single_turn_prompt|specification; reference ~ reference|
    single_turn_completion|canonical_solution|article; tests ~ test|tests. Writing rows that
    share a reference article are grouped: the first row's request is kept.
    """
    if domain not in ("coding", "writing"):
        raise ValueError(f"CollabLLM rows are coding or writing tasks, got {domain!r}")
    tasks, seen = [], set()
    for i, row in enumerate(_records(path)):
        prompt = _field(row, "prompt")
        if not prompt:
            raise ValueError(f"row {i} of {path} has no prompt field ({_ALIASES['prompt']})")
        reference = _field(row, "reference") or ""
        if domain == "writing":
            if reference in seen:
                continue
            seen.add(reference)
        tests = _field(row, "tests") if domain == "coding" else None
        words = row.get("target_words") or (len(reference.split()) if reference else None)
        tasks.append(Task(id=str(row.get("id", row.get("task_id", f"{domain}-{i}"))),
                          domain=domain, prompt=str(prompt), hidden=str(_field(row, "hidden") or ""),
                          reference=str(reference), tests=tests,
                          target_words=int(words) if words else None))
    return tasks


def builtin_tasks(domain: str) -> list[Task]:
    """The project's own small task sets (32 math, 15 coding, 15 writing)."""
    if domain == "math":
        return load_math(DATA_DIR / "math.jsonl", level=None)
    if domain in ("coding", "writing"):
        return load_collabllm(DATA_DIR / f"{domain}.jsonl", domain)
    raise ValueError(f"unknown domain {domain!r}; expected one of {DOMAIN_NAMES}")


def load_tasks(domain: str, source: str | Path | None = None, **kwargs) -> list[Task]:
    """`source=None` -> the built-in set; else the paper's format for `domain`."""
    if source is None or source == "builtin":
        return builtin_tasks(domain)
    return load_math(source, **kwargs) if domain == "math" else load_collabllm(source, domain)
