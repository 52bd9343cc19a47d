"""A seeded, reproducible fault simulation of the invocation engine (VOPR-lite).

`mercato simulate --seed N --steps N` drives the real platform (the ASGI app, the worker loops,
a real database) against a simulated provider behind an injected httpx transport, and checks the
money and idempotency invariants after every step and at quiescence. See docs/reliability.md.
"""
