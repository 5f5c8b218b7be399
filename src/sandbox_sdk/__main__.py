"""``python -m sandbox_sdk``: the ``sbx`` command line."""

from sandbox_sdk.cli import main

if __name__ == "__main__":
    main()
