"""The caller SDK's own tests: they need only the `mercato-client` distribution and pytest —
never the platform. `scripts/wheels` runs them in a virtual environment holding the built wheel
alone."""
