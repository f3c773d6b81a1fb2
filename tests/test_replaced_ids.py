"""``merge@1``'s ``derived_from`` (issue 24): the ids a replacement replaced, encoded and decoded in
one place (contract/columns.py); what a trace read back holds is untrusted."""

from __future__ import annotations

import pytest

from ragtrail.contract.columns import replaced_ids, replaced_ids_cell


def test_the_replaced_ids_round_trip_in_order():
    ids = ["sha256:ab", "c,1", 'quote"d', "ünï"]
    cell = replaced_ids_cell(ids)
    assert cell == '["sha256:ab","c,1","quote\\"d","ünï"]'
    assert replaced_ids(cell) == ids


@pytest.mark.parametrize("hostile", [None, 3, "", "not json", "[1, 2]", '{"a": 1}', "[" * 5000, ["a"], "e3b0c44298fc1c149afbf4c8996fb924"])
def test_anything_but_a_json_array_of_strings_names_nothing(hostile):
    assert replaced_ids(hostile) == []


def test_non_string_entries_are_dropped():
    assert replaced_ids('["a", 1, null, "b"]') == ["a", "b"]
