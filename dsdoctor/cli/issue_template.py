"""``dsdoctor issue-template``: write a GitHub issue form for training failures into a project."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dsdoctor.errors import UsageError


def run(args: argparse.Namespace) -> int:
    """Handler of ``dsdoctor issue-template``."""
    from dsdoctor.render import issue_form
    from dsdoctor.safeio import write_new_file

    text = issue_form.template_text()
    problems = issue_form.validate_form(issue_form.load_form(text))
    if problems:  # a broken shipped form is our bug; GitHub would silently ignore it
        raise RuntimeError("shipped issue form is invalid: " + "; ".join(problems))
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    if args.output is None:  # the repository's own .github/, never that of whatever folder
        root = git_root(Path.cwd())
        if root is None:
            raise UsageError("not inside a git repository: pass -o FILE (or -o - for stdout), or "
                             f"run it in the repository that should get {issue_form.DEFAULT_PATH}")
        out = root / issue_form.DEFAULT_PATH
        if out.exists() and not args.force:  # a path the user did not name: never replaced silently
            raise UsageError(f"{out}: already exists; pass --force to overwrite it")
    else:
        out = Path(args.output)  # named with -o: replaced, as grep and curl do
    if out.is_dir():
        raise UsageError(f"{out}: is a directory; pass the file to write, e.g. {out / issue_form.TEMPLATE_NAME}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write ({exc.strerror or exc}); choose another --output") from None
    # atomic, never through a link, never a device; a file named with -o is replaced, the
    # default path only with --force (checked above)
    write_new_file(str(out), text.encode("utf-8"), [], True, 0o666, "--output")
    print(f"dsdoctor: wrote {out}; commit it and GitHub offers it under 'New issue'", file=sys.stderr)
    return 0


def git_root(start: Path) -> Path | None:
    """The work tree at or above ``start`` (a ``.git`` folder, or the ``.git`` file of a worktree
    or submodule), or None; git itself is not run."""
    for folder in (start.resolve(), *start.resolve().parents):
        if (folder / ".git").exists():
            return folder
    return None


def register(subparsers: Any) -> None:
    """Add the ``issue-template`` subcommand."""
    from dsdoctor.render.issue_form import DEFAULT_PATH

    p = subparsers.add_parser(
        "issue-template", help="write a GitHub issue form asking for dsdoctor env/analyze output",
        description="Write a GitHub issue form for your own project that asks reporters of a failed "
        "training run for 'dsdoctor env' and 'dsdoctor analyze' output, the config and the launch "
        "command.")
    p.add_argument("--output", "-o", default=None, metavar="PATH",
                   help=f"where to write it, replaced if it exists ('-' for stdout; default: "
                   f"{DEFAULT_PATH} of the git repository this runs in)")
    p.add_argument("--force", action="store_true",
                   help=f"overwrite an existing {DEFAULT_PATH} (without -o)")
    p.set_defaults(func=run)
