"""The call form's pure parts: fields from a schema, reading them back, errors, copies, results."""

from __future__ import annotations

import ast
import json

from mercato.catalog.examples import example_contract
from mercato.web.pages import callform
from mercato.web.pages.receipts import ranking_rows, result_tree


def test_the_example_contract_gives_a_select_a_bounded_number_and_a_text() -> None:
    fields = callform.form_fields(example_contract()["requestSchema"])
    assert fields is not None
    assert [(f.name, f.kind, f.required) for f in fields] == [
        ("chart", "select", True),
        ("limit", "integer", False),
        ("snapshotId", "text", False),
    ]
    chart, limit, snapshot = fields
    assert [o.value for o in chart.options] == ['"overall"', '"illust"', '"manga"']
    assert chart.initial == '"overall"'
    assert (limit.minimum, limit.maximum, limit.initial) == (1, 500, "50")
    assert limit.limits == "at least 1, at most 500, default 50"
    assert snapshot.nullable and snapshot.initial == ""
    assert callform.initial_body(fields) == {"chart": "overall", "limit": 50}


def test_schemas_the_form_cannot_express_leave_only_json() -> None:
    assert callform.form_fields({"type": "array"}) is None
    assert callform.form_fields({"type": "object"}) is None
    assert callform.form_fields({"type": "object", "properties": []}) is None
    assert callform.form_fields(True) is None
    many = {"type": "object", "properties": {f"p{i}": {} for i in range(51)}}
    assert callform.form_fields(many) is None
    odd = callform.form_fields({"properties": {"a b": {"type": ["string", "integer"]}}})
    assert odd is not None and odd[0].kind == "json" and odd[0].id == "p-0"


def test_reading_the_fields_back() -> None:
    fields = callform.form_fields(
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "x": {"type": "number"},
                "b": {"type": "boolean"},
                "s": {"type": "string"},
                "o": {"type": "object"},
            },
        }
    )
    assert fields is not None
    values = {
        "field:n": " 12 ",
        "field:x": "2.5",
        "field:b": "false",
        "field:s": " a ",
        "field:o": "",
    }
    body, errors = callform.read_form(fields, values)
    assert body == {"n": 12, "x": 2.5, "b": False, "s": " a "} and errors == {}
    body, errors = callform.read_form(
        fields, {"field:n": "1.5", "field:x": "inf", "field:b": "maybe", "field:o": "{"}
    )
    assert body == {}
    assert errors == {
        "field:n": "Write a whole number.",
        "field:x": "Write a number.",
        "field:b": "Choose one.",
        "field:o": "Write a JSON value here.",
    }


def test_problem_details_go_to_the_fields_they_name() -> None:
    fields = callform.form_fields(example_contract()["requestSchema"])
    problems = [
        {"pointer": "/limit", "detail": "501 is greater than the maximum of 500"},
        {"pointer": "", "detail": "'chart' is a required property"},
        {"pointer": "/other/0", "detail": "odd"},
        {"pointer": "", "detail": "must be a non-empty object"},
    ]
    by_field, rest = callform.field_errors(problems, fields)
    assert by_field == {
        "field:limit": "501 is greater than the maximum of 500",
        "field:chart": "Required.",
    }
    assert rest == ["/other/0: odd", "(body): must be a non-empty object"]


def test_the_copies_quote_for_bash_and_write_python_literals() -> None:
    body = {"q": "it's", "on": True, "none": None, "list": [1, 2.5, "ü"]}
    curl = callform.curl_line("http://h:1/", "a.b", "v2", "k-1", body)
    assert curl.startswith("curl -sS -X POST 'http://h:1/v1/services/a.b/versions/v2:invoke' ")
    assert """-d '{"q":"it'\\''s","on":true,"none":null,"list":[1,2.5,"ü"]}'""" in curl
    code = callform.client_code("http://h:1", "a.b", "v2", body)
    assert ast.literal_eval(callform.python_literal(body)) == body
    compile(code, "copied.py", "exec")


def test_the_result_tree_and_the_ranking_rows() -> None:
    tree = result_tree({"a": [1, True, None, "x"], "b": {"c": 1.5}})
    assert tree.kind == "object"
    (label_a, a), (label_b, b) = tree.children
    assert (label_a, a.kind, [c.text for _, c in a.children]) == (
        '"a"',
        "array",
        ["1", "true", "null", '"x"'],
    )
    assert (label_b, b.children[0][1].kind) == ('"b"', "number")
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    node = result_tree(deep)
    for _ in range(24):
        node = node.children[0][1]
    assert node.kind == "text" and node.text == json.dumps(json.loads("[" * 16 + "1" + "]" * 16))

    result = {
        "entries": [
            {
                "rank": 1,
                "title": "A",
                "author": "B",
                "link": "https://x/1",
                "thumbnailDigest": "d1",
            },
            {"rank": 2, "title": "C", "author": "D", "link": "javascript:alert(1)"},
        ]
    }
    rows = ranking_rows(result, {"d1": "/receipts/i/artifacts/thumb-1"})
    assert rows == [
        {
            "rank": 1,
            "title": "A",
            "author": "B",
            "link": "https://x/1",
            "thumb": "/receipts/i/artifacts/thumb-1",
        },
        {"rank": 2, "title": "C", "author": "D", "link": None, "thumb": None},
    ]
    assert ranking_rows({"entries": "no"}, {}) is None
    assert ranking_rows([1], {}) is None
