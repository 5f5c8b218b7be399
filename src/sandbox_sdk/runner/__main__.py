"""``python -m sandbox_sdk.runner``; see :mod:`sandbox_sdk.runner.cli`."""

from sandbox_sdk.runner.cli import main

if __name__ == "__main__":  # a worker process imports this module too (multiprocessing)
    raise SystemExit(main())
