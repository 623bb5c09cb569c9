"""DS120: a multi-node launch that could not ssh to a node (pdsh, DeepSpeed's runner, OpenSSH).

The fix depends on what ssh said (no key, an unknown host key, no sshd listening, a name that does
not resolve, or nothing because DeepSpeed's check hides it) and on whether the run is on one node
(then no ssh is needed at all) or several (passwordless ssh, or ranks started on each node).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose.checks.common import finding, vals
from dsdoctor.diagnose.checks.infra import _evidence, _texts
from dsdoctor.facts.context import Context
from dsdoctor.model import Finding

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def ssh_failure(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS120: the launcher could not ssh to a node: why ssh said no, and what makes it work."""
    s = ctx.symptom("ssh-failure")
    if s is None:
        return
    p = s.patterns
    hosts = list(dict.fromkeys(
        h for key in ("target", "host", "unresolved") for h in _texts(s.values.get(key))
        if h and h != "None"))
    hostfile = next(iter(_texts(s.values.get("hostfile"))), None)
    shown = ", ".join(hosts[:3]) + (" ..." if len(hosts) > 3 else "") if hosts else "a node"
    target = hosts[0] if hosts else "<host>"
    msg = [f"The launcher could not ssh to {shown} (line {s.first.line}), so no rank started "
           "there: DeepSpeed's multi-node launcher (pdsh) runs every node's ranks over ssh."]
    fix: list[str] = []
    single = bool(hosts) and set(hosts) <= _LOCAL_HOSTS or ctx.run.value("nodes") == 1
    every = "" if single else " for every host in the hostfile"
    if p.get("ssh-permission-denied"):
        msg.append("ssh refused the login: the node has no public key of the launching user in "
                   "its ~/.ssh/authorized_keys, and the launcher cannot type a password.")
        fix.append(f"on the node that runs deepspeed: ssh-keygen -t ed25519 (once), then "
                   f"ssh-copy-id {target}{every}")
    if p.get("ssh-host-key-failed"):
        msg.append("ssh does not know (or no longer trusts) the node's host key, and a launcher "
                   "cannot answer the yes/no question.")
        fix.append(f"add the host keys once: ssh-keyscan {target} >> ~/.ssh/known_hosts (after a "
                   f"node was reinstalled, remove the old key first: ssh-keygen -R {target})")
    if p.get("ssh-connect-failed"):
        reasons = _texts(s.values.get("reason"))
        if s.values.get("unresolved"):
            msg.append("the host name in the hostfile does not resolve on the launching node.")
            fix.append("write the nodes' IP addresses in the hostfile, or add them to /etc/hosts")
        if reasons:
            port = vals(s, "port", "first") or 22
            msg.append(f"nothing answered ssh on port {port} ({reasons[0]}): no sshd runs there "
                       "(containers rarely start one), or the port or address is wrong.")
            fix.append(f"start sshd where the ranks run (in the container if they run in one) and "
                       f"check 'ssh -p {port} {target} hostname'; if sshd listens on another port, "
                       "pass it: deepspeed --ssh_port N")
    if not fix:  # only DeepSpeed's reachability check or pdsh's exit code: ssh's reason not shown
        code = vals(s, "ssh_exit", "first")
        msg.append(f"ssh exited with {code if code is not None else 'an error'}; the log does not show "
                   "ssh's own message (the check hides it).")
        fix.append(f"run 'ssh -o PasswordAuthentication=no {target} hostname' on the launching "
                   "node (DeepSpeed's own check) to see why, then set up passwordless ssh to "
                   "every host in the hostfile")
    if single:
        msg.append("This is a single-node run: only a hostfile (DeepSpeed also reads "
                   "/job/hostfile) or --autotuning, which launches its experiments through pdsh, "
                   "makes it use ssh.")
        fix.append("on one node, drop the hostfile" + (f" ({hostfile})" if hostfile else "")
                   + " and use --num_gpus; with --autotuning, 'ssh localhost' must work too")
    else:
        fix.append("where ssh between nodes is not allowed, start the ranks on every node "
                   "yourself: deepspeed --no_ssh --node_rank=N --master_addr=... (DeepSpeed >= 0.15), "
                   "torchrun, or "
                   "the slurm/openmpi launchers (--launcher)")
        if hostfile:
            msg.append(f"Hostfile: {hostfile}.")
    yield finding(" ".join(msg), fix="; ".join(fix) + ".", evidence=_evidence(s))
