"""The packing domain: CToM's collaborative task in miniature, small enough to learn on a CPU.

A user asks for a packing list for a trip described by four cues (place, weather, activity,
company). Each cue calls for one item that only the user knows they need (`required`); the
assistant answers with four items, one per cue, in one visible message. The user reads a shown
list; one that lacks any needed item gets the user's whole need in reply, every item after the
cue that calls for it ("i need mountain boots cold coat reading book dog leash ."), and one
with every needed item is accepted. The reply comes too late to act on (the CPU default has one
visible round; the controller's `final_reply` fetches it): an assistant gets the list right
either because it learned each cue's item from the reward (Naive GRPO), or because, in CToM,
it predicts what the user would say to a hidden draft (a skill the user's real and
counterfactual replies supervise) and revises before showing. The simulated user reads only
the visible conversation, and the task score is the share of slots the submitted list gets
right, whoever wrote it.

Why the whole need and one visible round (benchmarks/README.md, "CToM CPU default"): when the
user named only the first missing item, a prediction had to find the draft's first wrong slot
to be of use (half of the trained model's named one already right), and with a second visible
round a direct model copied the named item into its next list. When the user named every
missing item, GRPO taught the predictions to name the right items for every slot (what helps
a revision) while the prediction NLL pulled them toward naming only the missing ones: CToM w/o
prediction beat CToM. The whole need is at once what the user says and what helps a revision.

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
ITEM_CUE = {item: cue for cue, item in CUE_ITEM.items()}
CUE_SLOT = {cue: s for s, pairs in SLOTS.items() for cue, _ in pairs}

ACCEPT = "ok , that is all ."
PROMPT = "trip : {place} {weather} {activity} {company} ."  # short: every row repeats it
# Each need names its reason first ("mountain boots"): the item a reply names then follows
# the cue word that calls for it, so a model that predicts replies learns each cue's item from
# the words next to it (measured, benchmarks/README.md "CToM CPU default")
NEED = "i need {needs} ."
DROP = "i do not need {item} ."
# the user's and the teacher's stock phrases: whole tokens of the CPU default's BPE
PHRASES = ("i do not need", "i need", ACCEPT, "i will draft .", "i will commit .")


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


def score(submission: str | None, task: Task) -> float:
    """The share of the four slots whose item is right, reading each slot's first listed
    item (0 for no submission).

    Per slot, not F1: under F1 a list that leaves out every item it is unsure of beats one
    that guesses (two named items alone score 0.67, the same two plus two guesses at one in
    ten 0.5), and GRPO found it (measured: seed 0's CToM run shrank its lists to one item,
    score 0.35 from 0.49); per slot, a guess never costs and extra items never count."""
    need = dict(zip(SLOT_NAMES, required(task)))
    got: dict[str, str] = {}
    for item in items_in(submission):
        got.setdefault(ITEM_SLOT[item], item)
    return sum(got.get(slot) == item for slot, item in need.items()) / len(SLOT_NAMES)


def user_reply(task: Task, last_assistant: str) -> str:
    """The simulated user's reply to the last visible assistant message.

    A question (contains "?" and no list), or a list that lacks any needed item, gets the
    whole need (every needed item, in slot order); a list with all of them gets the first
    item it should drop, else the acceptance."""
    listed = items_in(last_assistant)
    need = required(task)
    if any(i not in listed for i in need):
        return need_phrase(need)
    extra = [i for i in listed if i not in need]
    return DROP.format(item=extra[0]) if extra else ACCEPT


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
