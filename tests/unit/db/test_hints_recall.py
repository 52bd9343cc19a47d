"""`Recall`: what one attempt of a call takes from the process's memory, when its end is a
divergence, and what it forgets then (decision 0570)."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError

from mercato.core.errors import BadRequest
from mercato.db.hints import Diverged, Hints, KeyHint, Recall


def _remembering() -> Hints:
    hints = Hints.empty()
    hints.keys.put("digest", KeyHint("principal", None), 7)
    hints.facts.put(("svc", "v1", "acct"), "facts", 7)
    return hints


def test_what_is_taken_is_unproven_until_a_read_proves_it() -> None:
    recall = Recall(_remembering())
    assert recall.key("digest") is not None
    assert recall.facts(("svc", "v1", "acct"), ("acct", "k")) == "facts"
    assert (recall.generation, recall.unproven, recall.proving()) == (7, True, "digest")
    assert recall.diverged(BadRequest("refused"))
    assert recall.diverged(IntegrityError("insert", {}, Exception("unique")))
    recall.proven()
    assert not recall.diverged(BadRequest("refused"))  # the call's own refusal now
    assert recall.diverged(Diverged())  # a stop always is one


def test_an_attempt_that_took_nothing_answers_its_refusals_itself() -> None:
    recall = Recall(_remembering())
    assert recall.key("another") is None
    assert not recall.diverged(BadRequest("refused"))
    assert recall.generation is None and recall.proving() is None


def test_the_uncached_attempt_takes_nothing_and_files_what_it_reads() -> None:
    hints = _remembering()
    recall = Recall(hints, recalling=False)
    assert recall.key("digest") is None
    assert recall.facts(("svc", "v1", "acct"), ("acct", "k")) is None
    assert recall.wants_generation()
    recall.saw(8)
    assert not recall.wants_generation()
    recall.file_key("digest", KeyHint("principal again", None))
    hints.keys.put("other", KeyHint("someone", None), 7)  # older than the memo now: dropped
    assert hints.keys.get("other") is None
    found = hints.keys.get("digest")
    assert found is not None and found[0].principal == "principal again" and found[1] == 8


def test_a_used_idempotency_key_reads_its_facts_first() -> None:
    hints = _remembering()
    hints.used.add(("acct", "k"))
    assert Recall(hints).facts(("svc", "v1", "acct"), ("acct", "k")) is None


def test_a_divergence_forgets_only_what_the_attempt_took() -> None:
    hints = _remembering()
    hints.keys.put("other", KeyHint("someone", None), 7)
    recall = Recall(hints)
    recall.key("digest")
    recall.facts(("svc", "v1", "acct"), ("acct", "k"))
    recall.forget()
    assert hints.keys.get("digest") is None and hints.facts.get(("svc", "v1", "acct")) is None
    assert hints.keys.get("other") is not None


def test_without_memory_nothing_is_taken_nor_filed() -> None:
    recall = Recall(None)
    assert recall.key("digest") is None and not recall.wants_generation()
    recall.file_key("digest", KeyHint("principal", None))
    recall.forget()
