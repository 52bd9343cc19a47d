"""The settlement split as a plain function, for showing a provider what a call pays it.

The settle statement in `ledger.service` computes the same in SQL (`amount * bps // 10000`, the
provider leg rounded down, the remainder to the platform, DESIGN §2); a test settles real calls
and compares them with this function, so what a provider is shown is what it is paid.
"""

from __future__ import annotations

BPS_WHOLE = 10_000


def provider_leg(amount: int, share_bps: int) -> int:
    """The provider's points from a settled `amount` at `share_bps`, rounded down."""
    return amount * share_bps // BPS_WHOLE


def platform_leg(amount: int, share_bps: int) -> int:
    """The platform's points: the remainder, so the two legs add up to the amount."""
    return amount - provider_leg(amount, share_bps)
