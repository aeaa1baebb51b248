"""traceparse.output.json_text writes the text json.dumps(indent=2) writes, whatever the shape (it is written by the C
encoder, then indented by msgspec); its strictness: test_impossible_values.test_json_text_is_strict."""

import json

import pytest

from traceparse.output import json_text

CASES = [{}, [], {"a": []}, {"a": {}}, [[]], {"x": [1, {"y": {}}, [], "s"]}, "é\u2028\x00\"\\", 1e-05, 1.0, -0.0,
         2**70, None, True, {"nested": [[[{"k": [1.5, None, False]}]]]}, {"": 0, "1": {"2": [3]}}]


@pytest.mark.parametrize("value", CASES, ids=range(len(CASES)))
def test_json_text_is_json_dumps_indented(value):
    assert json_text(value) == json.dumps(value, indent=2, allow_nan=False)
    assert json_text(value, indent=None) == json.dumps(value, allow_nan=False)

