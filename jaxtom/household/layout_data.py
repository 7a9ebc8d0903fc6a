"""The seven built-in apartment layouts, in the layout-file schema `apartments.parse_layout`
reads (rooms with centres, furniture with absolute (x, z) positions in metres).

They mirror the furniture facts of the Online Watch-And-Help pickles (notes section 1): every
apartment has one bathroomcabinet, one cabinet (bedroom or living room), and a kitchen with a
fridge, stove, microwave and kitchentable; apartment 0 has 4 kitchencabinets and no
dishwasher, 1-4 and 6 have 8 kitchencabinets and a dishwasher, 2 has 5 rooms and 2
kitchentables, 4 has no coffeetable, 5 has no kitchencabinet and no dishwasher, 6 has two
fridges. Positions are ours (Unity coordinates are not public); they are written as offsets
from the room centre so that every piece lies in its own room's Voronoi cell.
"""

from __future__ import annotations

# Eight kitchencabinet offsets along two kitchen walls (the first four are used by apartment 0).
_CABINETS8 = ((-3.0, -3.0), (-1.5, -3.0), (0.0, -3.0), (1.5, -3.0),
              (-3.0, -1.5), (-3.0, 0.0), (-3.0, 1.5), (3.0, -3.0))


def _layout(name, rooms, furniture):
    """rooms: {name: (kind, x, z)}; furniture: [(type, room, dx, dz)] offsets from the centre."""
    out_rooms = [{"name": r, "kind": kind, "center": [x, z]} for r, (kind, x, z) in rooms.items()]
    out_furniture = []
    for index, (kind, room, dx, dz) in enumerate(furniture):
        _, x, z = rooms[room]
        out_furniture.append({"id": index, "type": kind, "room": room,
                              "position": [round(x + dx, 2), round(z + dz, 2)]})
    return {"name": name, "rooms": out_rooms, "furniture": out_furniture}


def _kitchen(cabinets=8, dishwasher=True, fridges=1, tables=1):
    items = [("fridge", "kitchen", 2.5, 2.5), ("stove", "kitchen", 0.0, 3.0),
             ("microwave", "kitchen", 1.5, 3.0), ("kitchentable", "kitchen", 0.5, 0.5)]
    if fridges == 2:
        items.append(("fridge", "kitchen", -2.5, 3.0))
    if tables == 2:
        items.append(("kitchentable", "kitchen", -1.0, 1.5))
    if dishwasher:
        items.append(("dishwasher", "kitchen", 3.0, -1.0))
    items += [("kitchencabinet", "kitchen", dx, dz) for dx, dz in _CABINETS8[:cabinets]]
    return items


def _four_rooms(kitchen, bathroom, bedroom, livingroom):
    return {"kitchen": ("kitchen",) + kitchen, "bathroom": ("bathroom",) + bathroom,
            "bedroom": ("bedroom",) + bedroom, "livingroom": ("livingroom",) + livingroom}


LAYOUTS = (
    # 0: Figure 8's apartment: 4 kitchencabinets, no dishwasher; coffeetables in bedroom and
    # living room, desks in both, the cabinet and sofa in the living room.
    _layout("apartment_0", _four_rooms((0.0, 0.0), (0.0, 9.0), (9.0, 9.0), (9.0, 0.0)),
            _kitchen(cabinets=4, dishwasher=False)
            + [("bathroomcabinet", "bathroom", -1.5, 1.5),
               ("coffeetable", "bedroom", 0.0, -1.0), ("desk", "bedroom", 2.5, 2.0),
               ("coffeetable", "livingroom", 0.0, 0.5), ("cabinet", "livingroom", 3.0, -2.5),
               ("desk", "livingroom", 3.0, 2.5), ("sofa", "livingroom", 0.0, 2.5)]),
    # 1: a row of rooms: bathroom | bedroom | livingroom | kitchen.
    _layout("apartment_1", _four_rooms((24.0, 0.0), (0.0, 0.0), (8.0, 0.0), (16.0, 0.0)),
            _kitchen()
            + [("bathroomcabinet", "bathroom", 1.5, -2.0),
               ("cabinet", "bedroom", -2.0, 2.5), ("desk", "bedroom", 2.0, 2.5),
               ("coffeetable", "livingroom", 0.0, 0.0), ("sofa", "livingroom", 0.0, 2.5),
               ("desk", "livingroom", -2.5, -2.5)]),
    # 2: five rooms (a second bedroom) and two kitchentables (one in the living room).
    _layout("apartment_2",
            {"kitchen": ("kitchen", 0.0, 0.0), "livingroom": ("livingroom", 9.0, 0.0),
             "bedroom": ("bedroom", 18.0, 0.0), "bedroom2": ("bedroom", 9.0, 9.0),
             "bathroom": ("bathroom", 18.0, 9.0)},
            _kitchen()
            + [("kitchentable", "livingroom", -2.0, 1.0), ("coffeetable", "livingroom", 1.5, -1.0),
               ("sofa", "livingroom", 2.5, 1.5),
               ("cabinet", "bedroom", 2.5, -2.5), ("desk", "bedroom", 2.5, 2.0),
               ("desk", "bedroom2", -2.5, 2.5), ("coffeetable", "bedroom2", 0.5, 0.0),
               ("bathroomcabinet", "bathroom", 2.0, 2.0)]),
    # 3 (test): L-shaped, coffeetables in bedroom and living room, cabinet in the bedroom.
    _layout("apartment_3", _four_rooms((0.0, 0.0), (16.0, 8.0), (8.0, 8.0), (8.0, 0.0)),
            _kitchen()
            + [("bathroomcabinet", "bathroom", 2.0, 1.5),
               ("coffeetable", "bedroom", -1.0, 1.0), ("desk", "bedroom", 2.5, 2.5),
               ("cabinet", "bedroom", -2.5, 2.5),
               ("coffeetable", "livingroom", 0.5, -0.5), ("sofa", "livingroom", 0.5, -2.5),
               ("desk", "livingroom", 2.5, 1.0)]),
    # 4: no coffeetable.
    _layout("apartment_4", _four_rooms((8.0, 0.0), (0.0, 8.0), (8.0, 8.0), (0.0, 0.0)),
            _kitchen()
            + [("bathroomcabinet", "bathroom", -2.0, 2.0),
               ("desk", "bedroom", 2.5, 2.5),
               ("sofa", "livingroom", -2.0, 0.0), ("desk", "livingroom", -2.5, -2.5),
               ("cabinet", "livingroom", 1.5, -3.0)]),
    # 5: no kitchencabinet, no dishwasher.
    _layout("apartment_5", _four_rooms((0.0, 0.0), (18.0, 0.0), (9.0, 8.0), (9.0, 0.0)),
            _kitchen(cabinets=0, dishwasher=False)
            + [("bathroomcabinet", "bathroom", 2.0, 0.0),
               ("cabinet", "bedroom", 2.5, 2.5), ("coffeetable", "bedroom", -1.0, 1.0),
               ("coffeetable", "livingroom", 0.0, -1.0), ("sofa", "livingroom", 0.0, -3.0),
               ("desk", "livingroom", 3.0, -2.5)]),
    # 6 (test): two fridges.
    _layout("apartment_6", _four_rooms((9.0, 9.0), (0.0, 0.0), (0.0, 9.0), (9.0, 0.0)),
            _kitchen(fridges=2)
            + [("bathroomcabinet", "bathroom", -2.0, -2.0),
               ("desk", "bedroom", -2.5, 2.5), ("coffeetable", "bedroom", -0.5, 1.0),
               ("coffeetable", "livingroom", 0.5, -0.5), ("sofa", "livingroom", 2.5, -2.5),
               ("cabinet", "livingroom", -1.5, -3.0)]),
)
