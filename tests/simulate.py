"""Run the seeded fault simulation from a checkout: `python tests/simulate.py --seed N --steps N`.

Same options and output as the former `mercato simulate` (see docs/reliability.md).
"""

from __future__ import annotations

from support.simulation.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
