"""Producer checkpoints (issue 28, docs/semconv.md §10): the chain rules, encode and decode side by side.

No trace can show its own absence: whoever runs the trace backend can delete whole traces (or, in
unkeyed mode, replace one with a re-stamped copy) and nothing inside the backend says so. The exporter
therefore keeps a hash chain over every trace segment it handled and writes *checkpoints* to a sink
that is not the backend (``RAGTRAIL_CHECKPOINT_PATH``, an append-only JSON-lines file, and optionally
``RAGTRAIL_CHECKPOINT_ENDPOINT``). ``ragtrail verify --checkpoints`` replays the chain and compares it
with what the backend holds. The exporter writes through :func:`checkpoint_line`, the inspector reads
through :func:`parse_checkpoint` and :func:`replay`: one module, so the two cannot drift.

A *record* is one segment's line in the chain, a short JSON array:

* ``["exported", trace_id, span_count, "r1 r2 …"]``: a segment was delivered; ``r*`` are the first
  :data:`RECEIPT_HEX` hex digits of each stage receipt (``ragtrail.stage.receipt``, the hex part of a
  keyed one) its spans carried, sorted, space-separated;
* ``["lost", trace_id, span_count, reason]``: the exporter gave the segment up and counted it
  (``ragtrail.loss.reason``: ``queue_full``, ``export_failed``, …);
* ``["sampled_out", trace_id]``: the head sampler dropped the trace's root; it was never exported.

``head(n) = sha256(head(n-1) + "\\n" + record_json)`` from :data:`GENESIS`, where ``record_json`` is
the record as :func:`record_json` writes it. A checkpoint carries the records since the previous one,
the head before and after them, counts and the time they cover, and, under a receipt key, an
HMAC-SHA256 over its canonical text (:func:`signed_text`) with the key's id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

FORMAT = "ragtrail.checkpoint"
VERSION = 1
GENESIS = "0" * 64
RECEIPT_HEX = 16  # 64 bits of each stage receipt: a second preimage costs 2**64 hashes per receipt
KIND_EXPORTED = "exported"
KIND_LOST = "lost"
KIND_SAMPLED_OUT = "sampled_out"
KINDS = (KIND_EXPORTED, KIND_LOST, KIND_SAMPLED_OUT)
MAC_PREFIX = "hmac-sha256:"
_KEY_ID_LABEL = b"ragtrail.checkpoint.key_id"

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
_CANONICAL = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, sort_keys=True).encode


class CheckpointError(ValueError):
    """A checkpoint line that does not parse, or a chain that does not hold."""


class Record(NamedTuple):
    """One segment's record: ``detail`` is the receipts (exported) or the reason (lost), ``""`` else."""

    kind: str
    trace_id: str
    spans: int = 0
    detail: str = ""


def receipt_part(receipt: Any) -> str | None:
    """The part of a stage receipt a record keeps: the first :data:`RECEIPT_HEX` hex digits of the
    digest (the algorithm prefix of a keyed receipt is left out); ``None`` for a value that is no receipt."""
    if not isinstance(receipt, str):
        return None
    digest = receipt.rpartition(":")[2]
    return digest[:RECEIPT_HEX] if len(digest) >= RECEIPT_HEX else None


def receipts_text(parts: Iterable[str]) -> str:
    """The receipts of a segment as a record holds them: sorted, space-separated (order-free)."""
    return " ".join(sorted(parts))


_PLAIN = re.compile(r"[ !#-\[\]-~]*\Z")  # printable ASCII but '"' and '\\': JSON writes it as it is


def record_json(record: Record) -> str:
    """The record's exact text in the chain and in the file: compact JSON (``,``/``:``, ASCII). Hex ids,
    receipts and reason codes need no escaping, so the worker writes them directly (the encoder's
    text, a third of its cost); anything else goes through the encoder."""
    kind, trace_id, spans, detail = record
    plain = kind in KINDS and _PLAIN.match(trace_id) is not None
    if kind == KIND_SAMPLED_OUT:
        return f'["{kind}","{trace_id}"]' if plain else _ENCODE([kind, trace_id])
    if plain and type(spans) is int and _PLAIN.match(detail) is not None:
        return f'["{kind}","{trace_id}",{spans},"{detail}"]'
    return _ENCODE([kind, trace_id, spans, detail])


def next_head(head: str, record_text: str) -> str:
    """One chain step: ``sha256(head + "\\n" + record_json)`` in hex."""
    return hashlib.sha256(f"{head}\n{record_text}".encode()).hexdigest()


def key_id(key: bytes) -> str:
    """A name for the receipt key that reveals nothing of it: HMAC(key, label), 16 hex digits."""
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


@dataclass
class Checkpoint:
    """One checkpoint line (see the module docstring); ``records`` are those since the previous one."""

    producer: str
    seq: int
    count: int
    prev: str
    head: str
    from_ns: int
    to_ns: int
    records: list[Record] = field(default_factory=list)
    lost_traces: int = 0  # the loss ledger's totals when the checkpoint was written
    lost_spans: int = 0
    final: bool = False
    key_id: str | None = None
    mac: str | None = None

    def body(self) -> dict[str, Any]:
        """Every field but ``mac``, as written."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "producer": self.producer,
            "seq": self.seq,
            "count": self.count,
            "prev": self.prev,
            "head": self.head,
            "from_ns": self.from_ns,
            "to_ns": self.to_ns,
            "lost_traces": self.lost_traces,
            "lost_spans": self.lost_spans,
            "final": self.final,
            "key_id": self.key_id,
            "records": [[r.kind, r.trace_id] if r.kind == KIND_SAMPLED_OUT else list(r) for r in self.records],
        }


def signed_text(body: dict[str, Any]) -> str:
    """What the MAC covers: the body as JSON with sorted keys and no spaces."""
    return _CANONICAL(body)


def mac_of(body: dict[str, Any], key: bytes) -> str:
    return MAC_PREFIX + hmac.new(key, signed_text(body).encode(), hashlib.sha256).hexdigest()


def checkpoint_line(checkpoint: Checkpoint, key: bytes | None) -> str:
    """The checkpoint as one JSON line (``\\n``-terminated), MAC'd when ``key`` is given."""
    if key is not None:
        checkpoint.key_id = key_id(key)
    body = checkpoint.body()
    if key is not None:
        checkpoint.mac = mac_of(body, key)
        body["mac"] = checkpoint.mac
    return _ENCODE(body) + "\n"


def _record(item: Any) -> Record:
    if not isinstance(item, list) or not item or item[0] not in KINDS or not isinstance(item[1] if len(item) > 1 else None, str):
        raise CheckpointError(f"a record is not one of {', '.join(KINDS)}: {str(item)[:80]}")
    if item[0] == KIND_SAMPLED_OUT:
        if len(item) != 2:
            raise CheckpointError(f"a sampled_out record has {len(item)} fields, not 2")
        return Record(item[0], item[1])
    if len(item) != 4 or not isinstance(item[2], int) or isinstance(item[2], bool) or not isinstance(item[3], str):
        raise CheckpointError(f"a {item[0]} record is not [kind, trace id, span count, text]: {str(item)[:80]}")
    return Record(item[0], item[1], item[2], item[3])


_INTS = ("seq", "count", "from_ns", "to_ns", "lost_traces", "lost_spans")
_HEXES = ("prev", "head")


def parse_checkpoint(text: str | bytes) -> tuple[Checkpoint, dict[str, Any]]:
    """A checkpoint line back into a :class:`Checkpoint` and its body (what the MAC covers);
    :class:`CheckpointError` when it is not one."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"not a {FORMAT} line")
    if data.get("version") != VERSION:
        raise CheckpointError(f"{FORMAT} version {data.get('version')!r}; this reader knows {VERSION}")
    bad = [k for k in _INTS if not isinstance(data.get(k), int) or isinstance(data.get(k), bool)]
    bad += [k for k in _HEXES if not (isinstance(data.get(k), str) and len(data[k]) == 64)]
    if bad or not isinstance(data.get("producer"), str) or not isinstance(data.get("records"), list):
        raise CheckpointError(f"fields missing or malformed: {', '.join(bad) or 'producer/records'}")
    mac = data.pop("mac", None)
    checkpoint = Checkpoint(
        producer=data["producer"],
        seq=data["seq"],
        count=data["count"],
        prev=data["prev"],
        head=data["head"],
        from_ns=data["from_ns"],
        to_ns=data["to_ns"],
        records=[_record(item) for item in data["records"]],
        lost_traces=data["lost_traces"],
        lost_spans=data["lost_spans"],
        final=data.get("final") is True,
        key_id=data.get("key_id") if isinstance(data.get("key_id"), str) else None,
        mac=mac if isinstance(mac, str) else None,
    )
    return checkpoint, data


def replay(checkpoints: Sequence[Checkpoint], bodies: Sequence[dict[str, Any]], key: bytes | None) -> None:
    """Check one producer's checkpoints, in ``seq`` order: consecutive numbers, each ``prev`` the
    previous ``head``, the head recomputed over the records, the count, and the MAC when ``key`` is
    given (a checkpoint without one, under a key, is an error). The first checkpoint may start
    anywhere (a file begun after a rotation). :class:`CheckpointError` names the first that fails."""
    previous: Checkpoint | None = None
    for checkpoint, body in zip(checkpoints, bodies, strict=True):
        where = f"producer {checkpoint.producer} checkpoint {checkpoint.seq}"
        if previous is not None:
            if checkpoint.seq != previous.seq + 1:
                raise CheckpointError(f"{where}: follows checkpoint {previous.seq} (a checkpoint is missing)")
            if checkpoint.prev != previous.head:
                raise CheckpointError(f"{where}: its prev is not checkpoint {previous.seq}'s head")
            if checkpoint.count != previous.count + len(checkpoint.records):
                raise CheckpointError(f"{where}: count {checkpoint.count} is not {previous.count} + {len(checkpoint.records)} records")
        head = checkpoint.prev
        for record in checkpoint.records:
            head = next_head(head, record_json(record))
        if head != checkpoint.head:
            raise CheckpointError(f"{where}: the records do not hash to its head (edited, or records removed)")
        if key is not None:
            if checkpoint.mac is None:
                raise CheckpointError(f"{where}: no MAC, but a key was given")
            if not hmac.compare_digest(checkpoint.mac, mac_of(body, key)):
                raise CheckpointError(f"{where}: the MAC does not match (another key, or the checkpoint was edited)")
        previous = checkpoint


__all__ = [
    "FORMAT",
    "GENESIS",
    "KINDS",
    "KIND_EXPORTED",
    "KIND_LOST",
    "KIND_SAMPLED_OUT",
    "MAC_PREFIX",
    "RECEIPT_HEX",
    "VERSION",
    "Checkpoint",
    "CheckpointError",
    "Record",
    "checkpoint_line",
    "key_id",
    "mac_of",
    "next_head",
    "parse_checkpoint",
    "receipt_part",
    "receipts_text",
    "record_json",
    "replay",
    "signed_text",
]
