"""``python -m ragtrail.cli``: the ``ragtrail`` command (see :mod:`ragtrail.command`)."""

from ragtrail.command import main

if __name__ == "__main__":
    main()
