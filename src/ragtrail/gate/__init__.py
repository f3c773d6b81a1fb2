"""``ragtrail gate``: a retrieval regression gate for CI (see docs/gate.md)."""
