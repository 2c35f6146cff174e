#!/usr/bin/env python3
"""Start or stop the test topologies (Redis Cluster and Sentinel, a NATS cluster, PgBouncer, a
PostgreSQL standby) on loopback ports: `scripts/topology.py up [NAME...]`, `scripts/topology.py down`.

The topologies themselves live in `anarchon_testkit.topology`, which the tests use too.
"""

import sys
from pathlib import Path

for src in ("anarchon-core", "anarchon-testkit"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / src / "src"))

from anarchon_testkit.topology import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
