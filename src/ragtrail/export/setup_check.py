"""Says at start-up, once and plainly, when OpenTelemetry was set up without what ragtrail needs (issue 26).

``opentelemetry-instrument`` loads ONE configurator. With ``opentelemetry-distro`` installed (as
``opentelemetry-bootstrap`` users have it) that is the distro's unless ``OTEL_PYTHON_CONFIGURATOR=ragtrail``
is set, and the only word is "Configuration of ragtrail not loaded, configurator already loaded". The
provider it builds has neither ragtrail's sampler (so traces carry no sampling record and ``ragtrail
stats`` can only count each once) nor whole-trace export (so a tail sampler may see a trace in parts).
Neither can be added to a provider afterwards without double export or a private attribute, so this
check says what is missing and how to fix it instead.

It runs as an ``opentelemetry_instrumentor`` entry point with no library dependency
(``ragtrail_setup_check``): ``opentelemetry-instrument`` calls it after the configurator, whatever
libraries are installed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined, unused-ignore]
from opentelemetry.sdk.trace import TracerProvider

from ragtrail.export.configurator import ragtrail_configured
from ragtrail.export.whole_trace import any_live
from ragtrail.sampling import RagtrailSampler

_logger = logging.getLogger(__name__)
_said = threading.Event()

FIX = "set OTEL_PYTHON_CONFIGURATOR=ragtrail (or call ragtrail.configure() before the app starts)"


def missing(provider: Any = None) -> list[str]:
    """What the global (or given) SDK tracer provider lacks for ragtrail; [] when nothing, or when no
    SDK provider is set (then nothing is recorded, and nothing is wrongly weighted)."""
    provider = provider if provider is not None else trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider) or ragtrail_configured():
        return []
    out = []
    if not isinstance(provider.sampler, RagtrailSampler):
        out.append(
            f"ragtrail's sampler (the sampler is {provider.sampler.get_description()}: traces carry no sampling record, stats counts each once)"
        )
    if not any_live():
        out.append("whole-trace export (a tail sampler may see a trace in parts)")
    return out


def check(provider: Any = None) -> str | None:
    """Log the warning once per process when something is missing; return it (``None`` otherwise)."""
    lacking = missing(provider)
    if not lacking or _said.is_set():
        return None
    _said.set()
    message = "ragtrail: OpenTelemetry was set up by another configurator (opentelemetry-distro's?), without " + "; without ".join(lacking)
    message += f". Fix: {FIX}."
    _logger.warning(message)
    return message


class SetupCheckInstrumentor(BaseInstrumentor):  # type: ignore[misc, unused-ignore]  # OTel's base is untyped (Any) for mypy
    """Instruments nothing: checks the provider the configurator built (see the module docstring)."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        check(kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        return None


__all__ = ["FIX", "SetupCheckInstrumentor", "check", "missing"]
