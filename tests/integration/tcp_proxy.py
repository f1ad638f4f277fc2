"""A TCP proxy on 127.0.0.1 whose forwarding can be paused: a network partition between
one side and a server, for fault tests. While paused, connections stay open and bytes wait
in both directions (as on a link that stopped carrying them); resumed, they flow again."""

from __future__ import annotations

import selectors
import socket
import threading


class PausableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="proxy-accept", daemon=True)]
        self._threads[0].start()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        self._listener.close()
        for t in self._threads:
            t.join(timeout=5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            t = threading.Thread(target=self._pump, args=(client, server), name="proxy-pump", daemon=True)
            self._threads.append(t)
            t.start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peer = {a: b, b: a}
        with selectors.DefaultSelector() as sel:
            for s in peer:
                sel.register(s, selectors.EVENT_READ)
            try:
                while not self._closed.is_set():
                    self._flowing.wait()
                    for key, _ in sel.select(timeout=0.1):
                        self._flowing.wait()  # read now, forward only once flowing again
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        peer[key.fileobj].sendall(data)  # type: ignore[index]
            except OSError:
                return
            finally:
                a.close()
                b.close()
