"""`_text._loads` reads a tool call's argument string through orjson where that gives what `json.loads` gives, and
through `json` where it would not (NaN and Infinity, integers past 64 bits): the value, types included, is always
`json.loads`'s, and text `json` refuses is refused."""
import json

import pytest

from stateset_plugins.rewards._text import _loads, parse_arguments

AGREE = [
    '{"order_id": "W1234567", "reason": "no longer needed"}',  # strings only: orjson's value is json's
    '{"card": "4111111111111111111", "note": "ref 12345678901234567890"}',  # long digit runs inside strings
    '{"amount": 123456789012345678901234}',  # past 64 bits: json keeps the int exact
    '{"a": "x", "a": 123456789012345678901234}',  # a repeated key: the last one wins on both readers
    '{"a": 123456789012345678901234, "a": "x"}',
    '{"amount": NaN, "cap": Infinity, "floor": -Infinity}',  # json reads these, orjson refuses them
    '{"amount": 250, "rate": 0.5, "ok": true, "gone": null, "items": ["a", 1]}',
    '{"nested": {"id": "99999999999999999999"}}',
    '["not", "an", "object"]', '"text"', "123456789012345678901234", "1e400", "-0.0",
    '\ufeff{"bom": "x"}', '{"lone": "\\ud800"}', '{"tab": "a\\tb", "uni": "\\u00e9"}', ' {"spaced": "x"} \n',
]
REFUSED = ['{"a": "x"} trailing', "{'a': 'x'}", '{"a": "x",}', '{"a": "\x01"}', "{"]


@pytest.mark.parametrize("text", AGREE, ids=range(len(AGREE)))
def test_the_value_is_the_json_modules_types_included(text):
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _loads(text)
        return
    got = _loads(text)
    assert repr(got) == repr(expected)  # repr: NaN equals nothing, and 1 == 1.0 == True would hide a type


@pytest.mark.parametrize("text", REFUSED, ids=range(len(REFUSED)))
def test_text_json_refuses_is_refused_with_a_reason(text):
    with pytest.raises(ValueError):
        json.loads(text)
    value, error = parse_arguments(text)
    assert value is None and error.startswith("arguments are not valid JSON")


def test_blank_arguments_are_a_call_without_arguments():
    assert parse_arguments("") == ({}, None) and parse_arguments("  \n") == ({}, None)
