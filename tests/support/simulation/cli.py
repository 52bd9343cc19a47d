"""`python tests/simulate.py`: the seeded fault simulation's command line (docs/reliability.md).

Test support, not part of the shipped package (decision 0256): it was `mercato simulate`.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from mercato.cli.output import emit
from support.simulation.bugs import BUGS
from support.simulation.runner import COMMAND, reproduce_command, run_simulation, summary


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description=(
            "Drive the real platform against a simulated faulty provider with crashes and clock "
            "jumps, checking the ledger and idempotency invariants after every step. The same "
            "seed always gives the same run."
        ),
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL server to create a scratch database on (dropped afterwards), or a "
        "new SQLite file; default: a temporary SQLite file",
    )
    parser.add_argument("--inject-bug", choices=BUGS, default=None, help="test-only: a known bug")
    parser.add_argument("--quiesce-every", type=int, default=250)
    parser.add_argument("--trace", action="store_true", help="print the whole trace")
    parser.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = parser()
    args = options.parse_args(argv)
    for name in ("steps", "quiesce_every"):
        if getattr(args, name) < 1:
            options.error(f"--{name.replace('_', '-')} must be at least 1")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # one line per provider call is noise here
    try:
        return _simulate(args)
    finally:
        root.setLevel(level)


def _simulate(args: argparse.Namespace) -> int:

    verdict = run_simulation(
        seed=args.seed,
        steps=args.steps,
        database_url=args.database_url,
        bug=args.inject_bug,
        quiesce_every=args.quiesce_every,
    )
    if args.json:
        emit(summary(verdict), as_json=True)
        return 0 if verdict.passed else 1
    if args.trace:
        print("\n".join(verdict.trace))
    stats = ", ".join(f"{k}={v}" for k, v in verdict.stats.items())
    head = (
        f"seed {verdict.seed}: {verdict.steps_run}/{verdict.steps} steps on {verdict.backend}"
        f"{' with bug ' + verdict.bug if verdict.bug else ''} in {verdict.seconds}s"
    )
    if verdict.passed:
        print(f"{head}: 0 invariant violations ({stats})")
        return 0
    first = verdict.violations[0]
    print(f"{head}: {len(verdict.violations)} invariant violation(s)")
    print(f"FAILED seed {verdict.seed} at step {first.step}: {first.invariant}: {first.detail}")
    for violation in verdict.violations[1:]:
        print(f"  also {violation.line()}")
    print("minimal trace:")
    print("\n".join(verdict.failure_trace))
    print(f"reproduce: {reproduce_command(verdict, args.database_url)}")
    return 1
