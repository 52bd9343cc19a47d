"""A version's examples judged against its contract (decision 0561), and the demo's own."""

from __future__ import annotations

from typing import Any

import pytest

from builders.catalog import example_contract
from mercato.catalog.contracts import build_contract
from mercato.catalog.errors import InvalidExample
from mercato.catalog.examples import daily_ranking_examples
from mercato.catalog.examples import example_contract as packaged_contract
from mercato.catalog.samples import check_examples


def _document(**changes: Any) -> dict[str, Any]:
    contract = example_contract(artifactContract=None, **changes)
    return build_contract(contract, service_code="acme.tool", version="v1").document


def test_the_demo_example_matches_the_demo_contract() -> None:
    built = build_contract(packaged_contract(), service_code="pixiv.daily-ranking", version="v1")
    examples = daily_ranking_examples()
    assert check_examples(examples, built.document) == examples
    assert all(e["request"]["chart"] in ("overall", "illust", "manga") for e in examples)


def test_none_stays_none() -> None:
    assert check_examples(None, _document()) is None


@pytest.mark.parametrize(
    ("examples", "pointer"),
    [
        ([], "/examples"),
        ({"request": {}, "result": {}}, "/examples"),
        ([{"request": {"chart": "manga"}}], "/examples/0"),
        ([{"request": {"chart": "weekly"}, "result": {"a": 1}}], "/examples/0/request/chart"),
        ([{"request": {"chart": "manga"}, "result": "text"}], "/examples/0/result"),
        (
            [{"request": {"chart": "manga", "big": 2**60}, "result": {"a": 1}}],
            "/examples/0/request",
        ),
    ],
)
def test_what_the_contract_refuses_is_refused_with_its_pointer(examples: Any, pointer: str) -> None:
    with pytest.raises(InvalidExample) as refused:
        check_examples(examples, _document())
    assert refused.value.extra["errors"][0]["pointer"] == pointer


def test_a_result_over_the_response_limit_is_refused() -> None:
    document = _document(responseMaxBytes=1024)
    big = [{"request": {"chart": "manga"}, "result": {"pad": "x" * 2000}}]
    with pytest.raises(InvalidExample, match="allows 1024"):
        check_examples(big, document)
