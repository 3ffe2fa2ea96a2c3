"""The bootstrap credentials check asked on every loopback request while no user or token exists: CPU µs per
call of the former path (an ORM read-only session around two EXISTS queries) against Accounts.any_credentials
(one driver statement on a read-only connection), measured alternately in one run on SQLite (median of 5 rounds
of 1,000 calls each)."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

from gpuslo.engine.services.accounts import Accounts
from gpuslo.engine.store import credentials
from gpuslo.engine.store.db import Database


def _cpu_us(check: Callable[[], bool], calls: int = 1000) -> float:
    start = time.process_time()
    for _ in range(calls):
        check()
    return (time.process_time() - start) / calls * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        database = Database(f"sqlite:///{folder}/b.db")
        database.upgrade()
        accounts = Accounts(database)

        def session_path() -> bool:
            with database.session(readonly=True) as session:
                return credentials.any_credentials(session)

        assert session_path() is False and accounts.any_credentials() is False
        old, new = [], []
        for _ in range(5):
            old.append(_cpu_us(session_path))
            new.append(_cpu_us(accounts.any_credentials))
        print(f"session + 2 EXISTS (before) {statistics.median(old):7.1f} CPU µs/call")
        print(f"driver statement (after)    {statistics.median(new):7.1f} CPU µs/call")
        print(f"ratio                       {statistics.median(old) / statistics.median(new):7.2f}x")
        database.dispose()


if __name__ == "__main__":
    main()
