"""Names chosen inside a sandbox, made safe to print on the user's terminal.

A file name (or a sandbox's id, status or label, or an error naming them)
comes from whoever controls the sandbox, and a terminal acts on some of
what it is sent: an escape sequence can set the window's title, clear the
screen or move the cursor, and a newline can forge a line of ``sbx``'s own.
Every such name the command prints goes through :func:`shown` first.
"""

from __future__ import annotations

#: The short escapes, as Python's ``repr`` and ``ls -b`` write them.
_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: str) -> str:
    """``text`` with every character a terminal could act on written as a
    visible escape, as ``ls -b`` and Python's ``repr`` do: C0 controls,
    DEL and C1 controls (``\\x1b``, ``\\x9b`` CSI), newlines, other
    characters that are not printable (line and paragraph separators,
    bidirectional overrides), bytes that were not UTF-8 (decoded as lone
    surrogates: ``\\xNN``, the byte), and the backslash itself, so that an
    escape shown is never ambiguous."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    if char.isprintable():
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
