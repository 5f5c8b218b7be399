"""Run a shell command in the foreground, its stdout and stderr kept apart.

One round trip: the command's two streams come back as two blobs, with the
order in which their pieces arrived (``[stream, length]`` runs, stream 0
stdout and 1 stderr), cut at the output budget. The script enforces the
timeout itself (exit 124, ``timed_out``), so what the command printed before
it is kept.

The command runs in a process group of its own led by a *guard* (see
``guard`` in the runtime): when this script is killed (the provider's
timeout, a cancelled call), the guard kills the command and everything it
started.
"""

from __future__ import annotations

import posix

from sandbox_sdk.remote._runtime import (
    ORDER_ENTRY_BYTES,
    TYPE_CHECKING,
    Pumps,
    child_wakeups,
    deadline_of,
    guard,
    launch,
    prepare,
)

if TYPE_CHECKING:
    from typing import List, Tuple, TypedDict

    from sandbox_sdk.remote._runtime import Args, Blobs

    #: ``[stream, length]`` runs of the merged output, stream 0 stdout, 1 stderr.
    Order = List[List[int]]

    class RunReply(TypedDict):
        exit_code: int
        timed_out: bool
        truncated: bool
        order: Order


def run(args: Args, blobs: Blobs) -> Tuple[RunReply, Blobs]:
    program, env, stdin = prepare(args, blobs)
    room = int(args["budget"])
    keep_r, keep_w = posix.pipe()
    group = guard(keep_r, keep_w)
    out_r, out_w = posix.pipe()
    err_r, err_w = posix.pipe()
    wake = child_wakeups()
    pid = launch(program, env, [stdin, out_w, err_w], group)
    for fd in (stdin, out_w, err_w):
        posix.close(fd)
    pumps = Pumps(pid, [out_r, err_r], wake, deadline_of(args))
    kept = [bytearray(), bytearray()]
    order = []  # type: Order
    truncated = False
    for stream, data in pumps.pieces():
        if truncated:
            continue  # read and dropped, so the command never blocks on a full pipe
        if not order or order[-1][0] != stream:
            room -= ORDER_ENTRY_BYTES
            order.append([stream, 0])
        piece = data[: max(0, room)]
        truncated = len(piece) < len(data)
        kept[stream] += piece
        order[-1][1] += len(piece)
        room -= len(piece)
    code = pumps.finish(group)
    posix.close(keep_w)
    reply = {
        "exit_code": code,
        "timed_out": pumps.timed_out,
        "truncated": truncated,
        "order": order,
    }  # type: RunReply
    return reply, [bytes(kept[0]), bytes(kept[1])]


OPS = {"run": run}
