"""OpenTelemetry tracing, off unless configured (docs/telemetry.md).

`Telemetry.from_env()` returns None unless the standard variables ask for traces: an exporter
named in `OTEL_TRACES_EXPORTER` (other than `none`), or an OTLP endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true`
turns it off whatever else is set. Then, and only then, opentelemetry is imported, a tracer
provider made (its sampler, batch processor, exporter and resource read their own `OTEL_*`
variables) and the service traced at three places:

- every HTTP request and WebSocket: a server span from opentelemetry-instrumentation-asgi's
  middleware around the whole app (the express lane of lean routes included), named by the
  route's pattern (`POST /v1/sessions/{session}/items`, `http.route`) found with the app's own
  route table, not the raw path; its per-message receive/send spans are left out;
- every command of the memory (`ledgermem.<command>`) and every group the runner appends
  (`ledgermem.append`: seq range, records, commands, items), through the memory's tracing hook
  (sections/runtime/tracing.py), so that no package below this one imports opentelemetry;
- context assembly's span carries the query and one event per injected observation (rank,
  method, score), read from the durable `context.assembled` record.

Without a configuration nothing here is imported beyond this module and the memory's hook stays
None: the service starts, and runs, without the `otel` extra installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from eventstore.record import Record
from sections.runtime.tracing import append_attributes, describe

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer
    from starlette.types import ASGIApp

_ON_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SERVICE_NAME = "ledgermem"  # unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (the module's docstring)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = _exporter_names(environ)
    if exporters is not None:
        return bool(exporters)
    return any(environ.get(name, "").strip() for name in _ON_ENDPOINTS)


def _exporter_names(environ: Mapping[str, str]) -> list[str] | None:
    """OTEL_TRACES_EXPORTER as a list without `none` (None when the variable is unset)."""
    value = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not value:
        return None
    return [n for n in (p.strip().lower() for p in value.split(",")) if n and n != "none"]


class Telemetry:
    """A tracer provider and what the service hooks into it."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import trace

        self.provider = provider
        self.tracer = trace.get_tracer("ledgermem", tracer_provider=provider)
        self.tracing = OtelTracing(self.tracer)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Telemetry | None:
        """None unless `configured`; then a provider exporting as the variables say. A missing
        `otel` extra is said on stderr and leaves tracing off: the service still starts."""
        if not configured(environ):
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            print(
                f"tracing is configured (OTEL_*) but not installed ({exc.name}): "
                "install ledgermem[otel]; running without traces",
                file=sys.stderr,
                flush=True,
            )
            return None
        named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        provider = TracerProvider(
            resource=Resource.create({} if named else {"service.name": SERVICE_NAME})
        )
        for exporter in _exporters(_exporter_names(environ) or ["otlp"], environ):
            provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider)

    def instrument(self, app: ASGIApp) -> ASGIApp:
        """`app` inside the ASGI server-span middleware."""
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
        from opentelemetry.util.http import get_excluded_urls

        return OpenTelemetryMiddleware(
            app,
            # OTEL_PYTHON_ASGI_EXCLUDED_URLS (or OTEL_PYTHON_EXCLUDED_URLS): e.g. "healthz,metrics"
            excluded_urls=get_excluded_urls("ASGI"),
            tracer_provider=self.provider,
            default_span_details=route_details(app),
            exclude_spans=["receive", "send"],
        )

    def shutdown(self) -> None:
        """Export what is left (the batch processor's queue) and stop."""
        self.provider.shutdown()


def _exporters(names: list[str], environ: Mapping[str, str]) -> list:
    """The exporters OTEL_TRACES_EXPORTER names: `otlp` (over OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL,
    `http/protobuf` by default as the specification says, `grpc` if its exporter is installed)
    and `console`. Each exporter reads its endpoint, headers, timeout and compression itself."""
    out: list = []  # exporters of whichever OTLP transports are installed
    for name in names:
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf"
            ).strip()
            if protocol == "grpc":
                try:
                    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                        OTLPSpanExporter as GrpcSpanExporter,
                    )
                except ImportError:
                    raise ValueError(
                        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs "
                        "opentelemetry-exporter-otlp-proto-grpc installed; or use http/protobuf"
                    ) from None
                out.append(GrpcSpanExporter())
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                out.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            out.append(ConsoleSpanExporter())
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console)")
    return out


def route_details(app: object) -> Callable[[dict[str, Any]], tuple[str, dict[str, str]]]:
    """The server span's name and `http.route` from the app's route table (streams/web/routing.py:
    the raw path's route, as the router will find it), so that a span is named by its pattern,
    never by ids in the path. A path no route matches gets the method alone."""

    def details(scope: dict[str, Any]) -> tuple[str, dict[str, str]]:
        method = scope.get("method", "")
        table = getattr(getattr(app, "router", None), "table", None)
        if table is not None:
            websocket = scope["type"] == "websocket"
            for _, route, _ in table.candidates(scope):
                if route.websocket == websocket and (websocket or method in route.endpoints):
                    name = route.pattern if websocket else f"{method} {route.pattern}"
                    return name, {"http.route": route.pattern}
        return method or scope["type"], {}

    return details


class OtelTracing:
    """The memory's tracing hook (sections/runtime/tracing.py `Tracing`) on an OpenTelemetry tracer."""

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode

        self._tracer = tracer
        self._context = context
        self._set_span = trace.set_span_in_context
        self._error = Status(StatusCode.ERROR)

    def command(self, name: str, tenant: str, session: str | None) -> _CommandScope:
        attributes = {"ledgermem.command": name, "ledgermem.tenant": tenant}
        if session is not None:
            attributes["ledgermem.session"] = session
        return _CommandScope(self, name, attributes)

    def append(
        self, records: list[Record], commands: int
    ) -> Callable[[BaseException | None], None]:
        span = self._tracer.start_span("ledgermem.append")
        if span.is_recording():  # not when sampled out: then the span costs next to nothing
            span.set_attributes(append_attributes(records, commands))

        def end(error: BaseException | None) -> None:
            if error is not None:
                self.failed(span, error)
            span.end()

        return end

    def failed(self, span: Span, error: BaseException) -> None:
        span.record_exception(error)
        span.set_status(self._error)


class _CommandScope:
    """A command's span, current while the command runs (the runner's `with`)."""

    __slots__ = ("_owner", "_command", "_attributes", "_span", "_token")

    def __init__(self, owner: OtelTracing, command: str, attributes: dict) -> None:
        self._owner = owner
        self._command = command
        self._attributes = attributes

    def __enter__(self) -> _CommandScope:
        owner = self._owner
        name = f"ledgermem.{self._command}"
        self._span = owner._tracer.start_span(name, attributes=self._attributes)
        self._token = owner._context.attach(owner._set_span(self._span))
        return self

    def done(self, result: object) -> None:
        span = self._span
        if not span.is_recording():
            return
        attributes, events = describe(self._command, result)
        if attributes:
            span.set_attributes(attributes)
        for name, event in events:
            span.add_event(name, event)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if error is not None:
            self._owner.failed(self._span, error)
        self._owner._context.detach(self._token)
        self._span.end()
