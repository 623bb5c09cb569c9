"""Inputs given in the wrong place: a DeepSpeed or Accelerate config passed as a LOG, or a log
passed as ``--config``.

``dsdoctor analyze ds_config.json`` scanned the config as a log, found no failure and said
HEALTHY. A file that parses as a whole JSON object with DeepSpeed's top-level keys (or a YAML
mapping ``accelerate config`` wrote) is a config: the user is told to pass it with ``--config``.
The other way round, ``--config train.log`` failed with a YAML syntax error about the log's first
``[2023-...`` timestamp; a --config file whose lines are log lines is named a log instead.
``analyze``, ``report`` and ``watch`` check their inputs with :func:`refuse_misplaced`.
"""

from __future__ import annotations

import os
import re

from dsdoctor.errors import UsageError

#: Top-level keys of a DeepSpeed config (docs/config-json); two of them make a config, so that a
#: JSON record that merely has a ``fp16`` field is not taken for one.
DEEPSPEED_KEYS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "zero_optimization", "fp16", "bf16", "optimizer", "scheduler", "gradient_clipping",
    "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
    "activation_checkpointing", "flops_profiler", "amp", "communication_data_type",
    "prescale_gradients", "zero_force_ds_cpu_optimizer", "data_types", "aio",
})
#: Configs are small; a bigger file is a log, and is not read twice.
LIMIT = 1024 * 1024


def config_kind(path: str) -> str | None:
    """"a DeepSpeed config" / "an Accelerate config" when ``path`` is one, else None. Never
    raises: a file that cannot be read or parsed is left to the log reader."""
    if path == "-" or not path.lower().endswith((".json", ".yaml", ".yml", ".jsonc", ".json5")):
        return None
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > LIMIT:
            return None
        with open(path, "rb") as fh:
            raw = fh.read(LIMIT + 1)
        text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    from dsdoctor.facts import configfile  # noqa: PLC0415 - only when a LOG might be a config

    try:
        if text.lstrip().startswith("{"):
            data = configfile.parse_json(text, path)[0]
            return ("a DeepSpeed config" if isinstance(data, dict)
                    and len(DEEPSPEED_KEYS & set(data)) >= 2 else None)
        data = configfile.parse_yaml(text, path)[0]
    except (UsageError, ValueError, TypeError, RecursionError):
        return None
    return ("an Accelerate config" if isinstance(data, dict)
            and configfile.looks_like_accelerate(data) else None)


def refuse_configs_as_logs(logs: list[str]) -> None:
    """UsageError (exit 2, one line) for the first LOG that is a config."""
    for path in logs:
        kind = config_kind(path)
        if kind is not None:
            raise UsageError(f"{path}: this is {kind}, not a log; pass it with --config {path} "
                             "(alone for a pre-flight check, or beside the run's log)")


#: Lines only a log has: a logger's bracketed timestamp (DeepSpeed, torch's "[2024-..."), glog's
#: "I0509 04:41:16.315" / "W1214 07:47:09.552000 ...", a traceback header, a rank prefix, the
#: Trainer's progress dict, the launcher's "[INFO|WARNING ...]" prefix.
_LOG_LINE = re.compile(
    r"^(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ |Traceback \(most recent call last\)"
    r"|\[rank\d+\]:|\{'loss': |\[(?:INFO|WARNING|ERROR)\|)", re.M)
#: How much of a --config file is looked at for log lines.
_LOG_PEEK = 64 * 1024


def looks_like_log(path: str) -> bool:
    """True when ``path`` (given as --config) is a log: it has log lines and is no JSON/YAML
    mapping. Never raises: a file that cannot be read is left to the config reader's error."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as fh:
            text = fh.read(_LOG_PEEK).decode("utf-8", "replace")
    except OSError:
        return False
    if not _LOG_LINE.search(text):
        return False
    if text.lstrip().startswith("{"):
        return False  # JSON: its strings hold no line starts, so no log line can be in it
    from dsdoctor.facts import configfile  # noqa: PLC0415 - only for a --config with log lines

    try:
        data = configfile.parse_yaml(text, path)[0]
    except (UsageError, ValueError, TypeError, RecursionError):
        return True
    return not isinstance(data, dict)


def refuse_logs_as_configs(configs: list[str]) -> None:
    """UsageError (exit 2, one line) for the first --config that is a log."""
    for path in configs:
        if looks_like_log(path):
            raise UsageError(f"{path}: this is a log, not a config; pass it as a LOG (without "
                             "--config), and the run's ds_config.json with --config")


def refuse_misplaced(logs: list[str], configs: list[str]) -> None:
    """The checks of this module, for the commands that take LOGs and --config."""
    refuse_configs_as_logs(logs)
    refuse_logs_as_configs(configs)
