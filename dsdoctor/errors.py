"""Errors the user can fix: always one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """Bad usage or unreadable input. The message is one line naming the file and what to do."""

    exit_code = 2
