"""The ``ragtrail`` command (the inspector's CLI; it needs the ``cli`` extra).

- :mod:`~ragtrail.cli.console`: what every command shares (consoles, progress bar, JSON output, ``--source``);
- :mod:`~ragtrail.cli.one_trace`: ``show``, ``verify``, ``diff``, ``report``, ``demo``;
- :mod:`~ragtrail.cli.many_traces`: ``ls``, ``stats``, ``compare``;
- :mod:`~ragtrail.cli.gate`: ``gate run``, ``gate baseline``;
- :mod:`~ragtrail.cli.app`: the group assembled from them, and ``main``.

This package's own module imports nothing, so that ``python -m ragtrail.cli`` without the extra
reaches :func:`ragtrail.command.main`, which says in one line what to install.
"""
