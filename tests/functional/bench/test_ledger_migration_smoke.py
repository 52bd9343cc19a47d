"""The migration bench (`bench/ledger_migration.py`) still runs end to end: on each store, a
small store grown the way the ledger before 0022 wrote it, upgraded to the lean ledger and
downgraded again, reads the same before and after each step, and `verify-ledger` balances. No
timing is asserted: the benchmark is a tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from builders.stores import BACKENDS, PG_ADMIN_DSN

pytestmark = pytest.mark.functional

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("store", BACKENDS)
def test_the_migration_bench_finds_the_store_identical_and_balanced(
    store: str, postgres_template: object
) -> None:
    if store == "postgresql" and postgres_template is None:
        pytest.skip("PostgreSQL tier skipped: server not reachable")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "bench.ledger_migration", "--invocations", "2000"),
            *("--store", store, "--pg-admin-url", PG_ADMIN_DSN),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    report = json.loads(done.stdout)["stores"][store]

    assert report["invocations"] == 2000
    assert report["identical"] and report["differences"] == [], report
    assert report["verify_balanced"] and report["problems"] == []
    assert report["identical_after_downgrade"], report["downgrade_differences"]
    # every kind of call was written, and the upgrade removed the calls' transfers and entries
    assert set(report["calls"]) == {
        "settled",
        "released",
        "refunded",
        "staff_ok",
        "staff_fail",
        "held",
    }
    assert (
        report["rows_before"]["ledger_transfers"] > 2000 > report["rows_after"]["ledger_transfers"]
    )
    assert report["rows_after_downgrade"] == report["rows_before"]
    assert report["digests"]["receipts"][0] == report["rows_before"]["invocations"] == 2000
