"""An example third-party anarchon lease backend: one MariaDB (or MySQL) table, one row per job.

    from anarchon import Scheduler

    scheduler = Scheduler.from_url("mariadb://app:secret@db:3306/app?table=anarchon_leases")

Every claim, renewal and release is one InnoDB transaction that locks the job's row
(`SELECT … FOR UPDATE`), reads the server's clock after the lock, and applies the core's lease
rules (`anarchon.backends.decide`, `decide_renew`, `decide_release`). Names are stored as
`VARBINARY`, so they compare byte-wise: MariaDB's default collations fold case and ignore
trailing spaces, which would make `report`, `Report` and `report ` one job. A deadlock victim or
a lost race to insert a job's first row is retried. `overlap="allow"` is refused (one row per job).
"""

from typing import TYPE_CHECKING

from anarchon.backends import lazy_exports

if TYPE_CHECKING:
    from ._backend import MariaDBBackend

__all__ = ["MariaDBBackend"]

# Every process that builds a Scheduler imports this package (its plugin module lives here), so the
# backend, and aiomysql with it, are imported on first use only.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {"MariaDBBackend": "_backend"})
