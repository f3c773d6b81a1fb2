"""The optional native package (native/ragtrail-encoder, module ``ragtrail_native``): imported once
per process, and each of its functions handed out unless its part of ragtrail is switched off.

Every native function has a pure-Python reference it must equal (its tests pin them) and declines
(returns ``None``) what it does not handle, so the reference stays the fallback: the package only
makes ragtrail faster, never different. It is not a dependency: without it, nothing changes but speed.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Any

__all__ = ["function"]

_OFF = ("off", "0", "false", "no")


def _switched_off(env: str) -> bool:
    """Whether the variable ``env`` says ``off`` (or ``0``, ``false``, ``no``)."""
    return os.environ.get(env, "").strip().lower() in _OFF


@functools.cache
def _module() -> ModuleType | None:
    try:
        return importlib.import_module("ragtrail_native")
    except ImportError:
        return None


def function(name: str, env: str) -> Any | None:
    """``ragtrail_native.<name>``, or ``None`` when the package is not installed, was built without
    it (an older build), or ``env`` switches this part off."""
    if _switched_off(env):
        return None
    return getattr(_module(), name, None)
