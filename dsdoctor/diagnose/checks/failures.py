"""Checks of run failures the log shows: collective timeouts (DS107), op builds (DS108), Trainer
vs DeepSpeed in the log (DS109), batch assertions (DS110), client optimizer with offload
(DS111), ports (DS112) and ranks that exited non-zero (DS113).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from dsdoctor.diagnose import ranks as rank_table
from dsdoctor.diagnose.checks.common import finding, log_facts, vals, version_tuple
from dsdoctor.diagnose.checks.runfacts import package_version, stage_source, zero_stage
from dsdoctor.diagnose.verdict import FATAL_CAUSES
from dsdoctor.facts.context import Context
from dsdoctor.facts.run_sources import launches
from dsdoctor.logs.rankfacts import LOST_PEER
from dsdoctor.model import Finding, Symptom

# ------------------------------------------------------------------------ DS107 hang/timeouts


_TIMEOUT_TEXT = re.compile(r"timed out|timeout|watchdog|store based barrier|NCCL", re.I)


def collective_timeout(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS107: a collective or barrier timed out; rank the causes this run makes likely."""
    s = ctx.symptom("hang")
    if s is None:
        return
    op = vals(s, "op", "first")
    timeout = vals(s, "timeout_ms", "max")
    ws = vals(s, "world_size", "max")
    joined = vals(s, "joined", "min")
    lost_peer = any(re.search(r"closed by peer|connection reset|lost peer", e.text, re.I)
                    for e in s.evidence)
    head = (f"A collective lost its peer: the connection to another rank closed (line "
            f"{s.first.line}" if lost_peer else
            f"A collective operation or barrier timed out (line {s.first.line}")
    if op:
        head += f", op {op}"
    if isinstance(timeout, (int, float)):
        head += f", timeout {timeout / 1000:g} s"
    head += ")."
    causes: list[str] = []
    fixes: list[str] = []
    path = None
    # 0. The ranks' own lines: the rank that made the others wait (diagnose/ranks.py).
    table = rank_table.build(ctx.rank_facts)
    culprit = table.culprit if table is not None else None
    if culprit is not None and culprit.kind != "failed-first":
        causes.append(culprit.sentence)
        where = f" at {culprit.frame.short}" if culprit.frame is not None else ""
        who = "rank" if len(culprit.ranks) == 1 else "ranks"
        names = rank_table.rank_ranges(culprit.ranks)
        if culprit.kind == "vanished":
            fixes.append(
                f"find why {who} {names} died: nothing in this log says (SIGKILL leaves no "
                "traceback): `dmesg -T | grep -i oom` on its node, the scheduler's records; "
                "the others' lost peer is only the consequence")
        elif culprit.kind == "outside" and culprit.frame is None:
            fixes.append(
                f"find where {who} {names} was instead of the collective: its lines do not "
                "show it, so dump its stack while the run hangs (`py-spy dump --pid PID`, or "
                "run under `dsdoctor watch -- CMD`, which dumps every rank's stack on a stall). "
                "A rank outside the collective is usually reading data (a slow or hung "
                "filesystem, a DataLoader worker), saving, or evaluating alone; a longer timeout "
                "helps only when that work is slow but ends, and hides a stall that does not. "
                "If its stack is in another collective, the one the others timed out in runs "
                "on some ranks only (under `if rank == 0:`, after an early return): make every "
                "rank call it")
        else:
            did = ("fell behind: find what it did instead (its last lines, py-spy dump)"
                   if culprit.kind == "behind" else f"took a path the others did not{where}")
            fixes.append(
                f"make every rank run the same collectives in the same order: {who} {names} "
                f"{did} (a collective under `if rank == 0`, an early return or break on some "
                "ranks, generate() without synced_gpus=True under ZeRO-3); raising the timeout "
                "would only delay the same hang")
    # 1. A rank that died first: the others wait for it until the timeout.
    hang_lines = {(e.file, e.line) for e in s.evidence}
    consequence = False
    for kind in ("gpu-oom", "cpu-oom", "python-exception"):
        other = ctx.symptom(kind)
        if other is None:
            continue
        if kind == "python-exception":
            # The timeout itself is raised as an exception: only another error counts.
            # nor is a lost peer ("Connection closed by peer"): that is the consequence of
            # another rank's exit, the waiting rank's, never a failure that explains the hang
            own = [e for e in other.evidence if (e.file, e.line) not in hang_lines
                   and not _TIMEOUT_TEXT.search(e.text) and not LOST_PEER.search(e.text)
                   and not rank_table.STOPPED.search(e.text)]
            if not own:
                continue
            where_ev = own[0]
        else:
            where_ev = other.first
        causes.append(f"another rank failed ({kind} at line {where_ev.line}) and the others "
                      "lost it or waited for it until the timeout; fix that failure")
        consequence = True
        break
    # 2. Store barrier: not all workers started.
    if isinstance(ws, int) and isinstance(joined, int) and joined < ws:
        causes.append(f"only {joined} of {ws} workers reached the rendezvous: some ranks never "
                      "started (another node not launched, wrong hostfile or MASTER_ADDR, "
                      "blocked port, or a rank crashed during start-up)")
        fixes.append("check that every node runs the launcher with the same MASTER_ADDR/"
                     "MASTER_PORT and that the port is reachable from all nodes")
    elif isinstance(ws, int) and isinstance(joined, int) and joined > ws:
        causes.append(f"{joined} workers registered at a rendezvous for world_size={ws}: "
                      "another job uses the same MASTER_ADDR:MASTER_PORT, or keys of an earlier "
                      "run were left in the store")
        fixes.append("give each job its own MASTER_PORT (and make sure stale processes of "
                     "earlier runs are gone)")
    # 3. ZeRO-3 generate without synced_gpus.
    stage = zero_stage(ctx)
    gen = [g for sc in ctx.scripts for g in sc.generate_without_sync()]
    if stage == 3 and gen:
        causes.append(f"ZeRO-3 with generate() called without synced_gpus=True "
                      f"({len(gen)} call(s) in the script): a rank that finishes generating "
                      "early stops joining the parameter all-gathers (see DS202)")
        fixes.append("pass synced_gpus=True to generate() (Transformers >= 4.28 does it "
                     "by itself only when it knows ZeRO-3 is on: HfDeepSpeedConfig, Trainer, "
                     "Accelerate)")
    elif stage == 3 and op and "ALLGATHER" in str(op).upper():
        causes.append("an all-gather under ZeRO-3 (parameter gathering): ranks took different "
                      "code paths, e.g. generate() without synced_gpus=True, or a forward "
                      "skipped on one rank")
        fixes.append("make every rank run the same forward passes; generate(..., "
                     "synced_gpus=True)")
    elif stage == 3 and not ctx.scripts:
        ctx.missing(rule.code, "generate() calls without synced_gpus", "--script train.py")
    elif stage is None and op and "ALLGATHER" in str(op).upper():
        causes.append("an all-gather timed out; under ZeRO-3 that is parameter gathering, and "
                      "the classic cause is generate() without synced_gpus=True on one rank "
                      "(give --config and --script to check)")
        ctx.missing(rule.code, "the ZeRO stage behind the all-gather", "--config ds_config.json")
    same = table is not None and table.agreement == "same-collective"
    if not causes:
        causes.append("every rank waits in the same collective: a slow step (checkpoint "
                      "saving, evaluation or data loading on one rank) longer than the timeout, "
                      "or a network problem between GPUs/nodes" if same else
                      "a rank that never reached this collective (another code path, a slow "
                      "step on one rank) or a network problem between GPUs/nodes")
    if s.patterns.get("hccl-timeout"):  # Ascend NPUs: HCCL has its own timeouts and logs
        fixes.append("find the rank that did not arrive (each rank's own log); if a step is "
                     "legitimately long, raise "
                     "HCCL_EXEC_TIMEOUT (collectives) or HCCL_CONNECT_TIMEOUT (set-up) on every rank")
    elif culprit is None or culprit.kind == "failed-first":
        # "raise the timeout" only when every rank is seen in the same collective: a desync
        # or a rank that never arrived hangs just the same after a longer timeout
        fixes.append("rerun with NCCL_DEBUG=INFO (and TORCH_DISTRIBUTED_DEBUG=DETAIL) to see "
                     "which rank is missing; " + (
                         "if a step is legitimately long, raise the timeout (Trainer "
                         "--ddp_timeout, deepspeed.init_distributed(timeout=...))" if same else
                         "raise the timeout only once every rank is seen waiting in the same "
                         "collective (a log per rank, or dsdoctor watch --pid while it hangs)"))
    # A peer lost because another rank died is fully explained by that rank's finding.
    if consequence and lost_peer:
        return
    # A timeout that only follows another rank's failure is a consequence, not the problem.
    # A consequence of another failure, or a hang DS202 explains (ZeRO-3 generate without
    # synced_gpus): that finding leads the problem, this one backs it.
    explained = consequence or (stage == 3 and bool(gen))
    yield finding(head + " Likely: " + "; ".join(causes) + ".", fix="; ".join(fixes) + ".",
                  path=path, evidence=s.evidence, severity="warning" if explained else "")


# --------------------------------------------------------------------- DS108 op build failure

#: The first DeepSpeed release whose op builder accepts this CUDA toolkit against a torch built
#: for another minor release of the same major ("the APIs are compatible"): the
#: ``cuda_minor_mismatch_ok`` table of op_builder/builder.py, read at every release tag.
CUDA_MINOR_OK_SINCE: dict[tuple[int, int], tuple[int, int, int]] = {
    **{(10, m): (0, 4, 0) for m in range(3)},
    **{(11, m): (0, 4, 0) for m in range(4)},
    (11, 4): (0, 5, 2), (11, 5): (0, 5, 7), (11, 6): (0, 6, 1), (11, 7): (0, 7, 1),
    (11, 8): (0, 7, 4), (12, 0): (0, 9, 3), (12, 1): (0, 9, 3), (12, 2): (0, 12, 1),
    (12, 3): (0, 12, 1), (12, 4): (0, 14, 3), (12, 5): (0, 14, 3), (12, 6): (0, 15, 3),
    (12, 8): (0, 16, 4), (12, 9): (0, 17, 2),
}
#: DS_SKIP_CUDA_CHECK=1 lets assert_no_cuda_mismatch accept any mismatch from this release on.
SKIP_CUDA_CHECK_SINCE = (0, 9, 3)


def _release(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def _cuda_mismatch_fix(inst: str, torch_cuda: str, ds_v: str | None) -> str:
    """How to get past assert_no_cuda_mismatch for this pair, in the run's DeepSpeed release."""
    fix = f"install the CUDA toolkit torch was built with ({torch_cuda}) and point CUDA_HOME at it"
    inst_v, built_v, dsv = version_tuple(inst), version_tuple(torch_cuda), version_tuple(ds_v)
    if not (inst_v and built_v and inst_v[:1] == built_v[:1]):
        return fix
    a = CUDA_MINOR_OK_SINCE.get((inst_v[0], inst_v[1]))
    b = CUDA_MINOR_OK_SINCE.get((built_v[0], built_v[1]))
    if a and b and (dsv is None or dsv < max(a, b)):
        fix += (f", or upgrade DeepSpeed to {_release(max(a, b))} or later, which accepts CUDA "
                f"{inst} with torch's {torch_cuda}")
    if dsv is None or dsv >= SKIP_CUDA_CHECK_SINCE:
        fix += ("; DS_SKIP_CUDA_CHECK=1 also lets this minor-version mismatch through"
                + (" (DeepSpeed >= 0.9.3)" if dsv is None else ""))
    return fix


def op_build_failure(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS108: a DeepSpeed op failed to build/load: CUDA mismatch, no CUDA_HOME, ninja, ..."""
    s = ctx.symptom("op-build-failure")
    if s is None:
        return
    text = " ".join(e.text for e in s.evidence)
    inst = vals(s, "cuda_installed", "first")
    torch_cuda = vals(s, "cuda_torch", "first")
    op = vals(s, "op", "first")
    lf = log_facts(ctx)
    msgs: list[str] = []
    fixes: list[str] = []
    ds_v = package_version(ctx, "deepspeed")[0]
    if inst and torch_cuda:
        msgs.append(f"the CUDA toolkit found (nvcc {inst}) does not match the CUDA torch was "
                    f"built with ({torch_cuda})")
        fixes.append(_cuda_mismatch_fix(str(inst), str(torch_cuda), ds_v))
    if "CUDA_HOME" in text or "cuda_home" in text.lower():
        msgs.append("CUDA_HOME is not set or has no nvcc: DeepSpeed cannot compile its CUDA ops")
        fixes.append("install the CUDA toolkit (nvcc) matching torch and export "
                     "CUDA_HOME=/usr/local/cuda-X.Y, or use a CUDA devel container")
    symbol = vals(s, "symbol", "first")
    if symbol:
        # The op was built; the process loads an older libstdc++ first (conda's or a package's).
        msgs.append(f"op {op or '?'} was built but cannot be loaded: the libstdc++ loaded first "
                    f"lacks {symbol}")
        fixes.append("make the process load a libstdc++ at least as new as the compiler that "
                     "built the op (conda install -c conda-forge libstdcxx-ng, or put the system "
                     "libstdc++ first with LD_PRELOAD), then delete the op's folder under "
                     "~/.cache/torch_extensions and let it rebuild")
    if "ninja" in text.lower():
        msgs.append("the JIT build needs ninja")
        fixes.append("pip install ninja (and a C++ compiler)")
    if op and not symbol:
        msgs.append(f"op {op!r} failed to build")
    if not fixes:
        fixes.append("read the compiler error above the failure")
    if inst and torch_cuda:
        # setup.py builds each op with builder.builder(), which runs the same CUDA check.
        fixes.append("pre-building the ops (DS_BUILD_OPS=1 pip install deepspeed) does not get "
                     "around it: the install runs the same check")
    else:
        fixes.append("or pre-build the ops at install time: DS_BUILD_OPS=1 (or e.g. "
                     "DS_BUILD_CPU_ADAM=1) pip install deepspeed --no-build-isolation "
                     "--no-cache-dir, then check with ds_report")
    vers = []
    torch_v = package_version(ctx, "torch")[0]
    if torch_v:
        vers.append(f"torch {torch_v}")
    if ds_v:
        vers.append(f"deepspeed {ds_v}")
    for which, v in lf.cuda.items():
        vers.append(f"{which} {v}")
    ver = f" Versions: {', '.join(vers)}." if vers else ""
    if not vers:
        ctx.missing(rule.code, "the torch/CUDA/DeepSpeed versions", "--env snapshot.json")
    yield finding("DeepSpeed op build failed: " + "; ".join(msgs or ["see the log"]) + "." + ver,
                  fix="; ".join(fixes) + ".", evidence=s.evidence)


# ------------------------------------------------------------- DS109 Trainer/DeepSpeed mismatch


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(str(a).strip().strip("'\"")) == float(str(b).strip().strip("'\""))
    except ValueError:
        return False


def trainer_mismatch_in_log(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS109: Transformers/Accelerate refused the config against the arguments."""
    s = ctx.symptom("config-mismatch")
    if s is None:
        return
    ds_keys = s.values.get("ds_key") or []
    ds_vals = s.values.get("ds_value") or []
    hf_keys = s.values.get("hf_key") or []
    hf_vals = s.values.get("hf_value") or []
    ds_keys = ds_keys if isinstance(ds_keys, list) else [ds_keys]
    ds_vals = ds_vals if isinstance(ds_vals, list) else [ds_vals]
    hf_keys = hf_keys if isinstance(hf_keys, list) else [hf_keys]
    hf_vals = hf_vals if isinstance(hf_vals, list) else [hf_vals]
    # Values are aggregated as distinct lists: pair them per evidence line where possible.
    pairs = []
    for e in s.evidence:
        if " vs hf " in e.text and e.text.lstrip("- ").startswith("ds "):
            left, _, right = e.text.lstrip("- ").partition(" vs hf ")
            dk, _, dv = left[3:].partition("=")
            hk, _, hv = right.rpartition("=")
            pairs.append((dk.strip(), dv.strip(), hk.strip(), hv.strip(), e))
    if not pairs and ds_keys and "mixed_precision" not in hf_keys:
        for i, dk in enumerate(ds_keys):
            pairs.append((dk, ds_vals[i] if i < len(ds_vals) else "?",
                          hf_keys[i] if i < len(hf_keys) else "?",
                          hf_vals[i] if i < len(hf_vals) else "?", s.first))
    seen = set()
    for dk, dv, hk, hv, e in pairs:
        if (dk, dv, hk, hv) in seen:
            continue
        seen.add((dk, dv, hk, hv))
        if _same_number(dv, hv):
            msg = (f"The Trainer reports ds {dk}={dv} vs hf {hk}={hv}: the same number. Your "
                   f"JSON writes {dk} as a string (\"{dv}\"), and the Trainer compares the "
                   f"string \"{dv}\" with the number {hv}, so it calls them different.")
            fix = f"Write {dk} as a number: {dv} without quotes (or \"auto\")."
        else:
            msg = (f"The Trainer refused the DeepSpeed config: {dk}={dv} in the config but "
                   f"{hk}={hv} from the Trainer arguments.")
            # In an Accelerate config the key is deleted (its plugin then passes "auto"; the
            # PEFT guide: set these on the command line), as DS311 says for the same pair.
            fix = (f"Delete {dk} from the Accelerate config (Accelerate then passes \"auto\" and "
                   f"the Trainer fills it from --{hk}), or make both say the same value."
                   if ctx.ds_source == "accelerate" else
                   f'Set {dk} to "auto" so the Trainer fills it from its arguments, or make '
                   f"both say the same value.")
        yield finding(msg, fix=fix, path=dk if dk and "|" not in dk else None, evidence=(e,))
    if not pairs:
        hk, hv, dk = (vals(s, n, "first") for n in ("hf_key", "hf_value", "ds_key"))
        if hk and dk:
            msg = (f"Accelerate refused the run: --{hk} {hv} contradicts {dk} in the DeepSpeed "
                   "config file.")
            fix = (f'Make them agree: set --{hk} to match the config, or set the config\'s '
                   f'{dk} section to "auto"/remove it and keep --{hk}.')
        else:
            msg = "The Trainer/Accelerate refused the DeepSpeed config against its arguments."
            fix = 'Use "auto" in the DeepSpeed config for values the Trainer sets.'
        yield finding(msg + f" (line {s.first.line})", fix=fix,
                      path=dk if isinstance(dk, str) else None, evidence=s.evidence)


# ----------------------------------------------------------------- DS110 batch-size assertion


def batch_size_assertion(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS110: DeepSpeed's train_batch_size = micro x accumulation x world assertion failed."""
    s = ctx.symptom("batch-size-mismatch")
    if s is None:
        return
    tb = vals(s, "train_batch", "last")
    mi = vals(s, "micro", "last")
    ac = vals(s, "accum", "last")
    wo = vals(s, "world", "last")
    if not all(isinstance(x, int) for x in (tb, mi, ac, wo)):
        yield finding(f"DeepSpeed's batch-size check failed (line {s.first.line}).",
                      fix="Make train_batch_size = train_micro_batch_size_per_gpu x "
                          "gradient_accumulation_steps x number of GPUs, or set them to \"auto\".",
                      path="train_batch_size", evidence=s.evidence)
        return
    prod = mi * ac * wo
    msg = (f"DeepSpeed requires train_batch_size = micro batch x gradient accumulation x world "
           f"size, but got {tb} != {mi} x {ac} x {wo} = {prod} (line {s.first.line}).")
    if tb % (mi * ac) == 0 and tb // (mi * ac) != wo:
        msg += (f" {tb} would fit {tb // (mi * ac)} GPUs: the run had {wo} rank(s); was the "
                "launcher given fewer GPUs than the config assumes?")
    change = None
    written = ctx.cfg_get("train_batch_size") if ctx.ds_source != "log" else None
    if written == tb:
        change = {"op": "set", "path": "train_batch_size", "old": tb, "new": prod}
    if written == prod and ctx.ds is not None:
        # The config given already has the value the log asks for: it is not the failing run's.
        fix = (f"The config given ({ctx.ds.path}) already has train_batch_size {prod}: the log "
               "is from a run with another config (an older copy, or another file); launch with "
               "this one.")
    else:
        fix = (f"Set train_batch_size to {prod} (or \"auto\" with the Trainer), or remove it and "
               "let DeepSpeed compute it from the other two.")
    yield finding(msg, fix=fix, path="train_batch_size", evidence=s.evidence, change=change)


# --------------------------------------------------------- DS111 offload with client optimizer


def offload_client_optimizer(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS111: ZeRO-Offload refused a client (non-DeepSpeed) optimizer."""
    s = ctx.symptom("offload-client-optimizer")
    if s is None:
        return
    opt = vals(s, "optimizer", "first")
    what = f" ({opt})" if opt else ""
    ds_v = package_version(ctx, "deepspeed")[0]
    old = ""
    dsv = version_tuple(ds_v)
    if dsv is not None and dsv < (0, 8, 3):
        old = (f" DeepSpeed {ds_v} is older than 0.8.3, which added "
               "zero_force_ds_cpu_optimizer: upgrade, or use a config optimizer.")
    if zero_stage(ctx) == 0:
        # DeepSpeed checks the offload device, not the stage (engine.zero_use_cpu_optimizer): at
        # stage 0 a config optimizer is DeepSpeedCPUAdam on GPU parameters, which fails at the
        # first step, and zero_force_ds_cpu_optimizer false only runs yours with no offload.
        yield finding(
            f"ZeRO-Offload was given a client optimizer{what} (line {s.first.line}), and ZeRO is "
            f"off (stage 0, {stage_source(ctx)}): optimizer offload needs stage 1 or more. A config "
            f"optimizer would be DeepSpeedCPUAdam on parameters that stay on the GPU (its first step "
            f"stops at \"CPUAdam param is on cuda:0 and must be 'cpu'\"), and "
            f"zero_force_ds_cpu_optimizer false would run yours on the GPU with the offload doing "
            f"nothing.",
            fix="Set zero_optimization.stage from 0 to 2 (or 3) to offload the optimizer, or delete "
                "zero_optimization.offload_optimizer to keep ZeRO off.",
            path="zero_optimization.stage", evidence=s.evidence)
        return
    yield finding(
        f"ZeRO-Offload was given a client optimizer{what}; DeepSpeed only trusts its own "
        f"CPU optimizer (DeepSpeedCPUAdam) with offload_optimizer (line {s.first.line}).{old}",
        fix='Define the optimizer in the DeepSpeed config ("optimizer": {"type": "AdamW", '
            '"params": {...}}, "auto" values with the Trainer) instead of passing one, or add '
            '"zero_force_ds_cpu_optimizer": false (DeepSpeed >= 0.8.3) to use yours on CPU.',
        path="zero_force_ds_cpu_optimizer", evidence=s.evidence)


# ------------------------------------------------------------------------ DS112 port in use


def port_in_use(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS112: the rendezvous port is taken (often a previous run's ranks still alive)."""
    s = ctx.symptom("port-in-use")
    if s is None:
        return
    launch = log_facts(ctx).best_launch()
    launcher = launch.launcher if launch else None
    port, where = _rendezvous_port(ctx, s)
    if port is None:
        # No input names the port: do not print 29500 as if it were this run's
        yield finding(
            f"The rendezvous port (MASTER_PORT; 29500 unless the launcher or the environment "
            f"sets another) is already in use (line {s.first.line}): another job, or ranks of an "
            "earlier run that did not exit, hold it. The log does not say which port.",
            # The deepspeed launcher overwrites MASTER_PORT from --master_port (launch.py:188
            # at v0.19.5): the variable only counts where the script starts the group itself.
            fix="Stop the old processes (lsof -i :<port> / nvidia-smi), or set another free "
                "port: --master_port <port> (deepspeed, before the script; torchrun), "
                "--main_process_port <port> (accelerate), or MASTER_PORT where the script starts "
                "the process group itself (a notebook: os.environ[\"MASTER_PORT\"]).",
            path="master_port", evidence=s.evidence)
        return
    nxt = port + 1
    flag = {"deepspeed": f"deepspeed --master_port {nxt} ...",
            "torchrun": f"torchrun --master_port {nxt} ...",
            "accelerate": f"accelerate launch --main_process_port {nxt} ..."}.get(
        launcher or "", f"--master_port {nxt} (deepspeed/torchrun), --main_process_port "
                        f"{nxt} (accelerate), or MASTER_PORT={nxt} where the script starts the "
                        "process group itself")
    if where.startswith("os.environ"):
        flag = f"change {where} to another free port, e.g. \"{nxt}\""
    yield finding(
        f"The rendezvous port {port} ({where}) is already in use (line {s.first.line}): "
        "another job, or ranks of an earlier run that did not exit, hold it.",
        fix=f"Stop the old processes (lsof -i :{port} / nvidia-smi), or use another port: {flag}.",
        path="master_port", evidence=s.evidence)


_ENV_PORT = re.compile(r"""environ\[\s*["']MASTER_PORT["']\s*\]\s*=\s*["']?(\d{2,5})""")


def _rendezvous_port(ctx: Context, s: Symptom) -> tuple[int | None, str]:
    """The port that was taken and who says so: the error line, the launch command, the env
    snapshot's MASTER_PORT, or a script (a notebook) setting os.environ["MASTER_PORT"]."""
    port = vals(s, "port", "first")
    if isinstance(port, int):
        return port, "named in the error"
    for la in launches(ctx):
        for opt in ("master_port", "main_process_port"):
            v = la.launcher_options.get(opt)
            if v is not None and str(v).isdigit():
                return int(v), f"--{opt} at {la.location}"
    env_port = ((ctx.env or {}).get("env_vars") or {}).get("MASTER_PORT")
    if env_port is not None and str(env_port).isdigit():
        return int(env_port), "MASTER_PORT in the environment"
    for path, text in ctx.script_sources.items():
        m = _ENV_PORT.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            return int(m.group(1)), f'os.environ["MASTER_PORT"] at {path}:{line}'
    return None, ""


# -------------------------------------------------------------------- DS113 rank exited non-zero

# the kinds that end a run by themselves (the verdict's list), and those that explain an exit
_MORE_SPECIFIC = (*(kind for kind, _ in FATAL_CAUSES), "hang", "config-mismatch", "nan-loss",
                  "loss-scale-collapse")
_SIGNALS = {6: "SIGABRT (an abort: a C++ assertion or a failed CUDA/NCCL call)",
            7: "SIGBUS (often /dev/shm too small in a container: docker --shm-size or --ipc=host)",
            9: "SIGKILL (usually the kernel's OOM killer)",
            11: "SIGSEGV (a segmentation fault in a C++/CUDA extension)",
            15: "SIGTERM (stopped by the launcher after another rank failed, or by the scheduler)"}


def rank_exited_nonzero(ctx: Context, rule: Any) -> Iterator[Finding]:
    """DS113: a rank exited non-zero and nothing more specific explains it."""
    s = ctx.symptom("launcher-nonzero-exit")
    if s is None or any(ctx.has_symptom(k) for k in _MORE_SPECIFIC):
        return
    code = vals(s, "exit_code", "first")
    sig = vals(s, "signal_num", "first")
    if not isinstance(sig, int) and isinstance(code, int) and code < 0:
        sig = -code
    what = f"exit code {code}" if code is not None else "a non-zero exit code"
    if isinstance(sig, int):
        what += f" = signal {sig}" + (f", {_SIGNALS[sig]}" if sig in _SIGNALS else "")
    exc = ctx.symptom("python-exception")
    cause = ""
    ev = list(s.evidence)
    if exc is not None:
        types = exc.values.get("exc_type") or []
        t = types[0] if isinstance(types, list) and types else types
        cause = (f" The first Python exception in the log is {t} at line {exc.first.line}: "
                 f"{exc.first.text[:160]!r}; the rank exit is its consequence.")
        ev[:0] = exc.evidence[:2]
    yield finding(f"A rank exited with {what} (line {s.first.line}).{cause}",
                  fix=("Fix the exception above (it is the cause; the launcher only reports "
                       "it)." if exc is not None else
                       "Look for the first traceback or error printed by the failing rank "
                       "before this line (if it is missing, write one log per rank: deepspeed "
                       "--enable_each_rank_log DIR, which takes a directory)."),
                  evidence=tuple(ev[:8]))
