"""Scripts that run inside the sandbox.

Each module here is a stdlib-only Python 3.8+ program. ``_runtime`` holds
what every script shares (payload decoding, the result frame, the exit-code
table, atomic writes); an operation module defines ``OPS``, a mapping from an
operation name to a handler. :mod:`sandbox_sdk.protocol` ships a script as
``_runtime`` followed by one operation module, compressed, and runs it with
``python3 -I -S``. The modules are also importable here, so they are linted,
type-checked and unit-tested like the rest of the package.
"""
