"""A TCP proxy that can cut one client off from a server, like a network partition.

Use case: each chaos worker reaches ZooKeeper through its own proxy, so a scenario can cut that
one worker off for longer than its session timeout while the process keeps running: the server
expires the session, the worker's lease must stop its pushes, and the partitions move.

States: forwarding → cut (:meth:`cut`: open connections stop forwarding in both directions, bytes
are held, new connections are accepted and held; neither side sees a close, as with a silent
network) → forwarding (:meth:`heal`: every connection from before is closed, so the client
reconnects and learns its session's fate from the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class NetSplit:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.upstream_port = upstream_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._open: asyncio.Event | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="netsplit", daemon=True)

    def start(self) -> NetSplit:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._client, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        self._conns.add(writer)
        try:
            await self._open.wait()
            if writer.is_closing():  # accepted during a cut and dropped by heal()
                return
            up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:
            self._conns.discard(writer)
            writer.close()
            return
        self._conns.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            self._conns.discard(w)
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        try:
            while data := await reader.read(65536):
                await self._open.wait()  # cut: hold the bytes
                if writer.is_closing():
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    def cut(self) -> None:
        def do() -> None:
            assert self._open is not None
            self._open.clear()

        self._loop.call_soon_threadsafe(do)

    def heal(self) -> None:
        async def do() -> None:
            assert self._open is not None
            for w in list(self._conns):
                w.close()
            self._conns.clear()
            self._open.set()

        asyncio.run_coroutine_threadsafe(do(), self._loop).result(10)

    def stop(self) -> None:
        async def do() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._conns):
                w.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(do(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
