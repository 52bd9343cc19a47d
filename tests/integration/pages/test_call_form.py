"""The version page's call form is built from the request schema; refusals land beside fields.

Also the same call as curl and `mercato.client` code, and the receipt's result tree.
"""

from __future__ import annotations

import html
import json
import re

from sqlalchemy import select

from builders.catalog import example_contract, publish
from builders.invocation_world import SERVICE, World
from builders.pages import PERSON, Browser, field_error
from mercato.ledger import service as ledger
from mercato.providers.models import ProviderConnection

RICH = "acme.rich"
RICH_SCHEMA = {
    "type": "object",
    "properties": {
        "chart": {"enum": ["overall", "illust", "manga"], "description": "Which chart to read"},
        "limit": {
            "type": ["integer", "null"],
            "minimum": 1,
            "maximum": 500,
            "default": 50,
            "description": "How many entries",
        },
        "safe": {"type": "boolean", "default": True},
        "note": {"type": "string", "maxLength": 20, "minLength": 2},
        "ratio": {"type": "number", "minimum": 0.5},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["chart", "note"],
    "additionalProperties": False,
}


def _publish_rich(world: World) -> None:
    with world.runtime.db.read() as session:
        connection_id = session.scalar(
            select(ProviderConnection.id).where(ProviderConnection.owner_id == world.provider_id)
        )
    assert connection_id is not None
    contract = example_contract(
        requestMaxBytes=4096,
        requestSchema=RICH_SCHEMA,
        resultSchema={"type": "object"},
        artifactContract=None,
    )
    publish(world.runtime, connection_id, service_code=RICH, display_name="Rich", contract=contract)


def _tag(page: str, element_id: str) -> str:
    found = re.search(rf'<(?:input|select|textarea)[^>]*\bid="{element_id}"[^>]*>', page)
    assert found, element_id
    return found.group(0)


def _form(page: str, **fields: str) -> dict[str, str]:
    key = re.search(r'id="call-form".*?name="idempotency_key" value="([^"]+)"', page, re.S)
    assert key
    return {"idempotency_key": key.group(1), "mode": "form"} | {
        f"field:{name}": value for name, value in fields.items()
    }


def _textarea(page: str, element_id: str) -> str:
    found = re.search(rf'<textarea id="{element_id}"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, element_id
    return html.unescape(found.group(1))


def test_the_form_follows_the_schema(world: World, person: Browser) -> None:
    _publish_rich(world)
    page = person.get(f"/listings/{RICH}").text
    chart = _tag(page, "p-chart")
    assert chart.startswith("<select") and " required" in chart
    options = re.findall(
        r'<option value="([^"]*)"', page.split('id="p-chart"')[1].split("</select>")[0]
    )
    assert [html.unescape(o) for o in options] == ['"overall"', '"illust"', '"manga"']
    limit = _tag(page, "p-limit")
    assert 'type="number"' in limit and 'min="1"' in limit and 'max="500"' in limit
    assert 'step="1"' in limit and 'value="50"' in limit and " required" not in limit
    assert "How many entries" in page and "Which chart to read" in page
    assert 'aria-describedby="p-limit-help"' in limit
    safe = _tag(page, "p-safe")
    assert safe.startswith("<select") and 'data-kind="boolean"' in safe
    note = _tag(page, "p-note")
    assert 'minlength="2"' in note and 'maxlength="20"' in note and " required" in note
    ratio = _tag(page, "p-ratio")
    assert 'step="any"' in ratio and 'min="0.5"' in ratio
    assert _tag(page, "p-tags").startswith("<textarea")  # an array: a JSON value
    for name in ("chart", "limit", "safe", "note", "ratio", "tags"):
        assert f'<label for="p-{name}">' in page
    # Required members first (as `required` lists them), then the rest by name: the same
    # order on both stores (PostgreSQL's jsonb does not keep member order).
    order = re.findall(r'data-name="([^"]+)"', page)
    assert order == ["chart", "note", "limit", "ratio", "safe", "tags"]
    assert 'id="json-form"' in page  # the JSON mode stays


def test_a_form_call_sends_the_typed_body_and_is_charged_once(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    _publish_rich(world)
    page = person.get(f"/listings/{RICH}").text
    form = _form(
        page,
        chart=json.dumps("manga"),
        limit="7",
        safe="false",
        note="hello",
        ratio="",
        tags='["a", "b"]',
    )
    done = person.post(f"/listings/{RICH}/versions/v1/call", form)
    assert done.status_code == 303, done.text[:3000]
    (sent,) = [json.loads(p) for sent in world.provider.payloads.values() for p in sent]
    assert sent == {
        "chart": "manga",
        "limit": 7,
        "safe": False,
        "note": "hello",
        "tags": ["a", "b"],
    }
    receipt = person.follow(done).text
    assert '<div class="tree">' in receipt
    assert '<span class="j-key">&#34;limit&#34;</span>: <span class="j-num">7</span>' in receipt
    assert '<span class="j-bool">false</span>' in receipt
    assert '<span class="j-str">&#34;manga&#34;</span>' in receipt
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 90


def test_the_servers_problem_details_are_shown_beside_their_fields(
    world: World, person: Browser, people: dict[str, str]
) -> None:
    _publish_rich(world)
    page = person.get(f"/listings/{RICH}").text
    # What the browser would have refused (its checks bypassed): the schema refuses it.
    bad = person.post(
        f"/listings/{RICH}/versions/v1/call",
        _form(page, chart=json.dumps("manga"), limit="501", note="x", safe="true"),
    )
    assert bad.status_code == 400
    assert "500" in field_error(bad, "p-limit")
    assert "short" in field_error(bad, "p-note")
    assert 'aria-invalid="true"' in _tag(bad.text, "p-limit")
    assert 'value="501"' in _tag(bad.text, "p-limit")  # what was typed stays
    assert "does not match" in field_error(bad, "call")
    # A required field left empty is named beside it.
    missing = person.post(
        f"/listings/{RICH}/versions/v1/call", _form(page, chart=json.dumps("manga"), note="")
    )
    assert missing.status_code == 400 and field_error(missing, "p-note") == "Required."
    # Text that is no number never reaches the invoke path.
    typo = person.post(
        f"/listings/{RICH}/versions/v1/call",
        _form(page, chart=json.dumps("manga"), note="ok", limit="ten", tags="[oops"),
    )
    assert typo.status_code == 400
    assert field_error(typo, "p-limit") == "Write a whole number."
    assert field_error(typo, "p-tags") == "Write a JSON value here."
    assert world.provider.executions.total() == 0
    with world.runtime.db.read() as session:
        assert ledger.balances(session, account_id=people[PERSON]).available == 100


def test_json_mode_errors_name_the_pointer_beside_the_body(world: World, person: Browser) -> None:
    _publish_rich(world)
    page = person.get(f"/listings/{RICH}").text
    key = re.search(r'id="json-form".*?name="idempotency_key" value="([^"]+)"', page, re.S)
    assert key
    bad = person.post(
        f"/listings/{RICH}/versions/v1/call",
        {"idempotency_key": key.group(1), "mode": "json", "body": '{"chart": "x", "note": "ok"}'},
    )
    assert bad.status_code == 400
    assert "/chart:" in field_error(bad, "body")
    assert '<details class="json-mode" open>' in bad.text


def test_the_same_call_as_curl_and_python_with_the_exact_version_and_a_fresh_key(
    world: World, person: Browser
) -> None:
    _publish_rich(world)
    page = person.get(f"/listings/{RICH}").text
    curl = _textarea(page, "copy-curl")
    python = _textarea(page, "copy-python")
    form_key = _form(page)["idempotency_key"]
    copy_key = re.search(r"Idempotency-Key: ([^']+)'", curl)
    assert copy_key and copy_key.group(1) != form_key
    assert f"http://testserver/v1/services/{RICH}/versions/v1:invoke" in curl
    assert '"Authorization: Bearer $MERCATO_API_KEY"' in curl
    assert curl.endswith("""-d '{"chart":"overall","limit":50,"safe":true}'""")
    assert curl.count("Idempotency-Key") == 1
    # The Python copy mints a key per run, so running an edited copy again is a new call.
    assert "idempotency_key=str(uuid.uuid4())" in python and copy_key.group(1) not in python
    assert 'mercato.invoke(\n        "acme.rich",\n        "v1",' in python
    assert '{"chart": "overall", "limit": 50, "safe": True},' in python
    compile(python, "copied.py", "exec")  # valid Python
    again = person.get(f"/listings/{RICH}").text
    assert _textarea(again, "copy-curl") != curl  # a fresh key on every page


def test_the_echo_listing_has_a_number_field_and_a_json_field(
    world: World, person: Browser
) -> None:
    page = person.get(f"/listings/{SERVICE}").text
    assert 'id="call-form"' in page  # acme.echo: n (integer) and tags (array)
    assert 'data-kind="integer"' in page and 'data-kind="json"' in page
