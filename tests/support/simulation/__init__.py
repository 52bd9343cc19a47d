"""A seeded, reproducible fault simulation of the invocation engine (VOPR-lite).

`python tests/simulate.py --seed N --steps N` drives the real platform (the ASGI app, the worker
loops, a real database) through a Runtime it builds (fake clock, seeded random and ids, raising
failpoints, a provider client over a simulated provider's httpx transport), and checks the money
and idempotency invariants after every step and at quiescence. See docs/reliability.md. Test
support only: nothing here ships in the `mercato` package (decision 0256).
"""
