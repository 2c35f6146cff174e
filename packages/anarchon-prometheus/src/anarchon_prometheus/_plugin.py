"""The plugin the `anarchon` entry-point group names: metrics in prometheus_client's default registry.

Every process that builds a Scheduler loads this module, so it imports no prometheus_client: the
metrics are made on the first event.
"""

from __future__ import annotations

from ._metrics import Metrics

__all__ = ["metrics"]

metrics = Metrics()
"""The default plugin: its metrics live in `prometheus_client.REGISTRY`."""
