"""Case errors (DESIGN.md §9). Codes are a contract: keep them exactly.

MercatoError
├── BadRequest
│   ├── InvalidCaseInput         INVALID_CASE_INPUT (400)
│   └── InvalidCursor            INVALID_CURSOR (400)
├── NotFound
│   └── CaseNotFound             CASE_NOT_FOUND (404)
└── Conflict
    ├── DisputeNotEligible       DISPUTE_NOT_ELIGIBLE (409)
    ├── DisputeAlreadyOpen       DISPUTE_ALREADY_OPEN (409)
    └── InvalidCaseTransition    INVALID_CASE_TRANSITION (409)
"""

from __future__ import annotations

from mercato.core.errors import BadRequest, Conflict, NotFound


class InvalidCaseInput(BadRequest):
    code = "INVALID_CASE_INPUT"
    title = "The case submission is not valid"


class InvalidCursor(BadRequest):
    code = "INVALID_CURSOR"
    title = "Invalid cursor"


class CaseNotFound(NotFound):
    code = "CASE_NOT_FOUND"
    title = "Case not found"


class DisputeNotEligible(Conflict):
    code = "DISPUTE_NOT_ELIGIBLE"
    title = "This call cannot be disputed"


class DisputeAlreadyOpen(Conflict):
    code = "DISPUTE_ALREADY_OPEN"
    title = "This call already has an open dispute"


class InvalidCaseTransition(Conflict):
    code = "INVALID_CASE_TRANSITION"
    title = "The case cannot take this decision"
