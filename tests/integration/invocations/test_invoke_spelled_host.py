"""An invoke to a connection stored with a spelled host sends nothing (issue 39 item 3).

A row written before the spelling rule (put in directly here): the serve process's async client
judges the stored base URL and the host yarl would dial before any connect, so the scripted
provider on 127.0.0.1 never sees the call nor the connection's credential, even where private
addresses are allowed (the world runs as dev does).
"""

from __future__ import annotations

import pytest
from sqlalchemy import update

from builders.invocation_world import World
from mercato.providers.models import ProviderConnection


@pytest.mark.parametrize("host", ["１２７.０.０.１", "127。0。0。1", "0x7f.1", "127.0.0.1."])
def test_an_invoke_to_a_stored_spelled_host_reaches_nobody(world: World, host: str) -> None:
    port = world.provider.url.rsplit(":", 1)[1]
    with world.runtime.db.transaction() as session:
        session.execute(update(ProviderConnection).values(base_url=f"http://{host}:{port}"))
    answer = world.invoke({"n": 1}, key="spelled")
    assert answer.status_code != 200, answer.text
    assert sum(world.provider.executions.values()) == 0
    assert world.provider.seen_headers == []
    assert world.earnings() == 0
