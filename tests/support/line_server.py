"""A real TCP line server and a source connector that reads it: for connections cut mid-run.

The server speaks a one-line protocol: the client sends ``FROM <n>\\n`` and gets
lines ``n .. total-1`` then ``END\\n``. The first ``cuts`` connections are closed
by the server after ``cut_after`` lines, as a database or an API gateway drops a
connection; later connections are served to the end.

:class:`LineServerSource` (one partition per server, offset ``{"line": next}``)
raises :class:`RetriableException` when its connection breaks and reconnects on
the next ``poll()`` from the last line it returned.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time

from airflow_copycat.connect import ConfigDef, ConfigType, Schema, SourceConnector, SourceRecord, SourceTask
from airflow_copycat.connect.errors import RetriableException


class LineServer:
    def __init__(self, total: int, *, cut_after: int = 0, cuts: int = 0, delay_s: float = 0.0):
        """``delay_s``: a pause before each line, for runs that must last a while."""
        self.total, self.cut_after, self.cuts_left, self.delay_s = total, cut_after, cuts, delay_s
        self.connections = 0
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                outer.connections += 1
                start = int(self.rfile.readline().split()[1])
                cut = outer.cuts_left > 0
                if cut:
                    outer.cuts_left -= 1
                for n in range(start, outer.total):
                    if cut and n - start >= outer.cut_after:
                        self.connection.shutdown(socket.SHUT_RDWR)  # the connection drops mid-stream
                        return
                    if outer.delay_s:
                        time.sleep(outer.delay_s)
                    self.wfile.write(f"line {n}\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"END\n")

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def __enter__(self):
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


class LineServerSource(SourceConnector):
    config_def = ConfigDef().define("port", ConfigType.INT).define("topic", ConfigType.STRING)

    def partitions(self):
        return [{"server": f"127.0.0.1:{self.config['port']}"}]

    def exactly_once_support(self, config):
        return True

    def task_class(self):
        return LineServerTask


class LineServerTask(SourceTask):
    def start(self, config):
        self.port, self.topic = int(config["port"]), config["topic"]
        self.partition = {"server": f"127.0.0.1:{self.port}"}
        offset = self.context.offset_storage_reader.offset(self.partition)
        self.next = offset["line"] if offset else 0
        self.reader = None
        self.done = False

    def poll(self):
        if self.done:
            return None
        if self.reader is None:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            sock.sendall(f"FROM {self.next}\n".encode())
            self.reader = sock.makefile("rb")
        out = []
        for _ in range(50):
            line = self.reader.readline()
            if line == b"END\n":
                self.done = True
                return out or None
            if not line.endswith(b"\n"):  # the server went away mid-stream
                self.reader.close()
                self.reader = None
                self.next -= len(out)  # nothing of this poll was returned: read it again
                raise RetriableException(f"connection to 127.0.0.1:{self.port} lost after line {self.next - 1}")
            self.next += 1
            out.append(SourceRecord(topic=self.topic, value_schema=Schema.STRING, value=line.decode().strip(),
                                    source_partition=self.partition, source_offset={"line": self.next}))
        return out

    def stop(self):
        if getattr(self, "reader", None) is not None:
            self.reader.close()
