"""Ledger errors.

MercatoError
├── BadRequest
│   └── InvalidLedgerInput          INVALID_LEDGER_INPUT (400)
├── InsufficientPoints              INSUFFICIENT_POINTS (402)
├── NotFound
│   └── ReservationNotFound         RESERVATION_NOT_FOUND (404)
├── Conflict
│   ├── ReservationExists           RESERVATION_EXISTS (409)
│   ├── ReservationAlreadyResolved  RESERVATION_ALREADY_RESOLVED (409)
│   ├── ReservationNotSettled       RESERVATION_NOT_SETTLED (409)
│   │   └── ReservationAlreadyRefunded  RESERVATION_ALREADY_REFUNDED (409)
│   └── RefundBlocked               REFUND_BLOCKED (409)
└── LedgerInvariantViolated         LEDGER_INVARIANT_VIOLATED (500)
"""

from __future__ import annotations

from mercato.core.errors import BadRequest, Conflict, MercatoError, NotFound


class InvalidLedgerInput(BadRequest):
    code = "INVALID_LEDGER_INPUT"
    title = "Invalid ledger input"


class InsufficientPoints(MercatoError):
    code = "INSUFFICIENT_POINTS"
    status = 402
    title = "Not enough points"


class ReservationNotFound(NotFound):
    code = "RESERVATION_NOT_FOUND"
    title = "Reservation not found"


class ReservationExists(Conflict):
    code = "RESERVATION_EXISTS"
    title = "A reservation with this reference already exists"


class ReservationAlreadyResolved(Conflict):
    code = "RESERVATION_ALREADY_RESOLVED"
    title = "The reservation is already settled or released"


class ReservationNotSettled(Conflict):
    code = "RESERVATION_NOT_SETTLED"
    title = "Only a settled reservation can be refunded"


class ReservationAlreadyRefunded(ReservationNotSettled):
    code = "RESERVATION_ALREADY_REFUNDED"
    title = "The reservation is already refunded"


class RefundBlocked(Conflict):
    code = "REFUND_BLOCKED"
    title = "The refund cannot be posted now"


class LedgerInvariantViolated(MercatoError):
    """A posting would break an invariant that the ledger's own operations keep."""

    code = "LEDGER_INVARIANT_VIOLATED"
    title = "Ledger invariant violated"
