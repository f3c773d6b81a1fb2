"""The optional native package (native/ragtrail-encoder, module ``ragtrail_native``) for the tests that
pin it to its pure-Python reference: a failure in CI (``CI`` set: scripts/test.sh builds it), a skip
saying so elsewhere."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest


def native_module() -> Any:
    """``ragtrail_native``, or a loud skip (a failure in CI, where scripts/test.sh builds it)."""
    try:
        return importlib.import_module("ragtrail_native")
    except ImportError:
        message = "the native package (ragtrail_native) is not installed: pip install ./native/ragtrail-encoder"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
