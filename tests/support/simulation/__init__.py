"""A seeded, reproducible fault simulation of the invocation engine (VOPR-lite).

`python tests/simulate.py --seed N --steps N` drives the real platform (the ASGI app and the async
invocation engine, the worker loops, a real database) on one event loop, through a Runtime it
builds (fake clock and sleeps, seeded random and ids, raising or interleaving failpoints, an async
provider client over a simulated provider), and checks the money and idempotency invariants
after every step and at quiescence. See docs/reliability.md. Test
support only: nothing here ships in the `mercato` package (decision 0256).
"""
