"""The call form of a version page, built from its request schema (decision 0233).

One field per top-level property of an object schema: an `enum` becomes a select, `integer` and
`number` a number input with the schema's `minimum`/`maximum`, `boolean` a yes/no select,
`string` a text input with `minLength`/`maxLength`; anything else (objects, arrays, unions the
form cannot express) a small JSON text area. `default` fills the field, `required` marks it,
`description` is its help. The browser checks what these attributes can say; the server reads
the fields back into a JSON body, and the version's schema (on the invoke path, as for the API)
stays the only judge. A schema the form cannot express at all leaves only the JSON mode.

Also here: the same call as one curl line and as `mercato.client` code, and the mapping of the
server's JSON-pointer problem details back to the fields they name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FIELD_PREFIX = "field:"
_KINDS = ("select", "integer", "number", "boolean", "text", "json")
_REQUIRED = re.compile(r"^'(?P<name>.+)' is a required property$")
_MAX_FIELDS = 50
_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,60}")


@dataclass(frozen=True)
class Option:
    value: str  # the option's value attribute: the enum member as JSON
    label: str


@dataclass(frozen=True)
class FormField:
    """One input of the call form, with everything the template and the reader need."""

    index: int
    name: str
    kind: str
    required: bool
    description: str = ""
    default: Any = None
    has_default: bool = False
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    options: tuple[Option, ...] = field(default_factory=tuple)

    @property
    def id(self) -> str:
        """`p-<name>` for a plain name, else `p-<position>` (never the same as a plain one)."""
        return f"p-{self.name}" if _PLAIN_NAME.fullmatch(self.name) else f"p-{self.index}"

    @property
    def input_name(self) -> str:
        return FIELD_PREFIX + self.name

    @property
    def initial(self) -> str:
        """The field's starting text: its default, or the first choice of a required enum."""
        if self.has_default:
            return self.text_of(self.default)
        if self.required and self.options:
            return self.options[0].value
        return ""

    def text_of(self, value: Any) -> str:
        """How a JSON value is written in this field."""
        if self.kind in ("select", "boolean"):
            return _as_json(value)
        if self.kind == "json":
            return _as_json(value)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    @property
    def limits(self) -> str:
        """Person-readable bounds for the help line."""
        parts = []
        if self.minimum is not None:
            parts.append(f"at least {_number_text(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"at most {_number_text(self.maximum)}")
        if self.min_length is not None:
            parts.append(f"at least {self.min_length} characters")
        if self.max_length is not None:
            parts.append(f"at most {self.max_length} characters")
        if self.has_default:
            parts.append(f"default {_as_json(self.default)}")
        return ", ".join(parts)


def _as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _types(spec: Mapping[str, Any]) -> tuple[set[str], bool]:
    """The schema's non-null types and whether null is allowed."""
    raw = spec.get("type")
    types = (
        {raw}
        if isinstance(raw, str)
        else {t for t in raw if isinstance(t, str)}
        if isinstance(raw, list)
        else set()
    )
    return types - {"null"}, "null" in types


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if math.isfinite(value) else None


def _length(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _field(index: int, name: str, spec: Any, required: bool) -> FormField:
    if not isinstance(spec, Mapping):
        spec = {}
    types, nullable = _types(spec)
    common: dict[str, Any] = {
        "index": index,
        "name": name,
        "required": required,
        "description": spec.get("description") if isinstance(spec.get("description"), str) else "",
        "has_default": "default" in spec,
        "default": spec.get("default"),
        "nullable": nullable,
    }
    if isinstance(spec.get("title"), str) and not common["description"]:
        common["description"] = spec["title"]
    enum = spec.get("enum")
    if isinstance(enum, list) and enum:
        options = tuple(
            Option(_as_json(v), v if isinstance(v, str) else _as_json(v)) for v in enum[:200]
        )
        return FormField(kind="select", options=options, **common)
    if len(types) == 1:
        (kind,) = types
        if kind in ("integer", "number"):
            return FormField(
                kind=kind,
                minimum=_number(spec.get("minimum")),
                maximum=_number(spec.get("maximum")),
                **common,
            )
        if kind == "boolean":
            options = (Option("true", "yes (true)"), Option("false", "no (false)"))
            return FormField(kind="boolean", options=options, **common)
        if kind == "string":
            return FormField(
                kind="text",
                min_length=_length(spec.get("minLength")),
                max_length=_length(spec.get("maxLength")),
                **common,
            )
    return FormField(kind="json", **common)


def form_fields(schema: Any) -> list[FormField] | None:
    """The form's fields, or None when the schema is not an object with properties."""
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties or len(properties) > _MAX_FIELDS:
        return None
    types, _ = _types(schema)
    if types and types != {"object"}:
        return None
    required = schema.get("required")
    listed = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    # PostgreSQL's jsonb does not keep an object's member order, so the order is made here:
    # the required members as `required` lists them (an array keeps its order), then the rest
    # by name. Both stores show the same form.
    names = [str(n) for n in properties]
    first = [n for n in dict.fromkeys(listed) if n in properties]
    order = first + sorted(n for n in names if n not in first)
    return [_field(i, name, properties[name], name in first) for i, name in enumerate(order)]


def initial_body(fields: list[FormField]) -> dict[str, Any]:
    """The body the untouched form sends: defaults, and the first choice of required selects."""
    body: dict[str, Any] = {}
    for f in fields:
        if f.has_default:
            body[f.name] = f.default
        elif f.required and f.options:
            body[f.name] = json.loads(f.options[0].value)
    return body


def read_form(
    fields: list[FormField], values: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON body from the posted fields, and a message per field (by input name) that
    could not be read.

    An empty field is left out of the body (the schema then applies its own default or says
    the member is required); only what the text cannot be at all is refused here."""
    body: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in fields:
        text = values.get(f.input_name, "")
        if text.strip() == "":
            continue
        if f.kind in ("select", "boolean", "json"):
            try:
                body[f.name] = json.loads(text)
            except ValueError:
                errors[f.input_name] = (
                    "Write a JSON value here." if f.kind == "json" else "Choose one."
                )
        elif f.kind == "integer":
            try:
                body[f.name] = int(text.strip())
            except ValueError:
                errors[f.input_name] = "Write a whole number."
        elif f.kind == "number":
            try:
                number = float(text.strip())
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                errors[f.input_name] = "Write a number."
            else:
                body[f.name] = int(number) if number.is_integer() and "." not in text else number
        else:
            body[f.name] = text
    return body, errors


def field_errors(
    problems: list[dict[str, Any]], fields: list[FormField] | None
) -> tuple[dict[str, str], list[str]]:
    """Problem details by the field (input name) they name (first path segment), and the rest."""
    names = {f.name for f in fields or []}
    by_field: dict[str, list[str]] = {}
    rest: list[str] = []
    for problem in problems:
        pointer = str(problem.get("pointer") or "")
        detail = str(problem.get("detail") or "")
        name = _unescape(pointer[1:].split("/", 1)[0]) if pointer.startswith("/") else None
        if name is None:
            match = _REQUIRED.match(detail)
            name = match.group("name") if match else None
            if name is not None and name in names:
                detail = "Required."
        if name is not None and name in names:
            by_field.setdefault(name, []).append(detail)
        else:
            rest.append(f"{pointer or '(body)'}: {detail}")
    return {FIELD_PREFIX + n: "\n".join(d) for n, d in by_field.items()}, rest


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


# --- the same call, for a terminal and for Python -------------------------------------------


def _shell(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def curl_line(base_url: str, service_code: str, version: str, key: str, body: Any) -> str:
    """One bash line; the API key comes from `$MERCATO_API_KEY` (mercato.js builds the same)."""
    endpoint = f"{base_url.rstrip('/')}/v1/services/{service_code}/versions/{version}:invoke"
    return " ".join(
        [
            "curl -sS -X POST",
            _shell(endpoint),
            '-H "Authorization: Bearer $MERCATO_API_KEY"',
            "-H",
            _shell(f"Idempotency-Key: {key}"),
            "-H",
            _shell("Content-Type: application/json"),
            "-d",
            _shell(_as_json(body)),
        ]
    )


def python_literal(value: Any) -> str:
    """A Python literal of a JSON value (mercato.js has the same function)."""
    if value is None:
        return "None"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return _as_json(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (
            f"{json.dumps(str(k), ensure_ascii=False)}: {python_literal(v)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    return "None"


def client_code(base_url: str, service_code: str, version: str, body: Any) -> str:
    """The call with `mercato.client`, reading the API key from `MERCATO_API_KEY`; each run
    mints its own Idempotency-Key, so an edited copy run again is a new call, not a reuse."""
    return "\n".join(
        [
            "import os",
            "import uuid",
            "",
            "from mercato.client import MercatoClient",
            "",
            f"with MercatoClient({json.dumps(base_url.rstrip('/'))}, "
            + 'os.environ["MERCATO_API_KEY"]) as mercato:',
            "    call = mercato.invoke(",
            f"        {json.dumps(service_code)},",
            f"        {json.dumps(version)},",
            f"        {python_literal(body)},",
            "        idempotency_key=str(uuid.uuid4()),  # new per run",
            "    )",
            "    print(call.invocation_id, call.result)",
        ]
    )
