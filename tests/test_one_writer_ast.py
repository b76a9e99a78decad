"""No write of pfs's own goes around the one writer (``operators/core/outputs.py``, issue 42 A).

Walks the syntax tree of every module of ``operators/``, ``dask_pfs/`` and ``airflow_pfs/`` and fails
on an open for writing, a rename or replace, a directory made, a pyarrow/DuckDB/fsspec write or a
``json.dump`` to a file, anywhere but in the writer and the destination code named in ``ALLOWED``
(what cp and sync write inside the user's target tree, which has its own temp-file-and-rename
protocol relative to the pinned destination).
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("operators", "dask_pfs", "airflow_pfs")

# module (path) or module:function -> why it may write without the writer (one line each)
ALLOWED = {
    "operators/core/outputs.py": "the one writer itself",
    "operators/copy/local_destination.py": "destination: a copy's files, temp + renameat inside the pinned target tree",
    "operators/copy/pinned.py": "destination: directories made and renamed relative to the pinned target root",
    "operators/copy/fsspec_destination.py": "destination: directories of a copy's target on an object store",
    "operators/copy/sources.py": "destination: a copied file's bytes into the target's open file or object",
    "dask_pfs/urls.py:make_root": "destination: the target root of cp/sync the user named (mkdir -p)",
    "dask_pfs/demo.py:make_sample_tree": "the demo's sample source tree, in a directory the user named",
    "dask_pfs/demo.py:demo_dir": "the demo's own directory, made 0700 by mkdir (which never follows a link)",
    "dask_pfs/warm/job.py:_text": "wraps a stdio descriptor the client passed, opens no name",
    "dask_pfs/commands/query.py:_to_descriptor": "writes a descriptor the caller named (-o /dev/fd/3), opens no name",
    "dask_pfs/manifests/sql_probe.py:_forked": "a pipe from the forked probe to its parent: opens no name",
    "operators/core/localfs.py:open": "refuses every writing mode (reads only); the check itself names the modes",
    "operators/copy/multipart.py:_reader": "opens the source O_RDONLY (the flags name O_NOFOLLOW, not a write)",
}

WRITE_CALLS = {
    "rename",
    "renames",
    "makedirs",
    "mkdir",
    "write_text",
    "write_bytes",
    "write_table",
    "write_to_dataset",
    "write_dataset",
    "ParquetWriter",
    "to_parquet",
    "to_csv",
    "pipe",
    "pipe_file",
    "put_file",
    "touch",
    "mv",
}
OS_WRITES = {"rename", "replace", "renames", "link", "symlink", "makedirs", "mkdir", "mkfifo", "mknod", "truncate"}
SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"}
WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND"}
COPY_TO = re.compile(r"\bCOPY\b[\s\S]*\bTO\b")  # SQL keywords as pfs writes them


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_mode(node: ast.AST | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True  # a mode computed at run time: cannot be shown read-only


def _violation(call: ast.Call) -> str | None:
    f = call.func
    name = _name(f)
    owner = _name(f.value) if isinstance(f, ast.Attribute) else ""
    if isinstance(f, ast.Name) and name == "open" and _writes_mode(_mode(call, 1)):
        return "open() for writing"
    if owner == "os" and name == "open":
        args = call.args[1:2]
        flags = {n.attr for a in args for n in ast.walk(a) if isinstance(n, ast.Attribute)}
        return "os.open() that creates or writes" if flags & WRITE_FLAGS else None
    if owner == "os" and name == "fdopen" and _writes_mode(_mode(call, 1)):
        return "os.fdopen() for writing"
    if isinstance(f, ast.Attribute) and name == "open" and owner != "os":
        first = call.args[0] if call.args else None
        path_open = (
            isinstance(first, ast.Constant) and isinstance(first.value, str) and set(first.value) <= set("rwxabt+")
        )
        if _writes_mode(first if path_open else _mode(call, 1)):  # Path.open("w") / fs.open(path, "wb")
            return f"{owner}.open() for writing"
    if owner == "os" and name in OS_WRITES:
        return f"os.{name}()"
    if owner == "shutil" and name in SHUTIL_WRITES:
        return f"shutil.{name}()"
    if owner == "json" and name == "dump":
        return "json.dump() to a file"
    if name in WRITE_CALLS:
        return f"{name}()"
    if isinstance(f, ast.Attribute) and name == "replace" and len(call.args) == 1 and not call.keywords:
        return ".replace(target): a rename"
    return None


def _root(node: ast.AST) -> str:
    """The name an expression starts from: ``d`` of ``d.replace(x).file``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _writer_names(func: ast.AST) -> set[str]:
    """Names bound to what the writer gave (``with outputs.open_dir(p) as d, d.replace(n) as t``,
    ``sink = stack.enter_context(outputs.output_file(url))``): writes into them are the writer's."""
    bound = {"outputs"}
    for _ in range(4):  # to a fixed point (a name bound from a bound name)
        for node in ast.walk(func):
            pairs: list[tuple[ast.AST, ast.AST | None]] = []
            if isinstance(node, (ast.With, ast.AsyncWith)):
                pairs = [(i.context_expr, i.optional_vars) for i in node.items]
            elif isinstance(node, ast.Assign):
                pairs = [(node.value, t) for t in node.targets]
            for value, target in pairs:
                calls = [c for c in ast.walk(value) if isinstance(c, ast.Call)]
                if target is not None and any(_root(c.func) in bound for c in calls):
                    bound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                    bound |= {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)}
    return bound


def _into_writer(call: ast.Call, bound: set[str]) -> bool:
    """A write whose receiver or target is the writer's (its open temp file, its directory)."""
    f = call.func
    if isinstance(f, ast.Attribute) and (_root(f.value) in bound or _name(f.value) in bound):
        return True
    if _name(f) in ("write_table", "ParquetWriter", "write_dataset", "write_to_dataset"):
        targets = call.args[1:2] if _name(f) != "ParquetWriter" else call.args[:1]
        if isinstance(f, ast.Attribute) and _name(f.value) not in ("pq", "parquet", "ds", "dataset"):
            return True  # writer.write_table(table): a ParquetWriter already opened (on a checked target)
        return any(_root(t) in bound or _name(t) in bound for t in targets)
    return False


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def _violations() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ALLOWED:
                continue
            tree = ast.parse(path.read_text(), rel)
            docs = _docstrings(tree)
            funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for func in funcs:  # outermost first: an inner function's name wins
                bound = _writer_names(func)
                for node in ast.walk(func):
                    node._pfs_func = func.name  # type: ignore[attr-defined]
                    node._pfs_bound = bound  # type: ignore[attr-defined]
            for node in ast.walk(tree):
                where = f"{rel}:{getattr(node, '_pfs_func', '<module>')}"
                if where in ALLOWED:
                    continue
                if isinstance(node, ast.Call) and (what := _violation(node)):
                    if not _into_writer(node, getattr(node, "_pfs_bound", {"outputs"})):
                        found.append(f"{where} line {node.lineno}: {what}")
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and COPY_TO.search(node.value)
                ):
                    found.append(f"{where} line {node.lineno}: a DuckDB COPY ... TO")
    return found


def test_every_write_goes_through_the_one_writer():
    found = _violations()
    assert not found, "writes around operators/core/outputs.py:\n" + "\n".join(found)


def test_the_allow_list_names_real_code():
    """An allow-list entry whose module or function is gone is removed, not kept as a loophole."""
    for entry in ALLOWED:
        module, _, func = entry.partition(":")
        tree = ast.parse((ROOT / module).read_text())
        if func:
            assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in ast.walk(tree)), entry


def test_the_checker_sees_the_old_unsafe_writes():
    """The patterns issue 42 found (a predictable temp name written by path, then renamed) are flagged."""
    old = (
        "def f(tmp, final, data, table):\n"
        "    with open(tmp, 'w') as f:\n"
        "        f.write(data)\n"
        "    os.replace(tmp, final)\n"
        "    pq.write_table(table, tmp)\n"
        "    os.makedirs(final, exist_ok=True)\n"
        "    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "    pathlib.Path(tmp).replace(final)\n"
        "    with pathlib.Path(tmp).open('w') as g, fs.open(tmp, 'wb') as h:\n"
        "        json.dump(data, g)\n"
        "    con.execute(\"COPY t TO 'x.parquet'\")\n"
    )
    calls = [n for n in ast.walk(ast.parse(old)) if isinstance(n, ast.Call)]
    flagged = [_violation(c) for c in calls]
    assert sum(v is not None for v in flagged) == 9, flagged
    assert COPY_TO.search("COPY t TO 'x.parquet'")
