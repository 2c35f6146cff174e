"""`Tracing`: a span per run, opened by `anarchon_run_started` and ended by `anarchon_run_finished`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from anarchon import JobContext, ReleaseOutcome, hookimpl

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["Tracing"]

logger = logging.getLogger("anarchon.opentelemetry")


class Tracing:
    """A span per run, through `tracer_provider` (the global one unless given)."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._provider = tracer_provider
        self._tracer: Tracer | None = None
        """The tracer, once it is known for good: the global provider's only once an app has set one."""
        self._open: dict[int, tuple[JobContext, Span, Any]] = {}
        """The span of each run in progress and its context token, by the run's context's id."""
        self._api: _Api | None = None

    def __repr__(self) -> str:
        return f"Tracing(tracer_provider={self._provider!r})"

    @property
    def open_spans(self) -> int:
        """How many runs have a span that is not ended yet (a run traced by a no-op tracer has none)."""
        return len(self._open)

    def _get_tracer(self) -> tuple[Tracer, _Api]:
        """The tracer of a run's span, and the API. Until an app sets a global provider, the global
        one's tracer is a no-op, and it is looked for again at each run, as OpenTelemetry's own proxy
        tracer does."""
        api = self._api
        if api is None:
            api = self._api = _Api()
            if self._provider is None:
                api.trace.get_tracer_provider()  # (loads the provider OTEL_PYTHON_TRACER_PROVIDER names)
        # The variable OpenTelemetry's proxy tracer reads at each span (`get_tracer_provider()` would
        # read the environment as well). Should a release rename it, every run takes the tracer
        # `get_tracer` returns, as before this shortcut.
        if self._provider is None and getattr(api.trace, "_TRACER_PROVIDER", _ABSENT) is None:
            return api.noop, api
        from anarchon import __version__

        self._tracer = api.trace.get_tracer("anarchon", __version__, tracer_provider=self._provider)
        return self._tracer, api

    @hookimpl
    def anarchon_run_started(self, ctx: JobContext) -> None:
        """Open the run's span and make it the current one in the run's task."""
        tracer, api = self._tracer, self._api
        if tracer is None or api is None:  # (the call only until both are known: this runs per run)
            tracer, api = self._get_tracer()
        if isinstance(tracer, api.noop_tracer) and isinstance(api.get_current_span(), api.non_recording):
            # A no-op tracer's span would be the current span itself (unless that one records, from
            # a provider of the app's own), and ending it, setting its attributes or making it
            # current again would change nothing: skip it all.
            return
        attributes: dict[str, str | int] = {
            "anarchon.job": ctx.name, "anarchon.slot": ctx.slot, "anarchon.attempt": ctx.attempt,
            "anarchon.namespace": ctx.namespace, "anarchon.instance": ctx.instance_id,
        }
        if ctx.task is not None:  # a stored schedule: its span is named by its task, not its id
            attributes["anarchon.task"] = ctx.task
        span = tracer.start_span(f"run {ctx.task or ctx.name}", kind=api.internal, attributes=attributes)
        token = api.context.attach(api.trace.set_span_in_context(span))
        self._open[id(ctx)] = (ctx, span, token)

    @hookimpl
    def anarchon_lease_lost(self, ctx: JobContext, reason: str) -> None:
        """Note the lost lease on the run's span."""
        entry = self._open.get(id(ctx))
        if entry is not None and entry[0] is ctx:
            entry[1].add_event("lease lost", {"reason": reason})

    @hookimpl
    def anarchon_run_finished(self, ctx: JobContext, outcome: ReleaseOutcome | None,
                              error: BaseException | None) -> None:
        """Set the outcome, record a failure, and end the span."""
        entry = self._open.pop(id(ctx), None)
        if entry is None or entry[0] is not ctx:
            return  # the handler was never called (a late lease that was gone), or no span was opened
        api = self._api
        assert api is not None  # (set by the run's start, which opened the span)
        _ctx, span, token = entry
        span.set_attribute("anarchon.outcome", "lost" if outcome is None else str(outcome))
        if outcome is ReleaseOutcome.FAILED:
            if error is not None:
                span.record_exception(error)
            span.set_status(api.trace.Status(api.trace.StatusCode.ERROR, _describe(error)))
        try:
            api.context.detach(token)
        except Exception:  # a handler that attached a context of its own and left it
            logger.debug("could not restore the context after %s's run", ctx.name, exc_info=True)
        span.end()




class _Api:
    """The parts of OpenTelemetry's API a run's span uses, imported once."""

    def __init__(self) -> None:
        from opentelemetry import context, trace

        self.context = context
        self.trace = trace
        self.internal = trace.SpanKind.INTERNAL
        self.noop_tracer = trace.NoOpTracer
        self.non_recording = trace.NonRecordingSpan
        self.noop = trace.NoOpTracer()
        self.get_current_span = trace.get_current_span


_ABSENT = object()


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "timeout"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
