"""``python -m ragtrail``: the ``ragtrail`` command when its console script is not on PATH (a venv that
is not activated); without the ``cli`` extra it says in one line what to install (:mod:`ragtrail.command`)."""

from ragtrail.command import main

if __name__ == "__main__":
    main()
