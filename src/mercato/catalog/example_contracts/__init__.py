"""Packaged example contract inputs (JSON), read through mercato.catalog.examples."""
