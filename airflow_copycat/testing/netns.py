"""Hosts made of Linux network namespaces, for tests that need several machines on one.

:class:`Topology` builds one bridge in the root namespace and one network namespace per
host, each joined to the bridge by a veth pair, all on a private ``/24``:

* the bridge holds the subnet's first address (:attr:`Topology.gateway`): the machine
  itself -- the test process, the CLI, the Spark driver, "the Airflow side" -- reaches
  every host through it, and every host reaches the machine at that address;
* each host has its own address (:attr:`Host.address`) on ``eth0`` and its own loopback;
  a server started in a host and listening on its address is reachable only there, as on
  a real network. A host has no route beyond the subnet.

Only the network is separate: the hosts share this machine's filesystem, users and
processes table, which models a shared volume (NFS, a mounted bucket) that every host sees
under the same path.

Names and the subnet are unique per topology (the names carry this process's id), so runs
side by side do not collide. :meth:`Topology.stop` kills every process left in a host and
removes the namespaces and the bridge; it runs when the ``with`` block ends, also after a
failure, and is idempotent. A crashed run's leftovers (names whose process is gone) are
removed by the next :meth:`Topology.start`, so they never break it.

Needs root (``CAP_NET_ADMIN``) and the ``ip`` command (iproute2). Processes run in a host
through ``ip netns exec`` (:meth:`Host.argv`, :meth:`Host.popen`)::

    with Topology(["master", "db"]) as net:
        db = net.hosts["db"]
        proc = db.popen(["some-server", "--listen", db.address])
        ...
        db.kill_all()      # the host "crashes": every process in it gets SIGKILL
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_PREFIX = "ccnt"
_STALE = re.compile(rf"^{_PREFIX}([0-9a-f]+)_")  # <prefix><pid hex>_<n>..., see Topology.__init__
_counter = itertools.count()


def available() -> str | None:
    """``None`` when this process can build topologies, else why not (for a skip or fail message)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need the ip command (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed (exit {out.returncode}): {out.stderr.strip()}")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_pids(netns: str) -> list[int]:
    out = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def _remove_netns(netns: str) -> None:
    for pid in _netns_pids(netns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _ip("netns", "delete", netns, check=False)


def remove_stale(also: str | None = None) -> list[str]:
    """Remove the namespaces and links of topologies whose process is gone (a crashed run), and
    those whose names start with ``also``; returns their names. Those of live processes (other
    runs side by side) are kept."""
    def stale(name: str) -> bool:
        m = _STALE.match(name)
        return bool(m) and (not _alive(int(m.group(1), 16)) or (also is not None and name.startswith(also)))

    removed = []
    for netns in _ip("netns", "list", check=False).stdout.split("\n"):
        name = netns.split(" ")[0].strip()
        if stale(name):
            _remove_netns(name)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if stale(name):
            _ip("link", "delete", name, check=False)
            removed.append(name)
    return removed


def _used_networks() -> list[ipaddress.IPv4Network]:
    nets = []
    for line in _ip("-4", "-o", "addr", "show", check=False).stdout.splitlines():
        for word in line.split():
            if "/" in word and word[0].isdigit():
                nets.append(ipaddress.ip_interface(word).network)
    for line in _ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        word = line.split(" ")[0]
        if word and word[0].isdigit():
            try:
                nets.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                pass
    return nets


def _free_subnet() -> ipaddress.IPv4Network:
    """A ``/24`` in 10.200.0.0/13 that no interface or route of this machine uses."""
    used = _used_networks()
    rnd = random.Random()
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rnd.randint(200, 207)}.{rnd.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free /24 in 10.200.0.0/13 for a test network")


@dataclass(frozen=True)
class Host:
    """One host: a network namespace with an address on the topology's subnet."""

    name: str
    """The name the test gave it (``"worker1"``)."""
    netns: str
    """The namespace's name (``ip netns``)."""
    address: str
    """Its IPv4 address: what servers in it listen on and what others connect to."""
    link: str
    """The root end of its veth pair (on the bridge): :meth:`link_down` cuts it."""

    def argv(self, cmd: Sequence[str]) -> list[str]:
        """``cmd`` run inside this host (``ip netns exec`` execs it: the pid stays ``cmd``'s)."""
        return ["ip", "netns", "exec", self.netns, *cmd]

    def popen(self, cmd: Sequence[str], *, env: Mapping[str, str] | None = None, log: str | None = None,
              **kwargs) -> subprocess.Popen:
        """Start ``cmd`` in this host, in a session of its own; stdout and stderr go to ``log``
        (appended) or nowhere."""
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            return subprocess.Popen(self.argv(cmd), env=dict(env) if env is not None else None, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, **kwargs)
        finally:
            if log:
                out.close()

    def pids(self) -> list[int]:
        """The processes running in this host now."""
        return _netns_pids(self.netns)

    def kill_all(self) -> int:
        """The host crashes: SIGKILL every process in it (servers, JVMs, Python workers); returns how
        many. Connections to it break at once (the kernel resets them), as when a machine's
        processes die; its address stays up."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def link_down(self) -> None:
        """The host drops off the network: its link to the bridge goes down, its processes keep
        running. Peers notice only through their own timeouts."""
        _ip("link", "set", self.link, "down")


class Topology:
    """A bridge plus one namespace per host name (see the module docstring). Use as a context
    manager, or :meth:`start` / :meth:`stop`."""

    def __init__(self, names: Sequence[str]):
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"host names must be unique and at least one: {list(names)}")
        if len(names) > 99:
            raise ValueError("at most 99 hosts")
        self.names = list(names)
        # <prefix><pid hex>_<n>: remove_stale() recognises a dead run by its pid; <= 15 chars for links
        self.tag = f"{_PREFIX}{os.getpid():x}_{next(_counter) % 16:x}"
        self.bridge = f"{self.tag}b"
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.hosts: dict[str, Host] = {}

    def start(self) -> "Topology":
        why = available()
        if why:
            raise RuntimeError(f"cannot build a network of hosts: {why}")
        remove_stale(also=self.tag)  # also: a dead process's, whose pid this process now has
        self.subnet = _free_subnet()
        addrs = list(self.subnet.hosts())
        self.gateway = str(addrs[0])
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            self._forward_rule("-I")
            for i, name in enumerate(self.names, start=1):
                host = Host(name, f"{self.tag}_{name}", str(addrs[i]), f"{self.tag}v{i}")
                _ip("netns", "add", host.netns)
                self.hosts[name] = host
                _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
                _ip("link", "set", host.link, "master", self.bridge, "up")
                _ip("-n", host.netns, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0")
                _ip("-n", host.netns, "link", "set", "eth0", "up")
                _ip("-n", host.netns, "link", "set", "lo", "up")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every process in the hosts, remove the namespaces and the bridge. Idempotent."""
        for host in self.hosts.values():
            _remove_netns(host.netns)
            _ip("link", "delete", host.link, check=False)
        self.hosts = {}
        self._forward_rule("-D")
        _ip("link", "delete", self.bridge, check=False)

    def _forward_rule(self, action: str) -> None:
        """Where bridged traffic passes iptables (``bridge-nf-call-iptables``, as on machines that run
        Docker, whose FORWARD policy drops it), accept what goes from host to host on this bridge:
        ``-I`` adds the rule, ``-D`` removes it (nothing when it is not there)."""
        try:
            with open("/proc/sys/net/bridge/bridge-nf-call-iptables", encoding="ascii") as f:
                filtered = f.read().strip() == "1"
        except OSError:
            return  # br_netfilter not loaded: bridged traffic skips iptables
        if filtered and shutil.which("iptables"):
            subprocess.run(["iptables", action, "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    def __enter__(self) -> "Topology":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
