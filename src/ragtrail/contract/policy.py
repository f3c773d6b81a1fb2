"""A transform policy (issue 28, docs/semconv.md §8 "Transform policy"): which component may cite which
transform rule. A versioned JSON file, read by the recorder (``RAGTRAIL_TRANSFORM_POLICY``: its version
and digest go on the pipeline span) and by ``ragtrail verify --policy`` (a citation the policy does not
grant to the stage that made it is an alarm). Part of the contract so both sides parse and digest it
by the same rule.

The file::

    {"version": 3,
     "grants": [{"component": "exp.budget", "rules": ["budget_trim@1"]},
                {"component": "llama_index.*", "rules": ["metadata_header@1", "replace@1"]}]}

``component`` is a glob (``fnmatch``, case-sensitive) over ``ragtrail.stage.component``; a rule is
granted by its id (``budget_trim@1``) or by its family (``truncate@1`` grants ``truncate@1:<n>``).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragtrail.contract import semconv
from ragtrail.contract.receipts.canonical import canonical_json
from ragtrail.contract.receipts.stamp import sha256_hex

__all__ = ["Grant", "PolicyError", "TransformPolicy", "load_policy", "parse_policy"]


class PolicyError(ValueError):
    """A policy file that does not parse or does not have the policy's shape."""


@dataclass(frozen=True)
class Grant:
    """The rules one component glob may cite."""

    component: str
    rules: tuple[str, ...]

    def grants(self, component: str, rule: str) -> bool:
        return fnmatch.fnmatchcase(component, self.component) and any(rule == r or rule.startswith(r + ":") for r in self.rules)


@dataclass(frozen=True)
class TransformPolicy:
    """A parsed policy: its version, its grants and the sha256 of its canonical JSON (the digest the
    wire carries: the same policy however the file is laid out)."""

    version: int
    grants: tuple[Grant, ...]
    sha256: str

    def allows(self, component: str, rule: str) -> bool:
        """``component`` may cite ``rule`` under this policy."""
        return any(g.grants(component, rule) for g in self.grants)

    def attributes(self) -> dict[str, Any]:
        """What the pipeline span says of the policy it ran under."""
        return {semconv.POLICY_VERSION: self.version, semconv.POLICY_SHA256: self.sha256}


def _grant(item: Any) -> Grant:
    if not isinstance(item, dict) or not isinstance(item.get("component"), str):
        raise PolicyError("each grant is an object with a component (a glob) and rules (rule ids)")
    rules = item.get("rules")
    if not isinstance(rules, list) or not all(isinstance(r, str) and r for r in rules):
        raise PolicyError(f"grant {item['component']!r}: rules must be a list of rule ids")
    return Grant(item["component"], tuple(rules))


def parse_policy(data: bytes | str) -> TransformPolicy:
    """A policy from its file's bytes; :class:`PolicyError` when it is not one."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise PolicyError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PolicyError("a policy is a JSON object with version and grants")
    version = doc.get("version")
    if type(version) is not int or version < 1:
        raise PolicyError("version must be a whole number >= 1")
    grants = doc.get("grants")
    if not isinstance(grants, list):
        raise PolicyError("grants must be a list")
    return TransformPolicy(version, tuple(_grant(g) for g in grants), sha256_hex(canonical_json(doc).encode("utf-8")))


def load_policy(path: str | Path) -> TransformPolicy:
    """The policy in the file at ``path``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_policy(data)
