"""
A Unix-socket proxy between a client and emberd that breaks connections on
purpose, for the tests of reattach: it relays each connection and closes it
after `cut` bytes from emberd; it can also refuse new connections (accept
and close at once) or stall them (accept, relay nothing, answer nothing).
"""

import socket
import threading

__all__ = ["CuttingProxy", "RELAY", "REFUSE", "STALL"]

RELAY, REFUSE, STALL = "relay", "refuse", "stall"


class CuttingProxy:
    """A proxy on `path` to emberd's socket `target`.

    cut: bytes from emberd after which a connection is closed both ways
    (None: never).  mode: how a new connection is met, RELAY, REFUSE or
    STALL; after_cut: the mode to take at the first cut, before the client
    sees it (so that its first reconnect already meets it).  Counts:
    `connections` accepted, `cuts` made, `refused`, `stalled`.
    """

    def __init__(self, target, path, cut=None, mode=RELAY, after_cut=None):
        self.target, self.path, self.cut = target, path, cut
        self.mode, self.after_cut = mode, after_cut
        self.connections = self.cuts = self.refused = self.stalled = 0
        self.held = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                mode = self.mode
                if mode == REFUSE:
                    self.refused += 1
                elif mode == STALL:
                    self.stalled += 1
                    self.held.append(client)
            if mode == REFUSE:
                client.close()
            elif mode == RELAY:
                threading.Thread(target=self._relay, args=(client,),
                                 daemon=True).start()

    def _relay(self, client):
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(self.target)
        except OSError:
            up.close()
            client.close()
            return

        def upward():
            try:
                while True:
                    data = client.recv(65536)
                    if not data:
                        break
                    up.sendall(data)
            except OSError:
                pass
            try:
                up.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        threading.Thread(target=upward, daemon=True).start()
        sent = 0
        cut = self.cut
        try:
            while cut is None or sent < cut:
                want = 65536 if cut is None else min(65536, cut - sent)
                data = up.recv(want)
                if not data:
                    break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        if cut is not None and sent >= cut:
            with self.lock:
                self.cuts += 1
                if self.after_cut is not None:
                    self.mode, self.after_cut = self.after_cut, None
        for s in (client, up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        """Stop accepting (new connections are refused by the kernel);
        connections held by STALL are closed."""
        try:
            # Wakes the accept() under way, which would keep listening.
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            for s in self.held:
                s.close()
            self.held = []
