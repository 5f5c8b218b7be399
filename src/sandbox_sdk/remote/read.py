"""Read a page of a text file by lines, exactly as stored."""

from __future__ import annotations

from sandbox_sdk.remote._runtime import TYPE_CHECKING, Fail, open_regular, path_arg

if TYPE_CHECKING:
    from typing import List, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    class ReadReply(TypedDict):
        """The page itself is the reply's one blob."""

        start_line: int  # 1-based
        end_line: int
        total_lines: int
        has_more: bool
        truncated: bool  # the page is one line cut to the budget


SNIFF_BYTES = 8192


def read(args: Args, blobs: Blobs) -> Tuple[ReadReply, Blobs]:
    path = path_arg(args)
    first = args["offset"]
    limit = args["limit"]
    budget = args["budget"]
    stop = None if limit is None else first + limit
    page: List[bytes] = []
    used = 0
    total = 0
    full = False
    truncated = False
    with open_regular(path) as f:
        if b"\0" in f.read(SNIFF_BYTES):
            raise Fail("NOT_TEXT", "file is binary (contains NUL bytes)", path)
        f.seek(0)
        for line in f:
            if total >= first and (stop is None or total < stop) and not full:
                if used + len(line) > budget:
                    full = True
                    if not page:
                        page.append(cut_utf8(line, budget))
                        truncated = True
                else:
                    page.append(line)
                    used += len(line)
            total += 1
    content = b"".join(page)
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Fail("NOT_TEXT", "file is not valid UTF-8 text (%s)" % exc.reason, path) from None
    end = first + len(page)
    # The page travels as a frame blob: inside the JSON body it would be
    # base64-encoded twice and overflow the output budget it was sized for.
    return {
        "start_line": first + 1,
        "end_line": end,
        "total_lines": total,
        "has_more": end < total,
        "truncated": truncated,
    }, [content]


def cut_utf8(line: bytes, size: int) -> bytes:
    """The longest prefix of ``line`` of at most ``size`` bytes that ends on a character boundary."""
    cut = line[:size]
    for drop in range(min(4, len(cut))):
        try:
            cut[: len(cut) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return cut[: len(cut) - drop]
    return cut


OPS = {"read": read}
