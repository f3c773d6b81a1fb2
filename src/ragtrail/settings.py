"""Every setting ragtrail reads, declared once with its default and parsed in one place.

Two groups, read at different moments on purpose:

- :class:`CaptureSettings` decides what the recorder may put on the wire. It is read from the
  environment once, on first use, and changed in code with :func:`set_capture`. Privacy is decided
  here and nowhere else: the recorder and the hooks ask its methods (``query_text_allowed``,
  ``content_for`` ...) instead of comparing mode strings themselves.
- The export and local-store bounds (:func:`export_limit`, :func:`local_store_bytes`) are read
  each time an exporter or processor is built, so a process can build two with different bounds.

A bad value is never raised into the host application: it is logged once and replaced by a safe
default (an unknown query mode means ``hash``, the most private one that still keeps a receipt).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from ragtrail.contract import semconv
from ragtrail.contract.policy import PolicyError, TransformPolicy, load_policy

_log = logging.getLogger("ragtrail")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_ALL = "all"  # RAGTRAIL_MIRROR_DOCUMENTS's "no cap"

# --- declarations: every variable once, with its default ------------------------------------------
DEFAULT_QUERY_MODE = "text"
DEFAULT_CONTENT_MODE = "off"
DEFAULT_VECTORSTORE_MAX_QUERIES = 1000

DEFAULT_LOCAL_STORE_DIRECTORY = ".ragtrail"
LOCAL_STORE_DEFAULTS: dict[str, int] = {
    semconv.ENV_LOCAL_STORE_MAX_FILE_BYTES: 16 * 1024 * 1024,
    semconv.ENV_LOCAL_STORE_MAX_TOTAL_BYTES: 256 * 1024 * 1024,
}
EXPORT_DEFAULTS: dict[str, int] = {
    semconv.ENV_EXPORT_MAX_TRACES: 2048,
    semconv.ENV_EXPORT_MAX_SPANS_PER_TRACE: 10_000,
    semconv.ENV_EXPORT_MAX_BYTES: 64 * 1024 * 1024,
    semconv.ENV_EXPORT_GRACE_MILLIS: 500,
    semconv.ENV_EXPORT_SCHEDULE_DELAY_MILLIS: 1000,
    semconv.ENV_EXPORT_MAX_BATCH_SPANS: 512,
    # under the 4 MiB that gRPC receivers accept by default, with room for the envelope
    semconv.ENV_EXPORT_MAX_REQUEST_BYTES: 3 * 1024 * 1024,
    semconv.ENV_EXPORT_RETRY_TIMEOUT_MILLIS: 30_000,
    semconv.ENV_EXPORT_MAX_TRACE_AGE_MILLIS: 600_000,
    semconv.ENV_LOSS_REPORT_INTERVAL_MILLIS: 30_000,
    semconv.ENV_CHECKPOINT_EVERY_SEGMENTS: 1000,
    semconv.ENV_CHECKPOINT_EVERY_MILLIS: 60_000,
}


# --- capture: what may leave the process ----------------------------------------------------------
@dataclass(frozen=True)
class CaptureSettings:
    """What the recorder captures. ``events_per_span`` caps ragtrail events on one span before they
    spill into continuation spans (``None``: derived from the SDK's own event limit).
    ``mirror_documents`` caps each mirrored document list (``None``: only the span's attribute room
    does): the mirrors repeat ragtrail's own columns, so a cap costs no evidence, only Phoenix cards."""

    query: str = DEFAULT_QUERY_MODE
    content: str = DEFAULT_CONTENT_MODE
    metadata: tuple[str, ...] = ()
    mirror_genai: bool = True
    mirror_openinference: bool = True
    mirror_documents: int | None = None
    events_per_span: int | None = None
    vectorstore_max_queries: int = DEFAULT_VECTORSTORE_MAX_QUERIES
    invalid: tuple[str, ...] = field(default=(), compare=False)

    # privacy decisions, asked by the recorder and the hooks (never re-derived from the mode strings)
    def query_text_allowed(self) -> bool:
        """The query text itself may be written (span attributes, events, names, messages)."""
        return self.query == "text"

    def query_receipt_allowed(self) -> bool:
        """A receipt of the query (or of a query vector) may be written: every mode but ``off``."""
        return self.query != "off"

    def query_receipt_key(self) -> bytes | None:
        """The key the query receipt is HMAC-ed with: the receipt key (``RAGTRAIL_RECEIPT_KEY``) in
        ``hash`` mode, where the text is not exported and an unkeyed sha256 would confirm a guessed
        question offline; ``None`` otherwise (``text`` mode exports the text itself; ``off`` no receipt)."""
        return receipt_key() if self.query_receipt_allowed() and not self.query_text_allowed() else None

    def exception_message_allowed(self) -> bool:
        """An exception's message (and the SDK's exception event) may be exported: a failing
        stage's message often quotes its query, so only where the query text itself may go."""
        return self.query_text_allowed()

    def free_text_allowed(self) -> bool:
        """A string of unknown kind (``exclude("...")`` naming no recorded candidate: an id, or a
        document's text) may be exported as it is: only while content capture is on."""
        return self.content != "off"

    def filter_for(self, canonical: str) -> str:
        """A store's filter (canonical JSON) as it may be exported: whole in ``text`` query mode
        (filters are often built from the query); in ``hash`` mode its keys and operators with every
        value replaced by ``sha256:<hex>`` of the value's canonical JSON (``hmac-sha256:<hex>`` under
        a receipt key: :meth:`query_receipt_key`); in ``off`` mode keys and
        operators only (every value ``null``). A filter that is not JSON is hashed whole, or left
        out (``null``)."""
        if self.query_text_allowed():
            return canonical
        from ragtrail.contract.receipts import canonical_json

        keep_values = self.query_receipt_allowed()
        mac_key = self.query_receipt_key()
        try:
            parsed = json.loads(canonical)
        except (TypeError, ValueError, RecursionError):
            return canonical_json(_redact_leaf(canonical, keep_values, mac_key))
        return canonical_json(_redact(parsed, keep_values, None, mac_key))

    def content_for(self, text: str) -> str | None:
        """The part of ``text`` that may be exported as content: ``None`` (receipts only), the
        preview (rule ``preview@1``) or all of it."""
        if self.content == "preview":
            from ragtrail.contract.receipts import preview

            return preview(text)
        if self.content == "full":
            return text
        return None

    def content_is_preview(self) -> bool:
        """Exported content is a cut under ``preview@1``, not the whole text."""
        return self.content == "preview"


# filter keys whose string values name a field, an operator or a combinator: the shape of the
# filter (Chroma's "$and"/"$contains" are keys already), never a value taken from the query
# (a value is kept only when it looks like one: a short name or operator, no spaces, no free text)
_FILTER_STRUCTURE_KEYS = frozenset({"key", "field", "operator", "op", "condition"})
_FILTER_STRUCTURE_VALUE = re.compile(r"[A-Za-z_$][\w.$-]{0,63}|[=!<>]{1,2}")


def _redact_leaf(value: object, keep: bool, mac_key: bytes | None = None) -> object:
    """One filter value: ``sha256:<hex>`` of its canonical JSON, ``hmac-sha256:<hex>`` under the
    query receipt's key (a guessed value is then not confirmed offline), or dropped."""
    if not keep:
        return None
    from ragtrail.contract.receipts import ALG_HMAC_SHA256, canonical_json

    data = canonical_json(value).encode("utf-8")
    if mac_key is not None:
        return f"{ALG_HMAC_SHA256}:{hmac.new(mac_key, data, hashlib.sha256).hexdigest()}"
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _redact(value: object, keep: bool, key: str | None = None, mac_key: bytes | None = None) -> object:
    """Keys and structure of a parsed filter, each value hashed (``keep``; keyed under ``mac_key``) or dropped."""
    if isinstance(value, dict):
        return {k: _redact(v, keep, k, mac_key) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, keep, None, mac_key) for v in value]
    if key in _FILTER_STRUCTURE_KEYS and isinstance(value, str) and _FILTER_STRUCTURE_VALUE.fullmatch(value):
        return value
    return _redact_leaf(value, keep, mac_key)


# kept for the name users and tests already import
CaptureConfig = CaptureSettings


def _flag(name: str, default: bool, invalid: list[str]) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    invalid.append(f"{name}={raw!r}")
    return default


def _choice(name: str, allowed: tuple[str, ...], default: str, invalid: list[str], unsafe: str) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in allowed:
        return value
    invalid.append(f"{name}={raw!r}")
    return unsafe


def _positive_int(name: str, default: int | None, invalid: list[str], *, floor: int = 1) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        invalid.append(f"{name}={raw!r}")
        return default
    if value < floor:
        invalid.append(f"{name}={raw!r}")
        return default
    return value


def _count_or_all(name: str, invalid: list[str]) -> int | None:
    """An integer >= 0, or ``None`` for unset or ``all``; an invalid value is reported and means ``None``
    (today's behaviour: the mirrors are cut only by the span's room)."""
    if os.environ.get(name, "").strip().lower() == _ALL:
        return None
    return _positive_int(name, None, invalid, floor=0)


def from_environment() -> CaptureSettings:
    """Build the capture settings from ``RAGTRAIL_CAPTURE_*`` and friends; bad values are logged
    once and replaced by a safe default (never raised into the app)."""
    invalid: list[str] = []
    query = _choice(
        semconv.ENV_CAPTURE_QUERY, semconv.CAPTURE_QUERY_MODES, DEFAULT_QUERY_MODE, invalid, unsafe="hash"
    )  # an unknown query mode must not leak text
    content = _choice(semconv.ENV_CAPTURE_CONTENT, semconv.CAPTURE_CONTENT_MODES, DEFAULT_CONTENT_MODE, invalid, unsafe=DEFAULT_CONTENT_MODE)
    metadata = tuple(k.strip() for k in os.environ.get(semconv.ENV_CAPTURE_METADATA, "").split(",") if k.strip())
    events_raw = os.environ.get(semconv.ENV_EVENTS_PER_SPAN, "").strip()
    events_per_span = None
    if events_raw:
        try:
            events_per_span = max(1, int(events_raw))
        except ValueError:
            invalid.append(f"{semconv.ENV_EVENTS_PER_SPAN}={events_raw!r}")
    max_queries = _positive_int(semconv.ENV_VECTORSTORE_MAX_QUERIES, DEFAULT_VECTORSTORE_MAX_QUERIES, invalid)
    settings = CaptureSettings(
        query=query,
        content=content,
        metadata=metadata,
        mirror_genai=_flag(semconv.ENV_MIRROR_GENAI, True, invalid),
        mirror_openinference=_flag(semconv.ENV_MIRROR_OPENINFERENCE, True, invalid),
        mirror_documents=_count_or_all(semconv.ENV_MIRROR_DOCUMENTS, invalid),
        events_per_span=events_per_span,
        vectorstore_max_queries=max_queries or DEFAULT_VECTORSTORE_MAX_QUERIES,
        invalid=tuple(invalid),
    )
    if invalid:
        _log.warning("ragtrail: ignoring invalid settings %s", ", ".join(invalid))
    return settings


_lock = threading.Lock()
_current: CaptureSettings | None = None


def get() -> CaptureSettings:
    """The capture settings in force (read from the environment on first use)."""
    global _current
    settings = _current
    if settings is None:
        with _lock:
            if _current is None:
                _current = from_environment()
            settings = _current
    return settings


def set_capture(
    *,
    query: str | None = None,
    content: str | None = None,
    metadata: list[str] | tuple[str, ...] | None = None,
    mirror_genai: bool | None = None,
    mirror_openinference: bool | None = None,
    mirror_documents: int | str | None = None,
    events_per_span: int | None = None,
    vectorstore_max_queries: int | None = None,
) -> CaptureSettings:
    """Change capture settings in code; unspecified settings keep their value (``mirror_documents``:
    an integer >= 0, or ``"all"`` for no cap). Raises ``ValueError`` on an unknown mode or a bad
    count: this is the app's own configuration call, not an instrumented path."""
    global _current
    if mirror_documents is not None and mirror_documents != _ALL and (type(mirror_documents) is not int or mirror_documents < 0):
        raise ValueError(f"mirror_documents must be an integer >= 0 or {_ALL!r}, not {mirror_documents!r}")
    if query is not None and query not in semconv.CAPTURE_QUERY_MODES:
        raise ValueError(f"query capture must be one of {semconv.CAPTURE_QUERY_MODES}, not {query!r}")
    if content is not None and content not in semconv.CAPTURE_CONTENT_MODES:
        raise ValueError(f"content capture must be one of {semconv.CAPTURE_CONTENT_MODES}, not {content!r}")
    with _lock:
        base = _current if _current is not None else from_environment()
        _current = replace(
            base,
            query=base.query if query is None else query,
            content=base.content if content is None else content,
            metadata=base.metadata if metadata is None else tuple(metadata),
            mirror_genai=base.mirror_genai if mirror_genai is None else mirror_genai,
            mirror_openinference=base.mirror_openinference if mirror_openinference is None else mirror_openinference,
            mirror_documents=(base.mirror_documents if mirror_documents is None else None if mirror_documents == _ALL else int(mirror_documents)),
            events_per_span=base.events_per_span if events_per_span is None else events_per_span,
            vectorstore_max_queries=(base.vectorstore_max_queries if vectorstore_max_queries is None else vectorstore_max_queries),
        )
        return _current


def reset() -> None:
    """Forget settings made in code and re-read the environment on next use (tests use this)."""
    global _current
    with _lock:
        _current = None


# --- export and local store: read when an exporter or processor is built ---------------------------
def _env_number(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(float(raw))
    except ValueError:
        _log.warning("ragtrail: ignoring %s=%r (not a number); using %s", name, raw, default)
        return default
    if value <= 0:
        _log.warning("ragtrail: ignoring %s=%r (must be > 0); using %s", name, raw, default)
        return default
    return value


def export_limit(env: str, value: float | None = None) -> int:
    """One ``RAGTRAIL_EXPORT_*`` bound: the keyword argument when given (it must be > 0: a bad
    argument in code raises), else the environment, else the declared default."""
    if value is not None:
        if value <= 0:
            raise ValueError(f"{env.lower()} must be > 0, got {value!r}")
        return int(value)
    return _env_number(env, EXPORT_DEFAULTS[env])


def local_store_bytes(env: str, value: int | None = None) -> int:
    """One ``RAGTRAIL_LOCAL_STORE_*_BYTES`` size: the argument when truthy, else the environment,
    else the declared default."""
    return value or _env_number(env, LOCAL_STORE_DEFAULTS[env])


def local_store_directory() -> Path:
    """``RAGTRAIL_LOCAL_STORE_DIR`` or ``./.ragtrail``."""
    return Path(os.environ.get(semconv.ENV_LOCAL_STORE_DIR) or DEFAULT_LOCAL_STORE_DIRECTORY)


# --- keyed receipts (docs/semconv.md "v2 changes") -------------------------------------------------
DEFAULT_RECEIPT_KEY: str | None = None  # unkeyed sha256 stage receipts


def receipt_key() -> bytes | None:
    """The key that makes stage receipts HMAC-SHA256 (``RAGTRAIL_RECEIPT_KEY``, its UTF-8 bytes), or
    ``None`` for unkeyed sha256. Read at each stage end, so a process can switch it; the key itself
    is never written to the wire. An empty value means no key."""
    value = os.environ.get(semconv.ENV_RECEIPT_KEY, DEFAULT_RECEIPT_KEY)
    return value.encode("utf-8") if value else None


def read_key_file(path: str | Path) -> bytes:
    """A key file as ``ragtrail verify --key-file`` reads it: its bytes, one trailing newline cut
    (so ``echo secret > key`` and ``RAGTRAIL_RECEIPT_KEY=secret`` are the same key)."""
    data = Path(path).read_bytes()
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data


# --- the transform policy (issue 28, docs/semconv.md §8) --------------------------------------------
_policy_cache: dict[tuple[str, int, int], TransformPolicy | None] = {}


def transform_policy() -> TransformPolicy | None:
    """The policy ``RAGTRAIL_TRANSFORM_POLICY`` names, or ``None`` (unset, unreadable or invalid: logged
    once, never raised into the host). Read again only when the file changes (path, mtime, size)."""
    path = os.environ.get(semconv.ENV_TRANSFORM_POLICY)
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        _log_policy_once((path, -1, -1), f"{semconv.ENV_TRANSFORM_POLICY}={path!r} cannot be read: {exc.strerror or exc}")
        return None
    where = (path, st.st_mtime_ns, st.st_size)
    if where not in _policy_cache:
        try:
            _policy_cache[where] = load_policy(path)
        except PolicyError as exc:
            _log_policy_once(where, f"{semconv.ENV_TRANSFORM_POLICY}={path!r} is not a transform policy ({exc}): no policy recorded")
    return _policy_cache.get(where)


def _log_policy_once(where: tuple[str, int, int], message: str) -> None:
    if where not in _policy_cache:
        _policy_cache[where] = None
        _log.warning("ragtrail: %s", message)


def transform_policy_attributes() -> dict[str, object]:
    """The pipeline span's ``ragtrail.policy.version`` and ``.sha256`` (nothing without a policy)."""
    policy = transform_policy()
    return policy.attributes() if policy is not None else {}
