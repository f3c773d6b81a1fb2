"""The ``ragtrail`` console script: the inspector needs libraries the host application does not
(click, rich, httpx, jinja2, msgspec: the ``cli`` extra). Without them the command says, in one
line, what to install instead of a traceback. ``python -m ragtrail`` and ``python -m ragtrail.cli``
run it too (for a venv that is not activated, where the script is not on PATH)."""

from __future__ import annotations

import importlib.util
import sys

CLI_LIBRARIES = ("click", "rich", "httpx", "jinja2", "msgspec")
EXIT_MISSING_EXTRA = 2  # a usage error: the install, not the trace, is what to fix


def missing_libraries() -> list[str]:
    """The inspector's libraries that are not installed here."""
    return [name for name in CLI_LIBRARIES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> None:
    """Run the inspector CLI, or say which extra to install."""
    missing = missing_libraries()
    if missing:
        sys.stderr.write(
            f"ragtrail: the ragtrail command needs the inspector's libraries ({', '.join(missing)} missing): pip install 'ragtrail[cli]'\n"
        )
        sys.exit(EXIT_MISSING_EXTRA)
    from ragtrail.cli.app import main as cli_main

    cli_main(argv)
