"""anarchon's test rig: real replica processes on a real store, and the faults to put them through.

    from anarchon_testkit.cluster import Cluster, check_every_slot_once
    from anarchon_testkit.faultproxy import FaultProxy
    from anarchon_testkit.topology import RedisCluster

- `anarchon_testkit.cluster`: `Cluster` starts N replicas of `anarchon_testkit._replica` as OS
  processes on one store and reads their start logs; `check_every_slot_once`, `check_blocked_loops`,
  `check_controls`, `check_history` and `check_store_fault` are whole runs that a driver's tests call.
- `anarchon_testkit.chaos`: `python -m anarchon_testkit.chaos URL` kills, freezes and stops replicas at
  random, then checks every start against the guarantees.
- `anarchon_testkit.faultproxy`: `FaultProxy`, a loopback TCP proxy that injects latency,
  partitions, resets, refusals and black holes.
- `anarchon_testkit.topology`: Redis Cluster and Sentinel, a NATS cluster, PgBouncer and a PostgreSQL
  standby as processes on loopback ports, stopped by their own pids.

Testing your own jobs needs none of this: `anarchon.testing` (in anarchon-core) has the virtual clock
and the in-memory backends.
"""

from __future__ import annotations

__all__: list[str] = []
