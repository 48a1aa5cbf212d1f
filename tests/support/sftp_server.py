"""A real SFTP server on loopback (asyncssh's, in a thread of the test process), for object storage reached
through an Airflow ``sftp`` connection: Airflow's SFTP provider turns the connection into an fsspec
``SSHFileSystem`` (sshfs), the way ``ObjectStoragePath("sftp://conn_id@host/path")`` opens it."""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass
class SftpServer:
    host: str
    port: int
    username: str
    password: str
    root: Path
    """The directory the server shows as ``/``."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Auth:
    def __init__(self, username: str, password: str):
        self.username, self.password = username, password

    def __call__(self):
        import asyncssh

        outer = self

        class Server(asyncssh.SSHServer):
            def begin_auth(self, username: str) -> bool:
                return True

            def password_auth_supported(self) -> bool:
                return True

            def validate_password(self, username: str, password: str) -> bool:
                return username == outer.username and password == outer.password

        return Server()


def start_sftp_server(root: Path) -> tuple[SftpServer, callable]:
    """Starts a password-protected SFTP server whose ``/`` is ``root``; returns it and a stop function."""
    import asyncssh

    port, password = _free_port(), f"sftp-{secrets.token_hex(8)}"
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict = {}

    async def serve():
        holder["server"] = await asyncssh.listen(
            "127.0.0.1", port, server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            server_factory=_Auth("copycat", password),
            sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=str(root)))
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(serve()), loop.run_forever()), daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the SFTP server did not start")

    def stop():
        async def close():
            holder["server"].close()
            await holder["server"].wait_closed()

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return SftpServer("127.0.0.1", port, "copycat", password, root), stop
