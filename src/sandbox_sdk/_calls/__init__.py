"""The ``execute()`` round trips an operation yields, one class per way of
decoding the reply.

- :class:`ScriptCall` runs an operation of an in-sandbox script and decodes
  its result frame into ``(value, blobs)``; :class:`LazyScriptCall` leaves
  the blobs base64 until the caller takes them in.
- :class:`CommandCall` runs the user's command in a script (``run``): it
  gets the provider's default timeout, as ``execute`` does, and a response
  the provider cut at its timeout is its reply (``None``), not an error.

A call is typed by its reply: ``reply = yield from call`` inside an operation
yields the call to the driver and gives back the reply as the call's type
says. Each operation of a script is declared once below as a :class:`Script`
typed by the reply the script declares (the ``TypedDict`` s in
``remote/<module>.py``), so ``mypy`` checks every field an operation reads.
The operation's name picks the module that runs it.

The package is split by concern: :mod:`.calls` (the call types and each
script operation declared as a :class:`Script`), :mod:`.replies` (replies
decoded into the SDK's models) and :mod:`.shell_grep` (grep by GNU grep in
the sandbox's shell).
"""

from __future__ import annotations

from sandbox_sdk._calls.calls import (
    ABORT,
    APPEND_BLOCK,
    APPENDED_MARKER,
    ARCHIVE_EXTRACTED,
    CREATE_ARCHIVE,
    DELETE,
    EDIT,
    EDITED,
    EXTRACT_ARCHIVE,
    FEED,
    FOLLOW,
    FORGET,
    GET_MANY,
    GLOB,
    GREP,
    LANDED,
    LS,
    MKDIR,
    PROCESSES,
    PUT_MANY,
    READ,
    READ_CHUNK,
    REPLACE_TREE,
    RESIZE,
    RUN,
    SETTLE_MANY,
    SIGNAL,
    SPAWN,
    STAGE,
    STAT,
    WRITE,
    AppendCall,
    Call,
    CommandCall,
    LazyScriptCall,
    Reply,
    Script,
    ScriptCall,
    check_command,
)
from sandbox_sdk._calls.replies import (
    FILE_INFOS,
    FILE_TYPES,
    FS_ENCODING,
    FS_ERRORS,
    NANOSECONDS,
    TYPE_BITS,
    file_info,
    glob_result,
    grep_result,
    listing,
)
from sandbox_sdk._calls.shell_grep import (
    SHELL_GREP_FALLBACK_MARKER,
    SHELL_GREP_MARKER,
    SHELL_GREP_VALUE_BYTES,
    ShellGrepCall,
    printf_escapes,
    sed_unescaped,
    walk_key,
    walk_keys,
)

__all__ = [
    "ABORT",
    "APPENDED_MARKER",
    "APPEND_BLOCK",
    "ARCHIVE_EXTRACTED",
    "CREATE_ARCHIVE",
    "DELETE",
    "EDIT",
    "EDITED",
    "EXTRACT_ARCHIVE",
    "FEED",
    "FILE_INFOS",
    "FILE_TYPES",
    "FOLLOW",
    "FORGET",
    "FS_ENCODING",
    "FS_ERRORS",
    "GET_MANY",
    "GLOB",
    "GREP",
    "LANDED",
    "LS",
    "MKDIR",
    "NANOSECONDS",
    "PROCESSES",
    "PUT_MANY",
    "READ",
    "READ_CHUNK",
    "REPLACE_TREE",
    "RESIZE",
    "RUN",
    "SETTLE_MANY",
    "SHELL_GREP_FALLBACK_MARKER",
    "SHELL_GREP_MARKER",
    "SHELL_GREP_VALUE_BYTES",
    "SIGNAL",
    "SPAWN",
    "STAGE",
    "STAT",
    "TYPE_BITS",
    "WRITE",
    "AppendCall",
    "Call",
    "CommandCall",
    "LazyScriptCall",
    "Reply",
    "Script",
    "ScriptCall",
    "ShellGrepCall",
    "check_command",
    "file_info",
    "glob_result",
    "grep_result",
    "listing",
    "printf_escapes",
    "sed_unescaped",
    "walk_key",
    "walk_keys",
]
