"""What identifies the user and the cluster: user names, home paths, host names, IP addresses.

They become stable placeholders that keep the structure (``/home/<user>/proj/train.py``,
``<host-1>``, ``<ip-2>``): the same node gets the same placeholder everywhere in one report, so a
maintainer can still tell that two lines talk about the same machine.
"""

from __future__ import annotations

import base64
import getpass
import ipaddress
import json
import os
import re
from collections.abc import Iterable

from dsdoctor.facts.launch import world_info_dict

USER = "<user>"

_HOME_PATH = re.compile(r"(?P<pre>(?<![A-Za-z0-9_.-])(?:/home|/Users|/mnt/home|/u|/scratch|/export/home)/)"
                        r"(?P<user>[^/\s\"':<>]+)")
_WIN_HOME_PATH = re.compile(r"(?i)(?P<pre>\b[A-Z]:\\\\?Users\\\\?)(?P<user>[^\\\s\"':<>]+)")
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])(?P<user>[A-Za-z0-9._%+-]+)"
                    r"@(?P<domain>[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})\b")
_IPV4 = re.compile(r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){3,7}[0-9A-Fa-f]{1,4}(?![0-9A-Fa-f:])")
# An IPv4 that is an address, not a four-part version number: followed by a port, or after
# "://", "@" or an address-like key.
_IPV4_IN_ADDRESS = re.compile(r"(?:(?<=://)|(?<=@)|(?<=addr=)|(?<=addr )|(?<=host=))" + _IPV4.pattern
                              + r"|" + _IPV4.pattern + r"(?=:\d{2,5}\b)")
# Contexts that name a host: MASTER_ADDR, --master_addr, hostfile lines, launcher rank prefixes.
_HOST_CONTEXTS = (
    re.compile(r"(?i)\bmaster[_-]?addr(?:ess)?[\"']?\s*[=:]?\s*[\"']?(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)"),
    re.compile(r"(?i)--(?:master_addr|rdzv[_-]endpoint|main_process_ip|hostname|node[_-]?ip)[= ]"
               r"[\"']?(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)"),
    re.compile(r"(?m)^\s*(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)\s+slots\s*=\s*\d+"),
    re.compile(r"(?i)\b(?:node|SLURM_NODELIST|SLURMD_NODENAME)\s*[=:]\s*[\"']?"
               r"(?P<host>[A-Za-z][A-Za-z0-9_.-]*\d[A-Za-z0-9_.-]*)"),
    # torch elastic's failure summary "  host      : gpu-a.example" and "hostname=..."
    re.compile(r"(?i)\b(?:hostname|host|nodename)\s*[=:]\s*[\"']?(?P<host>[A-Za-z][A-Za-z0-9_.-]{2,})"),
    # Slurm: "srun: error: node107: task 0: Out Of Memory", "*** JOB 123 ON node107 CANCELLED"
    re.compile(r"\bsrun: error: (?P<host>[A-Za-z][A-Za-z0-9_.-]*): task \d"),
    re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON (?P<host>[A-Za-z][A-Za-z0-9_.-]*) CANCELLED"),
    # pdsh/deepspeed multi-node prefix "node-12: [2024-...]" and "worker-1: Traceback"
    # (a separator, then a digit: checked by a look-ahead so that the name is one possessive run)
    re.compile(r"(?m)^(?=[A-Za-z][A-Za-z0-9]*+[-_.][A-Za-z0-9_.-]*?\d)(?P<host>[A-Za-z][A-Za-z0-9_.-]*+): "),
    # WORLD INFO DICT: {'worker-0': [0, 1], 'worker-1': [0, 1]}
    re.compile(r"[{,]\s*'(?P<host>[A-Za-z0-9][A-Za-z0-9_.-]*)':\s*\["),
    # ssh user@host / NCCL "host:port" after "@"
    re.compile(r"(?<![A-Za-z0-9._%+-])[a-z_][a-z0-9_-]{0,31}@(?P<host>[A-Za-z][A-Za-z0-9-]*\d[A-Za-z0-9-]*)(?![A-Za-z0-9.-]*\.[A-Za-z]{2,}\b)"),
    # AWS-style and private-domain hosts
    re.compile(r"\b(?P<host>ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?:\.[A-Za-z0-9.-]+)?)\b"),
    # (starts only where a name starts, its labels possessive: linear on long dotted runs)
    re.compile(r"(?<![A-Za-z0-9.-])(?P<host>[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)*\.(?:internal|local|lan|cluster|corp|intra|localdomain))\b"),
)
# The DeepSpeed launcher's --world_info: base64 of {"host": [gpu, ...], ...}; the host names are
# learned from it and the blob is re-encoded with the placeholders (it stays decodable).
_WORLD_INFO = re.compile(r"(?P<pre>--world_info[= ][\"']?)(?P<b64>[A-Za-z0-9+/_-]{8,}={0,2})")
# Words that look like hosts in those contexts but are not.
_HOST_KEEP = frozenset({"localhost", "none", "null", "auto", "true", "false", "env", "tcp", "file",
                        "local", "127.0.0.1", "0.0.0.0", "ip6-localhost"})
# User names that identify nobody (and would eat ordinary words if replaced everywhere).
_USER_KEEP = frozenset({"root", "user", "ubuntu", "admin", "nobody", "runner", "jovyan", "ec2-user",
                        "centos", "debian", "docker", "app", "shared", "home", "users", "public",
                        "default", "guest", "test", "linuxbrew", "<user>"})


class IdentityMasker:
    """Replaces user names / home paths (``paths``) and host names / IPs (``hosts``)."""

    def __init__(self, *, paths: bool, hosts: bool, extra_hosts: Iterable[str] = (),
                 extra_users: Iterable[str] = ()) -> None:
        self.paths = paths
        self.hosts = hosts
        self._host_map: dict[str, str] = {}
        self._ip_map: dict[str, str] = {}
        self._users: set[str] = set()
        for h in extra_hosts:
            self.add_host(h)
        for u in extra_users:
            self.add_user(u)

    @classmethod
    def for_this_machine(cls, *, paths: bool, hosts: bool) -> IdentityMasker:
        """A masker that also knows this machine's user and host names (when it hides them)."""
        users: list[str] = []
        names: list[str] = []
        if paths:
            for get in (getpass.getuser, lambda: os.path.basename(os.path.expanduser("~"))):
                try:
                    users.append(get())
                except (OSError, KeyError, ImportError):  # no passwd entry in a container
                    pass
        if hosts:
            import socket  # noqa: PLC0415 - only when host names are masked (start-up)

            try:
                full = socket.gethostname()
                names += [full, full.split(".")[0]]
            except OSError:
                pass
        return cls(paths=paths, hosts=hosts, extra_hosts=names, extra_users=users)

    # -- learning --------------------------------------------------------------------------
    def add_user(self, user: str) -> None:
        user = user.strip()
        if len(user) >= 3 and user.lower() not in _USER_KEEP and not user.startswith("<"):
            self._users.add(user)

    def add_host(self, host: str) -> None:
        host = host.strip().strip(".")
        if (len(host) < 3 or host.lower() in _HOST_KEEP or host.isdigit() or host.startswith("<")
                or _IPV4.fullmatch(host)):
            return
        self._host_map.setdefault(host, f"<host-{len(self._host_map) + 1}>")

    def learn(self, text: str) -> None:
        """Remember user names (from home paths, e-mails) and host names (from context)."""
        if self.paths:
            for pat in (_HOME_PATH, _WIN_HOME_PATH):
                for m in pat.finditer(text):
                    self.add_user(m.group("user"))
        if self.hosts:
            for pat in _HOST_CONTEXTS:
                for m in pat.finditer(text):
                    self.add_host(m.group("host"))
            for m in _WORLD_INFO.finditer(text):
                for host in world_info_dict(m.group("b64")) or {}:
                    self.add_host(host)

    # -- replacing -------------------------------------------------------------------------
    def _ip(self, m: re.Match[str]) -> str:
        ip = m.group(0)
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return ip
        if addr.is_loopback or addr.is_unspecified or ip == "255.255.255.255":
            return ip
        return self._ip_map.setdefault(ip, f"<ip-{len(self._ip_map) + 1}>")

    def _private_ip(self, m: re.Match[str]) -> str:
        try:
            addr = ipaddress.ip_address(m.group(0))
        except ValueError:
            return m.group(0)
        # private (10/8, 172.16/12, 192.168/16), CGNAT (100.64/10) and link-local identify a
        # cluster; a public four-part number may be a version ("8.9.7.29"), so it is only
        # replaced where it is used as an address (_IPV4_IN_ADDRESS).
        if addr.is_private or addr in ipaddress.ip_network("100.64.0.0/10"):
            return self._ip(m)
        return m.group(0)

    def _world_info_repl(self, m: re.Match[str]) -> str:
        world = world_info_dict(m.group("b64"))
        if not world or not any(h in self._host_map for h in world):
            return m.group(0)
        masked = {self._host_map.get(h, h): v for h, v in world.items()}
        return m.group("pre") + base64.b64encode(json.dumps(masked).encode()).decode()

    def mask(self, text: str) -> str:
        if not text or not (self.paths or self.hosts):
            return text
        self.learn(text)
        out = text
        if self.paths:
            out = _HOME_PATH.sub(lambda m: m.group("pre") + USER, out)
            out = _WIN_HOME_PATH.sub(lambda m: m.group("pre") + USER, out)
            out = _EMAIL.sub(lambda m: USER + "@" + m.group("domain"), out)
            for user in sorted(self._users, key=len, reverse=True):
                out = re.sub(rf"(?<![A-Za-z0-9_.-]){re.escape(user)}(?![A-Za-z0-9_-])", USER, out)
        if self.hosts:
            out = _IPV4_IN_ADDRESS.sub(self._ip, out)
            out = _IPV4.sub(self._private_ip, out)
            out = _IPV6.sub(self._ip, out)
            out = _WORLD_INFO.sub(self._world_info_repl, out)
            # Longest names first so "node-1.cluster" is replaced before "node-1".
            for host in sorted(self._host_map, key=len, reverse=True):
                out = re.sub(rf"(?<![A-Za-z0-9_.-]){re.escape(host)}(?![A-Za-z0-9_-])",
                             self._host_map[host], out)
        return out


