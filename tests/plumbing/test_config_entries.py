"""The config helpers the sections share: an overlay whose problem is
reported, not raised, and a ``[[key]]`` array's entries that convert."""

from __future__ import annotations

import msgspec

from flatgate.proxy.plumbing.config import Problems, convert_entries, overlay_checked


class Entry(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    size: int = 1


def test_convert_entries_keeps_the_good_ones_with_their_index() -> None:
    problems = Problems()
    data = {"things": [{"name": "a"}, {"name": 3}, {"nme": "c"}, {"name": "d", "size": 4}]}
    found = convert_entries(data, "things", Entry, problems)
    assert found == [(0, Entry("a")), (3, Entry("d", 4))]
    assert problems == [
        "things[1].name: Expected `str`, got `int`",
        "things[2]: Object contains unknown field `nme`",
    ]


def test_convert_entries_of_no_array() -> None:
    problems = Problems()
    assert convert_entries({}, "things", Entry, problems) == []
    assert problems == []
    assert convert_entries({"things": {"name": "a"}}, "things", Entry, problems) == []
    assert problems == ["things: expected an array of tables ([[things]])"]


def test_overlay_checked_reports_a_section_that_is_not_a_table() -> None:
    problems = Problems()
    env = {"FLATGATE_STATE_STORE": "memory"}
    assert overlay_checked({"state": {}}, env, {"state": ["store"]}, problems) == {
        "state": {"store": "memory"}
    }
    assert problems == []
    assert overlay_checked({"state": 3}, env, {"state": ["store"]}, problems) is None
    assert problems == ["state: expected a table"]
