"""The packing domain: CToM's collaborative task in miniature, small enough to learn on a CPU.

A user asks for a packing list for a trip named by four cues (place, weather, activity,
company); each cue calls for one item that only the user knows they need (`required`; the
cue -> item table below is a regularity every method can learn). The assistant shows a list
of one item per slot and the user, who reads only the visible conversation, replies by the
disclosure rule of the paper's simulated users (Table 8, prompts 8-10):
  * "mismatch" (the coding and writing users: name the single most important thing that is
    wrong or missing): the first slot, in the user's order of importance (the request's
    order), whose item is wrong or absent, with the item it needs ("i need beach towel .");
  * "which" (the math user: say which part is wrong, never the value): "the place item is
    wrong ." or "the place item is missing .".
A list with every needed item is accepted; a message with no item (a question) is read as an
empty list. So a reply reveals at most one needed item, depends on the draft it answers, and
never repeats the answer wholesale; counterfactual replies to hidden drafts follow the same
rule. The task score is the share of slots whose first listed item is right.

Tasks are generated from a seed (`make_tasks`): the cue combinations are drawn, and held-out
tasks are combinations never trained on (each single cue is seen in training).
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
ITEM_CUE = {item: cue for cue, item in CUE_ITEM.items()}
CUE_SLOT = {cue: s for s, pairs in SLOTS.items() for cue, _ in pairs}

ACCEPT = "ok , that is all ."
PROMPT = "trip : {place} {weather} {activity} {company} ."  # short: every row repeats it
# a named need follows the cue that calls for it ("mountain boots"), so a model that predicts
# replies sees each cue next to its item
NEED = "i need {needs} ."
WRONG = "the {slot} item is wrong ."
MISSING = "the {slot} item is missing ."
DISCLOSURES = ("mismatch", "which")
# the user's and the teacher's stock phrases: whole tokens of the CPU default's BPE
PHRASES = ("i need", "item is wrong .", "item is missing .", ACCEPT, "i will draft .",
           "i will commit .")


def labelled(slots: dict[str, str]) -> str:
    """"place towel weather umbrella ...": each item after its slot's name, in slot order.

    The names make a list read as a table and give a from-scratch decoder an explicit token
    to copy a slot's item with (the item after the same name in an earlier list); the user
    and the score read only the item words (`items_in`)."""
    return " ".join(f"{s} {slots[s]}" for s in SLOT_NAMES if s in slots)


def items_in(text: str | None) -> list[str]:
    """The known item words of `text`, in order, each once."""
    seen: list[str] = []
    for word in re.findall(r"[a-z]+", (text or "").lower()):
        if word in ITEM_SLOT and word not in seen:
            seen.append(word)
    return seen


def cues_in(text: str | None) -> dict[str, str]:
    """slot -> the first cue word of `text` for that slot (a trip's request names one each)."""
    out: dict[str, str] = {}
    for word in re.findall(r"[a-z]+", (text or "").lower()):
        if word in CUE_SLOT:
            out.setdefault(CUE_SLOT[word], word)
    return out


def required(task: Task) -> list[str]:
    """The needed items, in slot order (stored in the task's hidden field)."""
    return task.hidden.split()


def first_items(text: str | None) -> dict[str, str]:
    """slot -> the first item `text` lists for it."""
    got: dict[str, str] = {}
    for item in items_in(text):
        got.setdefault(ITEM_SLOT[item], item)
    return got


def score(submission: str | None, task: Task) -> float:
    """The share of the four slots whose first listed item is right (0 for no submission).

    Per slot, not F1: under F1 a list that leaves out every item it is unsure of beats one
    that guesses; per slot, a guess never costs and extra items never count."""
    got = first_items(submission)
    need = dict(zip(SLOT_NAMES, required(task)))
    return sum(got.get(slot) == item for slot, item in need.items()) / len(SLOT_NAMES)


def first_mismatch(task: Task, message: str | None) -> str | None:
    """The most important slot (request order) whose first listed item in `message` is wrong
    or absent; None when every slot is right."""
    got = first_items(message)
    for slot, item in zip(SLOT_NAMES, required(task)):
        if got.get(slot) != item:
            return slot
    return None


def user_reply(task: Task, last_assistant: str, disclosure: str = "mismatch") -> str:
    """The simulated user's reply to the last visible assistant message (or to a hidden
    draft, for a counterfactual): the acceptance when every slot is right, else the single
    most important mismatch under `disclosure` (the module docstring)."""
    if disclosure not in DISCLOSURES:
        raise ValueError(f"packing disclosure must be one of {DISCLOSURES}, got {disclosure!r}")
    slot = first_mismatch(task, last_assistant)
    if slot is None:
        return ACCEPT
    if disclosure == "mismatch":
        return need_phrase([dict(zip(SLOT_NAMES, required(task)))[slot]])
    return (WRONG if slot in first_items(last_assistant) else MISSING).format(slot=slot)


def know_nothing_prediction(task: Task, disclosure: str = "mismatch") -> str:
    """The reply a predictor that knows nothing of the user can write from the template and
    the request alone: every cue (mismatch) or every slot name (which), no item. Its lexical
    F1 against the real replies is the floor of Table 2's prediction F1 on this domain."""
    if disclosure == "mismatch":
        return NEED.format(needs=" ".join(cues_in(task.prompt).values()))
    return WRONG.format(slot=" ".join(SLOT_NAMES))


def need_phrase(items: Sequence[str]) -> str:
    """NEED for `items`, each after the cue that calls for it."""
    if not items:
        raise ValueError("a need names at least one item")
    return NEED.format(needs=" ".join(f"{ITEM_CUE[i]} {i}" for i in items))


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
