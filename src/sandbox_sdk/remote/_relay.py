"""Relay one TCP connection to a port inside the sandbox over stdin and stdout.

Run by the docker provider's ``expose_port`` as one exec per forwarded
connection (``python3 -I -S -c`` this source, with the port as argument):
the container may have no network of its own (``network_mode: none``), so
the only way to its loopback is a process inside it. It connects to
``127.0.0.1:PORT``, copies stdin to the socket (and ends the socket's
sending side at stdin's end: a client's half-close) and the socket to
stdout, and exits once the socket's receiving side ends (the server closed
it). A port nobody listens on exits 1 at once, saying why on stderr, so the
forwarded connection closes instead of hanging. Stdlib only, Python 3.8+.
"""

import os
import socket
import sys
import threading

CHUNK = 64 * 1024


def _inbound(conn: socket.socket) -> None:
    """stdin to the socket; at stdin's end, the socket's sending side ends."""
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main(argv: "list[str]") -> int:
    try:
        conn = socket.create_connection(("127.0.0.1", int(argv[1])))
    except OSError as exc:
        sys.stderr.write("relay: cannot connect to 127.0.0.1:%s: %s\n" % (argv[1], exc))
        return 1
    threading.Thread(target=_inbound, args=(conn,), daemon=True).start()
    try:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                return 0
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        return 1


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stderr.flush()
    os._exit(code)  # not waiting for the stdin thread, which may be blocked in a read
