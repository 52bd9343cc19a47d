"""The invocation engine's failpoints (announced through `runtime.armed`).

- `before-accept`: a fresh call's checks are done; its accept transaction is about to open.
- `after-accept`: the accept transaction has committed; nothing has been sent.
- `after-send`: the provider has answered (or failed); nothing has been recorded.
- `before-settle`: the deciding transaction has committed; the answer is not yet returned.
"""

from __future__ import annotations

BEFORE_ACCEPT = "before-accept"
AFTER_ACCEPT = "after-accept"
AFTER_SEND = "after-send"
BEFORE_SETTLE = "before-settle"

CRASH_POINTS = (AFTER_ACCEPT, AFTER_SEND, BEFORE_SETTLE)
"""The points at which the crash suite and the simulation kill the platform."""
