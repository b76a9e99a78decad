#!/usr/bin/env python3
"""Write docs/api.md, the Python API's reference, from the public functions' signatures and docstrings.

    .venv/bin/python scripts/make-api-doc.py          # rewrite docs/api.md
    .venv/bin/python scripts/make-api-doc.py --check  # exit 1 when docs/api.md is stale (tests/test_api_options.py)

One table lists every keyword argument once, with the jobs that take it, so one name means one thing across
scan, copy, remove, sync, verify and diff; then each function's signature and docstring as ``help()`` shows them.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "docs" / "api.md"
JOBS = ("scan", "copy", "remove", "sync", "verify", "diff")
OTHERS = ("open_manifest", "connect")


def _default(p: inspect.Parameter) -> str:
    return "" if p.default is inspect.Parameter.empty else repr(p.default)


def render() -> str:
    import dask_pfs
    from dask_pfs.options import OPTIONS

    functions = {name: getattr(dask_pfs, name) for name in (*JOBS, *OTHERS)}
    takers: dict[str, list[str]] = {}
    for name in JOBS:
        for p in inspect.signature(functions[name]).parameters.values():
            if p.kind is not inspect.Parameter.VAR_KEYWORD:
                takers.setdefault(p.name, []).append(name)
    lines = [
        "# Python API reference",
        "",
        "Generated from the signatures and docstrings by `scripts/make-api-doc.py` (do not edit by hand).",
        "`from dask_pfs import scan, copy, remove, sync, verify, diff, open_manifest, connect`.",
        "Errors: `dask_pfs.errors` (every one a `PfsError`; a message names the Python argument).",
        "",
        "## Arguments of the jobs",
        "",
        "Each argument has one name in every job that takes it; the CLI's flag of the same option is",
        "`--` and the name with dashes (`dask_pfs.options`).",
        "",
        "| argument | jobs | about |",
        "|---|---|---|",
    ]
    for arg in sorted(takers):
        about = OPTIONS[arg].help if arg in OPTIONS else ""
        lines.append(f"| `{arg}` | {', '.join(takers[arg])} | {about} |")
    for name, fn in functions.items():
        lines += ["", f"## `{name}{inspect.signature(fn)}`", "", inspect.cleandoc(fn.__doc__ or "").strip()]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run scripts/make-api-doc.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
