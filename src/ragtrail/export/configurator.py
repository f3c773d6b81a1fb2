"""One switch for faithful export: the ragtrail sampler, the whole-trace processor and the right exporter.

Under ``opentelemetry-instrument`` (zero code)::

    OTEL_PYTHON_CONFIGURATOR=ragtrail opentelemetry-instrument python app.py

``OTEL_PYTHON_CONFIGURATOR`` is only needed when another configurator (e.g. ``opentelemetry-distro``)
is installed too; with ragtrail alone it is the one that runs. It configures the SDK exactly as the
stock configurator does (every ``OTEL_*`` variable keeps its meaning) with three changes:

* every span exporter is wrapped in :class:`~ragtrail.export.whole_trace.WholeTraceSpanProcessor`
  instead of ``BatchSpanProcessor`` (limits: ``RAGTRAIL_EXPORT_*``, see below);
* when ``OTEL_TRACES_SAMPLER`` is unset, the sampler is :class:`~ragtrail.sampling.RagtrailSampler`
  with probability ``OTEL_TRACES_SAMPLER_ARG`` (default 1.0); ``OTEL_TRACES_SAMPLER=ragtrail`` does the
  same explicitly, any other value is honoured as usual;
* when ``OTEL_TRACES_EXPORTER`` is unset, the exporter is OTLP if ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (protocol from ``OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL``,
  default ``http/protobuf`` as the OTel spec says), otherwise the local store (``ragtrail_file``:
  OTLP JSON lines under ``RAGTRAIL_LOCAL_STORE_DIR``, default ``./.ragtrail/``).
  ``OTEL_TRACES_EXPORTER=none`` exports nothing.
* when ``OTEL_METRICS_EXPORTER`` is unset and an OTLP endpoint is configured (``OTEL_EXPORTER_OTLP_ENDPOINT``
  or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``), ragtrail's metrics (counted before any sampling,
  docs/semconv.md §9) go there by OTLP too (protocol from ``OTEL_EXPORTER_OTLP[_METRICS]_PROTOCOL``):
  metrics go where the traces go. Without an endpoint there are none (the local store keeps traces
  only); ``OTEL_METRICS_EXPORTER`` set (``otlp``, ``console``, ``none`` ...) is honoured as usual.

Every stock OTLP span exporter (HTTP or gRPC, however it was configured) encodes its requests with
ragtrail's encoder (:mod:`ragtrail.export.otlp_encode`): the stock encoder's exact bytes, several times
faster, in chunks that yield the GIL; everything else is the stock exporter's own code.

Environment variables read by the export path (all optional):

=========================================  ==========  ==============================================
``RAGTRAIL_EXPORT_MAX_TRACES``             2048        trace segments buffered before the oldest drops
``RAGTRAIL_EXPORT_MAX_SPANS_PER_TRACE``    10000       a larger segment is dropped whole (and counted)
``RAGTRAIL_EXPORT_MAX_BYTES``              67108864    estimated bytes of buffered spans
``RAGTRAIL_EXPORT_GRACE_MILLIS``           500         wait for open children after the root ended
``RAGTRAIL_EXPORT_SCHEDULE_DELAY_MILLIS``  1000        longest a finished segment waits for a batch
``RAGTRAIL_EXPORT_MAX_BATCH_SPANS``        512         spans per export request
``RAGTRAIL_EXPORT_MAX_REQUEST_BYTES``      3145728     estimated bytes per request (gRPC refuses 4 MiB)
``RAGTRAIL_EXPORT_RETRY_TIMEOUT_MILLIS``   30000       retry a failed request with backoff this long
``RAGTRAIL_EXPORT_MAX_TRACE_AGE_MILLIS``   600000      drop (and count) segments whose root never ends
``RAGTRAIL_LOSS_REPORT_INTERVAL_MILLIS``   30000       how often a ``ragtrail.loss`` record may be sent
``RAGTRAIL_CHECKPOINT_PATH``               (none)      append checkpoints here (docs/semconv.md §10)
``RAGTRAIL_CHECKPOINT_ENDPOINT``           (none)      and/or POST them here
``RAGTRAIL_CHECKPOINT_EVERY_SEGMENTS``     1000        a checkpoint every N segment records
``RAGTRAIL_CHECKPOINT_EVERY_MILLIS``       60000       or this long after the first pending record
``RAGTRAIL_LOCAL_STORE_DIR``               .ragtrail   local store directory
``RAGTRAIL_LOCAL_STORE_MAX_FILE_BYTES``    16777216    rotate files at this size
``RAGTRAIL_LOCAL_STORE_MAX_TOTAL_BYTES``   268435456   delete the oldest files beyond this total
=========================================  ==========  ==============================================

In code, :func:`configure` builds and installs the same pipeline.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.environment_variables import OTEL_METRICS_EXPORTER, OTEL_TRACES_EXPORTER
from opentelemetry.sdk._configuration import _OTelSDKConfigurator
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler

from ragtrail.export.local_store import LocalStoreSpanExporter
from ragtrail.export.whole_trace import WholeTraceSpanProcessor, whole_trace_processor_factory
from ragtrail.sampling import RagtrailSampler, sampler_factory

_logger = logging.getLogger(__name__)

LOCAL_STORE_EXPORTER = "ragtrail_file"
_EXPORTER_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
DEFAULT_PROTOCOL = "http/protobuf"


def _otlp_protocol(protocol: str | None = None, signal_variable: str = OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) -> str:
    chosen = (protocol or os.environ.get(signal_variable) or os.environ.get(OTEL_EXPORTER_OTLP_PROTOCOL) or DEFAULT_PROTOCOL).strip()
    if chosen not in _EXPORTER_BY_PROTOCOL:
        raise ValueError(f"unsupported OTLP protocol {chosen!r}; use one of {sorted(_EXPORTER_BY_PROTOCOL)}")
    return chosen


def otlp_endpoint_configured() -> bool:
    return bool(os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT))


def default_trace_exporter_name() -> str:
    """``otlp_proto_http``/``otlp_proto_grpc`` when an OTLP endpoint is configured, else ``ragtrail_file``."""
    if otlp_endpoint_configured():
        return _EXPORTER_BY_PROTOCOL[_otlp_protocol()]
    return LOCAL_STORE_EXPORTER


def default_metric_exporter_names() -> list[str]:
    """``otlp_proto_http``/``otlp_proto_grpc`` when an OTLP endpoint is configured for metrics, else
    none: ragtrail's metrics go where its traces go, and the local store keeps traces only."""
    if os.environ.get(OTEL_EXPORTER_OTLP_METRICS_ENDPOINT) or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT):
        return [_EXPORTER_BY_PROTOCOL[_otlp_protocol(None, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL)]]
    return []


def default_sampler() -> Sampler:
    """The ragtrail sampler at ``OTEL_TRACES_SAMPLER_ARG`` (1.0 when unset)."""
    return sampler_factory(os.environ.get(OTEL_TRACES_SAMPLER_ARG))


_CONFIGURED = threading.Event()


def ragtrail_configured() -> bool:
    """True once ragtrail's configurator has set OpenTelemetry up in this process."""
    return _CONFIGURED.is_set()


class RagtrailConfigurator(_OTelSDKConfigurator):
    """``opentelemetry_configurator`` entry point ``ragtrail``: the stock SDK set-up with the whole-trace
    processor, the ragtrail sampler and the local store as defaults (see the module docstring)."""

    def _configure(self, **kwargs: Any) -> None:
        _CONFIGURED.set()  # export/setup_check.py: ragtrail's configurator ran (an exporter "none" is a choice, not a miss)
        if kwargs.get("sampler") is None and not os.environ.get(OTEL_TRACES_SAMPLER):
            try:
                kwargs["sampler"] = default_sampler()
            except ValueError as exc:
                _logger.warning("ragtrail: %s; sampling everything", exc)
                kwargs["sampler"] = RagtrailSampler(1.0)
        # the sampler is handed over so that checkpoints record the roots it drops as sampled out
        kwargs.setdefault("export_span_processor", whole_trace_processor_factory(sampler=kwargs.get("sampler")))
        if not os.environ.get(OTEL_TRACES_EXPORTER) and not kwargs.get("trace_exporter_names"):
            kwargs["trace_exporter_names"] = [default_trace_exporter_name()]
        if not os.environ.get(OTEL_METRICS_EXPORTER) and not kwargs.get("metric_exporter_names"):
            try:
                kwargs["metric_exporter_names"] = default_metric_exporter_names()
            except ValueError as exc:
                _logger.warning("ragtrail: %s; no metrics exported", exc)
        super()._configure(**kwargs)  # type: ignore[no-untyped-call]  # the SDK's method is unannotated


def _otlp_exporter(endpoint: str | None, protocol: str | None, headers: Mapping[str, str] | None) -> SpanExporter:
    chosen = _otlp_protocol(protocol)
    if chosen == "grpc":  # the stock exporters with ragtrail's (byte-identical, faster) encoder
        from ragtrail.export.otlp_grpc import RagtrailGrpcSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint, headers=dict(headers) if headers else None)
    from ragtrail.export.otlp_http import RagtrailHttpSpanExporter as HttpExporter

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, headers=headers)


def _otlp_metric_exporter(endpoint: str | None, protocol: str | None, headers: Mapping[str, str] | None) -> MetricExporter:
    """The stock OTLP metric exporter for where the traces go (an endpoint ending ``/v1/traces`` is
    the base URL's traces path: metrics go to its ``/v1/metrics``)."""
    chosen = _otlp_protocol(protocol, OTEL_EXPORTER_OTLP_METRICS_PROTOCOL)
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        return GrpcMetricExporter(endpoint=endpoint, headers=dict(headers) if headers else None)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter

    if endpoint is not None:
        base = endpoint.rstrip("/").removesuffix("/v1/traces").removesuffix("/v1/metrics")
        endpoint = base + "/v1/metrics"
    return HttpMetricExporter(endpoint=endpoint, headers=dict(headers) if headers else None)


def _install_meter_provider(
    otlp: bool, endpoint: str | None, protocol: str | None, headers: Mapping[str, str] | None, readers: Sequence[MetricReader], resource: Resource
) -> None:
    """Set the global MeterProvider the recorder counts its metrics through (OTLP when ``otlp``,
    plus ``readers``); a provider already set is kept, and said."""
    all_readers = list(readers)
    if otlp:
        all_readers.append(PeriodicExportingMetricReader(_otlp_metric_exporter(endpoint, protocol, headers)))
    if not all_readers:
        return
    provider = MeterProvider(metric_readers=all_readers, resource=resource)
    otel_metrics.set_meter_provider(provider)
    if otel_metrics.get_meter_provider() is not provider:
        provider.shutdown()
        _logger.warning("ragtrail.configure: a global MeterProvider was already set and was kept; ragtrail's metrics go through it")


def configure(
    *,
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    exporter: SpanExporter | None = None,
    sampling_probability: float | None = None,
    local_store_dir: str | os.PathLike[str] | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    span_limits: SpanLimits | None = None,
    processor_options: Mapping[str, Any] | None = None,
    set_global: bool = True,
    metrics: bool | None = None,
    metric_readers: Sequence[MetricReader] = (),
) -> TracerProvider:
    """Build a TracerProvider with the ragtrail sampler, the whole-trace processor and an exporter,
    install it as the global provider (unless ``set_global=False``) and return it.

    Exporter, first match wins: ``exporter``; OTLP to ``endpoint`` (a base URL such as
    ``http://localhost:4318``; ``protocol`` ``http/protobuf`` (default) or ``grpc``); OTLP to
    ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``; otherwise the local store in ``local_store_dir``
    (default ``RAGTRAIL_LOCAL_STORE_DIR`` or ``./.ragtrail``). ``sampling_probability`` defaults to
    ``OTEL_TRACES_SAMPLER_ARG`` when ``OTEL_TRACES_SAMPLER`` is unset or ``ragtrail``, else 1.0.
    ``processor_options`` are keyword arguments of :class:`WholeTraceSpanProcessor`.

    Metrics (counted before any sampling, docs/semconv.md §9), with ``set_global`` only (the recorder
    counts through the global MeterProvider): ``metrics=None`` (default) sends them by OTLP when the
    traces go by OTLP (``endpoint`` or the environment's), to the same place; ``True`` always (the
    OTLP exporter's own default endpoint when none is given); ``False`` never. ``metric_readers`` are
    added (a Prometheus reader, an in-memory one in tests).
    """
    if sampling_probability is None:
        ours = os.environ.get(OTEL_TRACES_SAMPLER, "ragtrail").strip() in ("", "ragtrail")
        sampler = default_sampler() if ours else RagtrailSampler(1.0)
    else:
        sampler = RagtrailSampler(sampling_probability)
    attributes: dict[str, Any] = dict(resource_attributes or {})
    if service_name:
        attributes[SERVICE_NAME] = service_name
    if exporter is None:
        if endpoint is not None or otlp_endpoint_configured():
            exporter = _otlp_exporter(endpoint, protocol, headers)
        else:
            exporter = LocalStoreSpanExporter(local_store_dir)
    otlp = endpoint is not None or otlp_endpoint_configured()
    resource = Resource.create(attributes)
    provider = TracerProvider(sampler=sampler, resource=resource, span_limits=span_limits)
    provider.add_span_processor(WholeTraceSpanProcessor(exporter, **{"sampler": sampler, **dict(processor_options or {})}))
    if set_global:
        _install_meter_provider(otlp if metrics is None else metrics, endpoint, protocol, headers, metric_readers, resource)
        trace.set_tracer_provider(provider)
        if trace.get_tracer_provider() is not provider:
            _logger.warning(
                "ragtrail.configure: a global TracerProvider was already set and was kept; "
                "pass the returned provider explicitly (tracer_provider=...)"
            )
    return provider


__all__ = [
    "ragtrail_configured",
    "RagtrailConfigurator",
    "configure",
    "default_metric_exporter_names",
    "default_trace_exporter_name",
    "default_sampler",
    "LOCAL_STORE_EXPORTER",
]
