"""The plugin the `anarchon` entry-point group names: spans through the global tracer provider.

Every process that builds a Scheduler loads this module, so it imports no OpenTelemetry: the tracer
is made on the first run.
"""

from __future__ import annotations

from ._tracing import Tracing

__all__ = ["tracing"]

tracing = Tracing()
"""The default plugin: its spans go to the global tracer provider."""
