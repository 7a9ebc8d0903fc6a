"""Apartments: rooms with centres, furniture instances with positions, and the walking metric.

Public API
- `Room`, `Furniture`, `Apartment`: immutable values. Furniture is named everywhere by its
  integer `id`; rooms by their unique `name` (their `kind` is one of catalog.ROOMS).
- `parse_layout(dict)` / `load_layout(path)` / `save_layout(apartment, path)`: the layout-file
  schema (JSON) with validation that names what is wrong (an unknown furniture or object type,
  a room that does not exist, a dangling furniture reference of a placed object, duplicate ids,
  furniture outside its room).
- `apartment(i)` / `apartments(indices)`: the seven built-in layouts (`layout_data`);
  `TRAIN_APARTMENTS = (0, 1, 2, 4, 5)` and `TEST_APARTMENTS = (3, 6)` as in the public O-WAH
  code and data (the paper's text says train 0,1,2,3,5, which would overlap the test split).
- `Apartment.path_length(pos, room_of_pos, target_pos, target_room)`: metres walked. A walk
  inside one room is a straight line; a walk into another room goes through that room's
  centre (the room's door in this symbolic world). Which room a point lies in is the nearest
  room centre (a Voronoi partition), so the room follows from the position alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

from jaxtom.household import catalog
from jaxtom.household.layout_data import LAYOUTS

TRAIN_APARTMENTS = (0, 1, 2, 4, 5)
TEST_APARTMENTS = (3, 6)
NUM_APARTMENTS = 7


@dataclasses.dataclass(frozen=True)
class Room:
    name: str  # unique within the apartment ("bedroom", "bedroom2")
    kind: str  # one of catalog.ROOMS; what text calls it
    center: tuple[float, float]


@dataclasses.dataclass(frozen=True)
class Furniture:
    id: int
    type: str  # one of catalog.FURNITURE
    room: str  # a Room.name
    position: tuple[float, float]

    @property
    def is_container(self) -> bool:
        """Objects go inside (after opening); otherwise they go on top."""
        return self.type in catalog.CONTAINERS

    @property
    def relation(self) -> str:
        return "inside" if self.is_container else "on"


@dataclasses.dataclass(frozen=True)
class Apartment:
    """A validated layout. `placements` are optional (object type, furniture id) pairs a layout
    file may carry (a fixed scene); the built-in layouts carry none (tasks place objects)."""

    name: str
    rooms: tuple[Room, ...]
    furniture: tuple[Furniture, ...]
    placements: tuple[tuple[str, int], ...] = ()

    # -- lookups ---------------------------------------------------------------------------
    @functools.cached_property
    def _by_id(self) -> dict[int, Furniture]:
        return {f.id: f for f in self.furniture}

    @functools.cached_property
    def _rooms(self) -> dict[str, Room]:
        return {r.name: r for r in self.rooms}

    def piece(self, fid: int) -> Furniture:
        """The furniture with id `fid` (KeyError naming the apartment otherwise)."""
        try:
            return self._by_id[fid]
        except KeyError:
            raise KeyError(f"{self.name} has no furniture with id {fid}") from None

    def room(self, name: str) -> Room:
        try:
            return self._rooms[name]
        except KeyError:
            raise KeyError(f"{self.name} has no room {name!r}") from None

    @property
    def room_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rooms)

    def furniture_of_type(self, kind: str) -> tuple[int, ...]:
        """Ids of every instance of a furniture type (empty if the apartment has none)."""
        return tuple(f.id for f in self.furniture if f.type == kind)

    def furniture_in(self, room: str) -> tuple[int, ...]:
        return tuple(f.id for f in self.furniture if f.room == room)

    def has(self, kind: str) -> bool:
        return any(f.type == kind for f in self.furniture)

    # -- geometry --------------------------------------------------------------------------
    def room_at(self, pos) -> str:
        """The room whose centre is nearest to `pos` (first listed on a tie)."""
        best, name = math.inf, self.rooms[0].name
        for r in self.rooms:
            d = math.dist(pos, r.center)
            if d < best - 1e-9:
                best, name = d, r.name
        return name

    def waypoints(self, pos, target_pos, target_room: str) -> tuple[tuple[float, float], ...]:
        """The polyline walked from `pos` to `target_pos` (excluding `pos`)."""
        if self.room_at(pos) == target_room:
            return (tuple(target_pos),)
        centre = self.room(target_room).center
        if math.dist(centre, target_pos) < 1e-9:
            return (tuple(centre),)
        return (tuple(centre), tuple(target_pos))

    def path_length(self, pos, target_pos, target_room: str) -> float:
        """Metres walked from `pos` to `target_pos` in `target_room` (see module docstring)."""
        total, here = 0.0, tuple(pos)
        for point in self.waypoints(pos, target_pos, target_room):
            total += math.dist(here, point)
            here = point
        return total

    @functools.cached_property
    def furniture_distance(self) -> dict[tuple[int, int], float]:
        """Metres walked from furniture a to furniture b, for every ordered pair."""
        return {(a.id, b.id): self.path_length(a.position, b.position, b.room)
                for a in self.furniture for b in self.furniture}

    def summary(self) -> str:
        kinds = ", ".join(sorted(r.kind for r in self.rooms))
        return f"{self.name}: {len(self.rooms)} rooms ({kinds}), {len(self.furniture)} furniture"


class LayoutError(ValueError):
    """A layout file that does not describe a valid apartment; the message names the field."""


def _field(record, key, where):
    if not isinstance(record, dict) or key not in record:
        raise LayoutError(f"{where}: missing field {key!r}")
    return record[key]


def _point(value, where) -> tuple[float, float]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise LayoutError(f"{where}: expected [x, z] in metres, got {value!r}")
    return (float(value[0]), float(value[1]))


def parse_layout(data: dict, name: str | None = None) -> Apartment:
    """A validated `Apartment` from the layout schema:
    `{"name", "rooms": [{"name", "kind", "center": [x, z]}], "furniture": [{"id", "type",
    "room", "position": [x, z]}], "objects": [{"type", "furniture": id}] (optional)}`."""
    if not isinstance(data, dict):
        raise LayoutError(f"a layout is a JSON object, got {type(data).__name__}")
    label = name or data.get("name", "layout")
    rooms = []
    for i, r in enumerate(_field(data, "rooms", label)):
        where = f"{label}: rooms[{i}]"
        kind = _field(r, "kind", where)
        if kind not in catalog.ROOMS:
            raise LayoutError(f"{where}: unknown room kind {kind!r}; expected one of "
                              f"{', '.join(catalog.ROOMS)}")
        centre = _point(_field(r, "center", where), where)
        rooms.append(Room(str(r.get("name", kind)), kind, centre))
    names = [r.name for r in rooms]
    if not rooms:
        raise LayoutError(f"{label}: a layout needs at least one room")
    if len(set(names)) != len(names):
        raise LayoutError(f"{label}: duplicate room names in {names}")
    furniture, ids = [], set()
    for i, f in enumerate(_field(data, "furniture", label)):
        where = f"{label}: furniture[{i}]"
        fid, kind, room = (_field(f, "id", where), _field(f, "type", where),
                           _field(f, "room", where))
        if isinstance(fid, bool) or not isinstance(fid, int) or fid < 0:
            raise LayoutError(f"{where}: id must be an integer >= 0, got {fid!r}")
        if fid in ids:
            raise LayoutError(f"{where}: duplicate furniture id {fid}")
        if kind not in catalog.FURNITURE:
            raise LayoutError(f"{where}: unknown furniture type {kind!r}; expected one of "
                              f"{', '.join(catalog.FURNITURE)}")
        if room not in names:
            raise LayoutError(f"{where}: room {room!r} does not exist; rooms are {names}")
        ids.add(fid)
        furniture.append(Furniture(fid, kind, room, _point(_field(f, "position", where), where)))
    apt = Apartment(str(label), tuple(rooms), tuple(furniture))
    for f in furniture:
        inside = apt.room_at(f.position)
        if inside != f.room:
            raise LayoutError(f"{label}: furniture {f.id} ({f.type}) is listed in {f.room!r} but "
                              f"its position {f.position} is nearer the centre of {inside!r}")
    placements = []
    for i, o in enumerate(data.get("objects", ()) or ()):
        where = f"{label}: objects[{i}]"
        kind, fid = _field(o, "type", where), _field(o, "furniture", where)
        if kind not in catalog.OBJECT_TYPES:
            raise LayoutError(f"{where}: unknown object type {kind!r}; expected one of "
                              f"{', '.join(catalog.OBJECT_TYPES)}")
        if fid not in ids:
            raise LayoutError(f"{where}: dangling container reference: furniture id {fid!r} "
                              f"does not exist in {label} (ids {sorted(ids)})")
        placements.append((kind, fid))
    return dataclasses.replace(apt, placements=tuple(placements))


def load_layout(path) -> Apartment:
    """Read and validate a JSON layout file (errors name the file and the field)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise LayoutError(f"{path}: not valid JSON ({err})") from None
    return parse_layout(data, name=data.get("name", path.stem) if isinstance(data, dict) else None)


def layout_dict(apt: Apartment) -> dict:
    """The layout-file form of an apartment (inverse of `parse_layout`)."""
    out = {"name": apt.name,
           "rooms": [{"name": r.name, "kind": r.kind, "center": list(r.center)} for r in apt.rooms],
           "furniture": [{"id": f.id, "type": f.type, "room": f.room, "position": list(f.position)}
                         for f in apt.furniture]}
    if apt.placements:
        out["objects"] = [{"type": k, "furniture": fid} for k, fid in apt.placements]
    return out


def save_layout(apt: Apartment, path) -> None:
    Path(path).write_text(json.dumps(layout_dict(apt), indent=1))


@functools.lru_cache(maxsize=None)
def apartment(index: int) -> Apartment:
    """Built-in apartment `index` in 0..6."""
    if not 0 <= index < len(LAYOUTS):
        raise ValueError(f"apartment index must be in 0..{len(LAYOUTS) - 1}, got {index}")
    return parse_layout(LAYOUTS[index])


def apartments(indices=range(NUM_APARTMENTS)) -> tuple[Apartment, ...]:
    return tuple(apartment(i) for i in indices)
