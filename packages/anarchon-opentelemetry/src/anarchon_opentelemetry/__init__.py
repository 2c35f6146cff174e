"""anarchon-opentelemetry: an OpenTelemetry span for each run of every scheduler in the process.

Install it beside anarchon, and set up OpenTelemetry's SDK the way your app already does (the
`opentelemetry-instrument` launcher, or a `TracerProvider` with an exporter):

    pip install anarchon-opentelemetry

Nothing else is needed: the plugin is found through the `anarchon` entry-point group and traces with
the global tracer provider (`opentelemetry.trace.set_tracer_provider`). Without one, a run opens no
span and costs next to nothing; a provider set later, even after the schedulers started, traces the
runs that start from then on.

Each run on this instance is one span, named `run <job>` (a stored schedule's: `run <task>`), from the
handler's call to the run's release, with these attributes:

| attribute | value |
| --- | --- |
| `anarchon.job` | the job's name (a stored schedule's id) |
| `anarchon.task` | a stored schedule's task (absent for a code job) |
| `anarchon.slot` | the slot, epoch milliseconds (UTC) |
| `anarchon.attempt` | the attempt (2 or more after a handover or a takeover) |
| `anarchon.outcome` | `done`, `failed`, `handover` or `lost` (the lease was lost: not released) |
| `anarchon.namespace` | the scheduler's namespace |
| `anarchon.instance` | the id of the instance that ran it |

A failed run's span has status ERROR and records the handler's exception; a lost lease is an event
(`lease lost`, with its reason) on the span. While a coroutine handler runs, its run's span is the
current span, so spans the handler starts (an HTTP client's, a database driver's) are its children.
A plain function runs in a worker thread, where the span is not current: pass `trace.get_current_span()`
into it yourself if its spans should nest.

For a tracer provider other than the global one, block the default plugin and register your own:

    import anarchon
    from anarchon_opentelemetry import Tracing

    pm = anarchon.plugin_manager()
    pm.set_blocked("opentelemetry")
    pm.register(Tracing(tracer_provider=provider))
"""

from __future__ import annotations

from ._tracing import Tracing

__all__ = ["Tracing"]
