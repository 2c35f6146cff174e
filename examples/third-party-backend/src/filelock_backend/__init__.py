"""An example third-party anarchon backend: one JSON file guarded by an exclusive file lock.

Every process on one machine that opens the same file shares one store. It is claim-only
(capability `claim`, with `claim_many` for batches): one winner per (namespace, job, slot), forever.

    backend = FileLockBackend.from_url("filelock:///tmp/anarchon-claims.json")
"""

from ._backend import FileLockBackend

__all__ = ["FileLockBackend"]
