"""The provider SDK's own tests: they need only the `mercato-provider` distribution (with its
`postgres` extra for the PostgreSQL variants), pytest and hypothesis — never the platform.
`scripts/wheels` runs them in a virtual environment holding the built wheel alone."""
