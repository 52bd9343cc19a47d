"""Run the `mercato` command as `python -m mercato`."""

from mercato.cli.main import main

raise SystemExit(main())
