"""anarchon-prometheus: Prometheus metrics for every scheduler in the process.

Install it beside anarchon and expose prometheus_client's default registry the way your app already
does (`prometheus_client.start_http_server(9100)`, `make_asgi_app()`, django-prometheus, ...):

    pip install anarchon-prometheus

Nothing else is needed: the plugin is found through the `anarchon` entry-point group, and the first
event of any scheduler in the process creates these metrics in `prometheus_client.REGISTRY`:

| metric | type | labels |
| --- | --- | --- |
| `anarchon_runs_total` | counter | `namespace`, `job_name`, `outcome`: `done`, `failed`, `handover`, `lost` |
| `anarchon_takeovers_total` | counter | `namespace`, `job_name` |
| `anarchon_leases_lost_total` | counter | `namespace`, `job_name` |
| `anarchon_slots_skipped_total` | counter | `namespace`, `job_name` |
| `anarchon_slots_missed_total` | counter | `namespace`, `job_name` |
| `anarchon_last_success_timestamp_seconds` | gauge | `namespace`, `job_name` |
| `anarchon_run_duration_seconds` | histogram | `namespace`, `job_name` |
| `anarchon_claim_latency_seconds` | histogram | `namespace` |

Each replica counts what happened on it: sum over the replicas for the cluster's totals. A run counts
once, on the replica that ran it; a slot skipped because its older run still runs is counted by every
replica that claimed it. Slots that no replica ran are counted once, by the replica that found them
when it started (it won the job's next slot). The last-success gauge is this replica's: take the
`max` over the replicas. `job_name`, not `job`: Prometheus sets `job` on every scraped series itself.
A stored schedule's runs, takeovers and skips count under its task's name (`job_name` is the task),
not its id: a series per schedule would make a million series for a million customers.

For a registry of your own, block the default plugin and register one on that registry:

    import anarchon
    from prometheus_client import CollectorRegistry
    from anarchon_prometheus import Metrics

    registry = CollectorRegistry()
    pm = anarchon.plugin_manager()
    pm.set_blocked("prometheus")
    pm.register(Metrics(registry))
"""

from __future__ import annotations

from ._metrics import CLAIM_BUCKETS, RUN_BUCKETS, Metrics

__all__ = ["CLAIM_BUCKETS", "RUN_BUCKETS", "Metrics"]
