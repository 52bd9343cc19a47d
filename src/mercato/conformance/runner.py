"""Run the nine checks against one connection target: network only, no database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mercato.conformance.checks import CHECKS, CheckRun, Probe, meaningless_payload, new_key
from mercato.providers.schemas import CheckVerdict, DispatchTarget

# Generous for a meaningless payload; responses past it are not conformant anyway.
CONFORMANCE_MAX_BYTES = 262_144
REDACTED = "[redacted]"


@dataclass(frozen=True, slots=True)
class ConformanceReport:
    """The nine verdicts in check order; `passed` only when all nine passed."""

    checks: list[CheckVerdict]

    @property
    def passed(self) -> bool:
        return len(self.checks) == len(CHECKS) and all(c.status == "passed" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "checks": [check.to_json() for check in self.checks]}


def run_conformance(
    client: Probe,
    target: DispatchTarget,
    *,
    timeout: float | None = None,
    max_bytes: int = CONFORMANCE_MAX_BYTES,
) -> ConformanceReport:
    """Make the conformance calls (keys prefixed `platform-conformance:`) and judge them."""
    run = CheckRun(
        probe=client,
        target=target,
        max_bytes=max_bytes,
        timeout=timeout,
        key=new_key(),
        payload=meaningless_payload(),
        other_payload=meaningless_payload(),
    )
    verdicts = [check(run) for check in CHECKS]
    return ConformanceReport([_redacted(v, target.credential) for v in verdicts])


def _redacted(verdict: CheckVerdict, secret: str) -> CheckVerdict:
    """Belt and braces: evidence holds no provider text that could echo the credential back."""
    return CheckVerdict(
        verdict.position, verdict.name, verdict.status, _scrub(verdict.detail, secret)
    )


def _scrub(value: Any, secret: str) -> Any:
    if isinstance(value, str):
        return value.replace(secret, REDACTED) if secret else value
    if isinstance(value, dict):
        return {_scrub(k, secret): _scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(item, secret) for item in value]
    return value
