"""The environment snapshot rendered: text (rich), Markdown, and the summary lines the issue body
and ``dsdoctor env`` share. Renderers only render: the snapshot is collected in facts/envinfo.py.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from dsdoctor.render.markdown import md_cell


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def shape(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with every section in the shape the renderers read.

    A snapshot file comes from another machine or another dsdoctor version, or is hand-written:
    load_snapshot validates what the rules read; this makes the rest safe to render.
    """
    s = dict(snap)
    for k in ("python", "os", "cpu", "cuda", "nvml", "interconnect", "packages", "env_vars", "shm"):
        s[k] = _d(s.get(k))
    s["gpus"] = [g for g in _l(s.get("gpus")) if isinstance(g, dict)]
    s["disks"] = [d for d in _l(s.get("disks")) if isinstance(d, dict)]
    ops = s.get("deepspeed_ops")
    if isinstance(ops, dict):
        ops = dict(ops)
        ops["compiled_with"] = _d(ops.get("compiled_with"))
        ops["ops"] = {str(k): v for k, v in _d(ops.get("ops")).items() if isinstance(v, dict)}
        ops["warnings"] = [str(w) for w in _l(ops.get("warnings"))]
        ops["stderr"] = [str(w) for w in _l(ops.get("stderr"))]
        s["deepspeed_ops"] = ops
    else:
        s["deepspeed_ops"] = None
    if s["interconnect"]:
        ic = dict(s["interconnect"])
        ic["infiniband"] = [p for p in _l(ic.get("infiniband")) if isinstance(p, dict)]
        ic["net_interfaces"] = [str(x) for x in _l(ic.get("net_interfaces"))]
        s["interconnect"] = ic
    s["notes"] = [str(n) for n in _l(s.get("notes"))]
    s["errors"] = [e for e in _l(s.get("errors")) if isinstance(e, dict)]
    return s


def human_bytes(n: Any) -> str:
    """1.5 GiB style; "?" when unknown."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def gpu_summary(snap: dict[str, Any]) -> str:
    """'2 x NVIDIA A100-SXM4-80GB (80.0 GiB, cc 8.0, bf16 yes)', grouped by identical GPUs."""
    gpus = shape(snap)["gpus"]
    if not gpus:
        return "none visible"
    groups: Counter[str] = Counter()
    for g in gpus:
        bf16 = g.get("bf16_supported")
        parts = [human_bytes(g.get("memory_total_bytes"))]
        if g.get("compute_capability"):
            parts.append(f"cc {g['compute_capability']}")
        if bf16 is not None:
            parts.append(f"bf16 {'yes' if bf16 else 'no'}")
        groups[f"{g.get('name', '?')} ({', '.join(parts)})"] += 1
    return "; ".join(f"{n} x {desc}" for desc, n in groups.items())


def interconnect_summary(snap: dict[str, Any]) -> str:
    """NVLink links per GPU, InfiniBand/RoCE ports and their rates, network interfaces."""
    snap = shape(snap)
    bits = []
    links = [g.get("nvlink_active_links") for g in snap["gpus"]]
    links = [n for n in links if isinstance(n, int) and not isinstance(n, bool)]
    if any(links):
        bits.append(f"NVLink: {max(links)} active links per GPU")
    elif links and all(n == 0 for n in links):
        bits.append("no active NVLink (PCIe)")
    ic = snap.get("interconnect") or {}
    ib = ic.get("infiniband") or []
    if ib:
        bits.append("InfiniBand/RoCE: " + ", ".join(
            f"{p.get('device')}/{p.get('port')} {p.get('rate') or '?'} ({p.get('state') or '?'})" for p in ib[:8]))
    elif ic:
        bits.append("no InfiniBand/RoCE device")
    if ic.get("net_interfaces"):
        bits.append("net: " + ", ".join(ic["net_interfaces"][:8]))
    return "; ".join(bits) or "unknown"


_KIND_SHOWN = {"nvme": "NVMe", "ssd": "SSD", "hdd": "HDD (rotational)", "network": "network",
               "ram": "RAM", "overlay": "overlay", "unknown": "disk ?"}


def disks_summary(snap: dict[str, Any], limit: int = 8) -> str:
    """"/ ext4 on vda (HDD (rotational)); /dev/shm tmpfs (RAM)": where nvme_path may point."""
    from dsdoctor.facts.envdisks import is_listed, storage_kind

    disks = [d for d in shape(snap)["disks"] if is_listed(d)]
    if "disks" not in snap:
        return "not recorded (snapshot from an older dsdoctor)"
    parts = []
    for d in disks[:limit]:
        on = f" on {','.join(map(str, _l(d.get('disks'))))}" if d.get("disks") else ""
        parts.append(f"{d.get('mountpoint', '?')} {d.get('fstype', '?')}{on} "
                     f"({_KIND_SHOWN[storage_kind(d)]})")
    more = f"; +{len(disks) - limit} more" if len(disks) > limit else ""
    return "; ".join(parts) + more if parts else "none found"


def os_line(o: dict[str, Any]) -> str:
    """One line: distribution, kernel, machine, libc, container."""
    bits = [str(o.get("distribution") or o.get("system") or "?")]
    if o.get("release"):
        bits.append(f"kernel {o['release']}")
    if o.get("machine"):
        bits.append(o["machine"])
    if o.get("libc"):
        bits.append(o["libc"])
    if o.get("container"):
        bits.append(f"container: {o['container']}")
    return ", ".join(str(b) for b in bits)


def cuda_line(snap: dict[str, Any]) -> str:
    """One line: torch's CUDA/cuDNN/NCCL, nvcc, CUDA_HOME, what the driver supports."""
    snap = shape(snap)
    c = snap["cuda"]
    bits = []
    if c.get("torch_cuda") or c.get("torch_hip"):
        bits.append(f"torch built with CUDA {c['torch_cuda']}" if c.get("torch_cuda")
                    else f"torch built with HIP {c['torch_hip']}")
    elif (snap.get("packages") or {}).get("torch"):
        bits.append("torch is a CPU-only build" if c.get("torch_cuda_available") is not None
                    else "torch CUDA version unknown")
    if c.get("torch_cudnn"):
        bits.append(f"cuDNN {c['torch_cudnn']}")
    if c.get("torch_nccl"):
        bits.append(f"NCCL {c['torch_nccl']}")
    if c.get("torch_cuda_available") is not None:
        bits.append(f"torch.cuda.is_available() = {c['torch_cuda_available']}")
    bits.append(f"nvcc {c['nvcc_version']}" if c.get("nvcc_version") else "nvcc not found")
    bits.append(f"CUDA_HOME {c.get('cuda_home') or 'unset'}")
    if c.get("driver_cuda_version"):
        bits.append(f"driver supports CUDA {c['driver_cuda_version']}")
    return ", ".join(bits)


def shm_summary(snap: dict[str, Any]) -> str:
    """"1.2 GiB used of 2.0 GiB (60%), 12 DeepSpeed buffers 792.0 MiB": how full /dev/shm is and
    how much of it DeepSpeed's leftover buffers hold; empty when the snapshot does not say."""
    shm = _d(snap.get("shm"))
    total, used = shm.get("total_bytes"), shm.get("used_bytes")
    if not (isinstance(total, int) and isinstance(used, int) and total > 0):
        return ""
    out = f"{human_bytes(used)} used of {human_bytes(total)} ({100 * used // total}%)"
    count = shm.get("deepspeed_buffers")
    if isinstance(count, int) and count:
        out += f", {count} DeepSpeed buffer{'s' if count > 1 else ''} {human_bytes(shm.get('deepspeed_bytes'))}"
    return out


def ds_messages(ops: dict[str, Any], limit: int = 20, width: int = 300) -> list[str]:
    """What DeepSpeed printed while its op report was probed (its warnings, then the child's own
    stderr), each line as printed, bounded: its own section, never a table's cell."""
    lines = list(dict.fromkeys([*_l(ops.get("warnings")), *_l(ops.get("stderr"))]))
    out = [str(t)[:width] + ("..." if len(str(t)) > width else "") for t in lines[:limit]]
    if len(lines) > limit:
        out.append(f"[... {len(lines) - limit} more lines]")
    return out


def summary_rows(snap: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows shared by the text and Markdown renderers."""
    snap = shape(snap)
    py = snap["python"]
    cpu = snap.get("cpu") or {}
    nvml = snap.get("nvml") or {}
    mem = f"{human_bytes(cpu.get('ram_total_bytes'))} total, " \
          f"{human_bytes(cpu.get('ram_available_bytes'))} available"
    if cpu.get("cgroup_memory_limit_bytes"):
        mem += f", cgroup limit {human_bytes(cpu['cgroup_memory_limit_bytes'])}"
    if cpu.get("swap_total_bytes") is not None:
        mem += f", swap {human_bytes(cpu['swap_total_bytes'])}"
    shm = shm_summary(snap)
    if shm:
        mem += f", /dev/shm {shm}"
    elif cpu.get("shm_total_bytes") is not None:
        mem += f", /dev/shm {human_bytes(cpu['shm_total_bytes'])}"
    rows = [
        ("dsdoctor", str(snap.get("dsdoctor_version", "?"))),
        ("Python", f"{py.get('version', '?')} ({py.get('implementation', '?')}"
                   f"{', virtualenv' if py.get('virtualenv') else ''}"
                   f"{', conda ' + str(py['conda_env']) if py.get('conda_env') else ''})"),
        ("OS", os_line(snap["os"])),
        ("CPU", f"{cpu.get('model') or '?'}, {cpu.get('count', '?')} logical cores"),
        ("RAM", mem),
        ("GPUs", gpu_summary(snap)),
        ("NVIDIA driver", str(nvml.get("driver") or "not available")),
        ("Interconnect", interconnect_summary(snap)),
        ("Disks", disks_summary(snap)),
        ("CUDA", cuda_line(snap)),
    ]
    return rows


def ops_rows(ops: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(op name, installed, compatible) rows of DeepSpeed's op report, as ds_report marks them."""
    def mark(v: Any) -> str:
        return "?" if v is None else ("YES" if v else "NO")

    return [(name, mark(o.get("installed")), "OKAY" if o.get("compatible") else mark(o.get("compatible")))
            for name, o in (ops.get("ops") or {}).items()]


def fence(text: str, lang: str = "") -> str:
    """A fenced code block the content cannot close (fence longer than any backtick run in it)."""
    ticks, run = 3, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        ticks = max(ticks, run + 1)
    return f"{'`' * ticks}{lang}\n{text.rstrip()}\n{'`' * ticks}"


def details(summary: str, inner: str) -> str:
    """A collapsed ``<details>`` block (GitHub renders the Markdown inside it)."""
    return f"<details><summary>{summary}</summary>\n\n{inner}\n\n</details>"


def render_markdown(snap: dict[str, Any], heading: str = "###") -> str:
    """The snapshot as Markdown to paste into an issue (tables; env vars in a code block)."""
    snap = shape(snap)
    out = [f"{heading} Environment (`dsdoctor env`)", "", "| | |", "| --- | --- |"]
    out += [f"| {k} | {md_cell(v)} |" for k, v in summary_rows(snap)]
    pk = snap.get("packages") or {}
    out += ["", "| package | version |", "| --- | --- |"]
    out += [f"| {md_cell(str(name))} | {md_cell(str(ver)) if ver else 'not installed'} |"
            for name, ver in pk.items()]
    ops = snap.get("deepspeed_ops")
    if ops:
        cw = ops.get("compiled_with") or {}
        out += ["", f"DeepSpeed {ops.get('version', '?')} op report (accelerator: "
                f"{ops.get('accelerator', '?')}, ninja: {'OKAY' if ops.get('ninja') else 'missing'}, "
                f"wheel compiled with torch {cw.get('version', '?')}, CUDA {cw.get('cuda_version', '?')})",
                "", "| op name | installed | compatible |", "| --- | --- | --- |"]
        out += [f"| {a} | {b} | {c} |" for a, b, c in ops_rows(ops)]
        msgs = ds_messages(ops)
        if msgs:
            out += ["", details("DeepSpeed's messages while probing its ops", fence("\n".join(msgs)))]
    env = snap.get("env_vars") or {}
    out += ["", "Relevant environment variables (secrets redacted):", ""]
    out.append(fence("\n".join(f"{k}={v}" for k, v in env.items())) if env else "_none set_")
    notes = list(snap.get("notes") or [])
    errs = [f"probe `{e.get('probe')}` failed: {e.get('error')}" for e in snap.get("errors") or []]
    if notes or errs:
        out += ["", "Notes:", ""] + [f"- {md_cell(n)}" for n in notes + errs]
    return "\n".join(out) + "\n"


def render_text(snap: dict[str, Any], file: Any = None) -> None:
    """Rich tables for a terminal."""
    snap = shape(snap)
    from rich.console import Console
    from rich.markup import escape as esc
    from rich.table import Table

    console = Console(file=file or sys.stdout, highlight=False, soft_wrap=False)
    t = Table(title="dsdoctor env", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in summary_rows(snap):
        t.add_row(esc(k), esc(v))
    console.print(t)
    pt = Table(title="packages", title_justify="left")
    pt.add_column("package")
    pt.add_column("version")
    for name, ver in (snap.get("packages") or {}).items():
        pt.add_row(esc(str(name)), esc(str(ver)) if ver else "[dim]not installed[/dim]")
    console.print(pt)
    ops = snap.get("deepspeed_ops")
    if ops:
        ot = Table(title=esc(f"DeepSpeed {ops.get('version', '?')} ops (accelerator {ops.get('accelerator')})"),
                   title_justify="left")
        for col in ("op name", "installed", "compatible"):
            ot.add_column(col)
        for row in ops_rows(ops):
            ot.add_row(*(esc(str(c)) for c in row))
        console.print(ot)
        msgs = ds_messages(ops)
        if msgs:
            # DeepSpeed's own lines, as printed: not re-wrapped, not in a table
            console.print("DeepSpeed's messages while probing its ops:", style="bold")
            for w in msgs:
                console.print(w, markup=False, style="yellow", soft_wrap=True, crop=False)
    env = snap.get("env_vars") or {}
    if env:
        et = Table(title="environment variables (secrets redacted)", title_justify="left")
        et.add_column("name")
        et.add_column("value", overflow="fold")
        for k, v in env.items():
            et.add_row(esc(str(k)), esc(str(v)))
        console.print(et)
    for n in snap.get("notes") or []:
        console.print(f"note: {n}", markup=False)
    for e in snap.get("errors") or []:
        console.print(f"[red]probe {esc(str(e.get('probe')))} failed:[/red] {esc(str(e.get('error')))}")
