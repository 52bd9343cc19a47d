"""Catalog errors: stable codes for listings, versions, contracts and holds."""

from __future__ import annotations

from mercato.core.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    ValidationFailed,
)


class ListingNotFound(NotFound):
    code = "LISTING_NOT_FOUND"
    title = "No such listing"


class VersionNotFound(NotFound):
    code = "VERSION_NOT_FOUND"
    title = "No such version"


class HoldNotFound(NotFound):
    code = "HOLD_NOT_FOUND"
    title = "No such hold"


class ListingUnavailable(Forbidden):
    code = "LISTING_UNAVAILABLE"
    title = "The listing is not available"


class VersionImmutable(Conflict):
    code = "VERSION_IMMUTABLE"
    title = "A published version cannot change"


class VersionNumberTaken(Conflict):
    code = "VERSION_NUMBER_TAKEN"
    title = "The version number is already taken"


class ServiceCodeTaken(Conflict):
    code = "SERVICE_CODE_TAKEN"
    title = "The service code is already taken"


class HoldAlreadyReleased(Conflict):
    code = "HOLD_ALREADY_RELEASED"
    title = "The hold is already released"


class ConnectionNotApproved(Conflict):
    """Publishing needs an approved connection.

    409 because it is the publisher's state that is wrong; a call to a version whose connection
    lost approval is the providers domain's 503 PROVIDER_NOT_APPROVED instead.
    """

    code = "CONNECTION_NOT_APPROVED"
    title = "The provider connection is not approved"


class ConnectionMismatch(Conflict):
    code = "CONNECTION_MISMATCH"
    title = "The connection does not belong to the listing's owner"


class InvalidContract(ValidationFailed):
    code = "INVALID_CONTRACT"
    title = "The contract is not valid"


class InvalidServiceCode(ValidationFailed):
    code = "INVALID_SERVICE_CODE"
    title = "The service code is not valid"


class InvalidVersionLabel(ValidationFailed):
    code = "INVALID_VERSION_LABEL"
    title = "The version label is not valid"


class InvalidListing(ValidationFailed):
    code = "INVALID_LISTING"
    title = "The listing is not valid"


class InvalidPrice(ValidationFailed):
    code = "INVALID_PRICE"
    title = "The price is not valid"


class InvalidCursor(BadRequest):
    code = "INVALID_CURSOR"
    title = "The cursor is not valid"


class InvalidSearch(BadRequest):
    code = "INVALID_SEARCH"
    title = "The search is not valid"


class VersionStateConflict(Conflict):
    """A lifecycle step the version's current state does not allow (nothing changed)."""

    code = "VERSION_STATE_CONFLICT"
    title = "The version's state does not allow this"


class SelfReviewForbidden(Forbidden):
    """Staff reviewing or publishing a version of a listing their own account owns."""

    code = "SELF_REVIEW_FORBIDDEN"
    title = "Staff cannot review their own listing"


class InvalidReviewReason(ValidationFailed):
    code = "INVALID_REVIEW_REASON"
    title = "A reason is required"


class InvalidExample(ValidationFailed):
    code = "INVALID_EXAMPLE"
    title = "The version's example does not match its contract"
