"""The packing domain: CToM's collaborative task in miniature, small enough to learn on a CPU.

A user asks for a packing list for a trip described by four cues (place, weather, activity,
company). Each cue calls for one item that only the user knows they need (`required`); the
assistant answers with four items, one per cue. The user reads a shown list and names the
first needed item it lacks ("i also need boots ."), or accepts it ("ok , that is all .").
Which item a cue calls for is never stated: an assistant learns it from the user's replies,
either as a reward (Naive GRPO) or, in CToM, also as supervised targets for its predictions of
those replies. The simulated user reads only the visible conversation, and the task score is
the F1 of the submitted list against the needed items, whoever wrote it.

Tasks are generated from a seed (`make_tasks`): which item each cue calls for is fixed (the
table below), the cue combinations are drawn, and held-out tasks are combinations never
trained on (each single cue is seen in training).
"""

from __future__ import annotations

import itertools
import re
from typing import Sequence

import numpy as np

from jaxtom.ctom.data import Task

# slot -> (cue word, the item that cue calls for); ten per slot, every word distinct
SLOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "place": (("beach", "towel"), ("mountain", "boots"), ("city", "map"), ("lake", "paddle"),
              ("desert", "goggles"), ("forest", "compass"), ("island", "snorkel"),
              ("river", "sandals"), ("cave", "torch"), ("farm", "gloves")),
    "weather": (("sunny", "sunscreen"), ("rainy", "umbrella"), ("windy", "scarf"),
                ("cold", "coat"), ("hot", "fan"), ("foggy", "whistle"), ("stormy", "poncho"),
                ("humid", "towelette"), ("icy", "crampons"), ("dark", "lantern")),
    "activity": (("hiking", "water"), ("reading", "book"), ("fishing", "rod"),
                 ("cooking", "stove"), ("painting", "brushes"), ("singing", "guitar"),
                 ("camping", "tent"), ("swimming", "swimsuit"), ("climbing", "rope"),
                 ("sketching", "pencils")),
    "company": (("dog", "leash"), ("baby", "diapers"), ("kids", "games"),
                ("grandma", "chair"), ("friends", "cards"), ("cat", "carrier"),
                ("partner", "camera"), ("team", "whiteboard"), ("class", "notebooks"),
                ("horse", "saddle")),
}
SLOT_NAMES = tuple(SLOTS)
ITEMS: tuple[str, ...] = tuple(item for pairs in SLOTS.values() for _, item in pairs)
CUES: tuple[str, ...] = tuple(cue for pairs in SLOTS.values() for cue, _ in pairs)
ITEM_SLOT = {item: s for s, pairs in SLOTS.items() for _, item in pairs}
CUE_ITEM = {cue: item for pairs in SLOTS.values() for cue, item in pairs}

ACCEPT = "ok , that is all ."
PROMPT = "trip : {place} {weather} {activity} {company} ."  # short: every row repeats it
NEED = "i also need {item} ."
QUESTION_ANSWER = "i need {item} ."
DROP = "i do not need {item} ."
# the user's and the teacher's stock phrases: whole tokens of the CPU default's BPE
PHRASES = ("i also need", "i do not need", "i need", ACCEPT, "i will draft .", "i will commit .")


def items_in(text: str | None) -> list[str]:
    """The known item words of `text`, in order, each once."""
    seen: list[str] = []
    for word in re.findall(r"[a-z]+", (text or "").lower()):
        if word in ITEM_SLOT and word not in seen:
            seen.append(word)
    return seen


def required(task: Task) -> list[str]:
    """The needed items, in slot order (stored in the task's hidden field)."""
    return task.hidden.split()


def score(submission: str | None, task: Task) -> float:
    """F1 of the submitted items against the needed ones (0 for no submission)."""
    got, need = set(items_in(submission)), set(required(task))
    if not got:
        return 0.0
    hit = len(got & need)
    return 2.0 * hit / (len(got) + len(need))


def user_reply(task: Task, last_assistant: str, *, asked: bool = False) -> str:
    """The simulated user's reply to the last visible assistant message.

    A question (contains "?" and no list) is answered with the first needed item the
    assistant has not written yet; a list gets the first needed item it lacks, else the first
    item it should drop, else the acceptance."""
    listed = items_in(last_assistant)
    need = required(task)
    missing = [i for i in need if i not in listed]
    if asked or ("?" in last_assistant and not listed):
        return QUESTION_ANSWER.format(item=missing[0]) if missing else ACCEPT
    if missing:
        return NEED.format(item=missing[0])
    extra = [i for i in listed if i not in need]
    return DROP.format(item=extra[0]) if extra else ACCEPT


def make_task(task_id: str, cues: Sequence[str]) -> Task:
    place, weather, activity, company = cues
    return Task(id=task_id, domain="packing",
                prompt=PROMPT.format(place=place, weather=weather, activity=activity,
                                     company=company),
                hidden=" ".join(CUE_ITEM[c] for c in cues),
                reference=" ".join(CUE_ITEM[c] for c in cues))


def make_tasks(seed: int, num_train: int, num_heldout: int) -> tuple[list[Task], list[Task]]:
    """(training, held-out) tasks: distinct cue combinations drawn with `seed`; held-out
    combinations never occur in training, and training covers every cue."""
    rng = np.random.default_rng([seed, 6011])
    cues = [tuple(c for c, _ in pairs) for pairs in SLOTS.values()]
    total = num_train + num_heldout
    space = int(np.prod([len(c) for c in cues]))
    if total > space:
        raise ValueError(f"{total} packing tasks requested; only {space} cue combinations")
    picked = rng.choice(space, size=total, replace=False)
    combos = list(itertools.product(*cues))
    chosen = [combos[i] for i in picked]
    train, heldout = chosen[:num_train], chosen[num_train:]
    covered = set(itertools.chain.from_iterable(train))
    if num_train and len(covered) < len(CUES):
        raise ValueError(f"{num_train} training tasks leave cues unseen; ask for more")
    return ([make_task(f"packing-{seed}-train-{i}", c) for i, c in enumerate(train)],
            [make_task(f"packing-{seed}-heldout-{i}", c) for i, c in enumerate(heldout)])
