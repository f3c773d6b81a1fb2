"""The inspector knows only the wire contract: it imports ragtrail.contract.semconv, ragtrail.contract.receipts and
ragtrail.contract.columns (the column codec the recorder encodes through), the policy, checkpoint and
run-status rules the recorder applies too, never the recorder."""

from __future__ import annotations

import ast
from pathlib import Path

import ragtrail.inspect

ALLOWED = {
    "ragtrail.contract.semconv",
    "ragtrail.contract.receipts",
    "ragtrail.contract.columns",
    "ragtrail.contract.policy",
    "ragtrail.contract.checkpoints",
    "ragtrail.contract.run_status",
    "ragtrail",
}


def test_inspector_imports_only_contract_modules():
    root = Path(ragtrail.inspect.__file__).parent
    seen = set()
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("ragtrail"):
                names = {node.module} if node.module not in ("ragtrail", "ragtrail.contract") else {f"{node.module}.{a.name}" for a in node.names}
                seen |= names
                assert names <= ALLOWED, (path.name, names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("ragtrail") or alias.name in ALLOWED, (path.name, alias.name)
    assert seen == ALLOWED - {"ragtrail"}
