"""The eval tasks: small real shell tasks, each a prompt, a setup and a verifier.

A task's `setup(ws)` writes the starting files into the fresh workspace `ws` (a pathlib.Path).
Its `verify(ws)` looks only at the workspace afterwards (never at what the model said) and
returns (ok, detail): detail says what was found when it is not ok.

The prompts are written the way a person would ask; they do not mention tern's tools.
"""

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    setup: Callable[[Path], None]
    verify: Callable[[Path], tuple[bool, str]]


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _show(s: str | None, n: int = 80) -> str:
    if s is None:
        return "missing"
    s = s if len(s) <= n else s[:n] + "…"
    return repr(s)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""


def _files(ws: Path) -> list[str]:
    """Every file under ws except tern's own state, as sorted relative paths."""
    out = []
    for root, dirs, names in os.walk(ws):
        dirs[:] = [d for d in dirs if d != ".tern" and d != "__pycache__"]
        for n in names:
            out.append(os.path.relpath(os.path.join(root, n), ws))
    return sorted(out)


# 1. create a file with given content ------------------------------------------------------------

def _hello_setup(ws: Path) -> None:
    pass


def _hello_verify(ws: Path) -> tuple[bool, str]:
    got = _read(ws / "greeting.txt")
    if got is not None and got.rstrip("\n") == "Hello, tern!" and got.count("\n") <= 1:
        return True, ""
    return False, f"greeting.txt: {_show(got)}"


# 2. count the lines of a file -------------------------------------------------------------------

_FRUIT = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape"]


def _count_setup(ws: Path) -> None:
    lines = [f"{_FRUIT[i % len(_FRUIT)]} {i * 7 % 100}" for i in range(37)]
    (ws / "data.txt").write_text("\n".join(lines) + "\n")


def _count_verify(ws: Path) -> tuple[bool, str]:
    got = _read(ws / "count.txt")
    if got is not None and got.strip() == "37":
        return True, ""
    return False, f"count.txt: {_show(got)} (want 37)"


# 3. fix a one-line bug so a test passes ---------------------------------------------------------

_CALC = '''def add(a, b):
    """Return the sum of a and b."""
    return a - b


def mul(a, b):
    """Return the product of a and b."""
    return a * b
'''

_TEST = '''from calc import add, mul

assert add(2, 3) == 5, f"add(2, 3) returned {add(2, 3)}"
assert add(-1, 1) == 0
assert mul(4, 5) == 20
print("all tests passed")
'''


def _fix_setup(ws: Path) -> None:
    (ws / "calc.py").write_text(_CALC)
    (ws / "test_calc.py").write_text(_TEST)


def _fix_verify(ws: Path) -> tuple[bool, str]:
    if _read(ws / "test_calc.py") != _TEST:
        return False, "test_calc.py was changed"
    if not (ws / "calc.py").is_file():
        return False, "calc.py is missing"
    r = subprocess.run(["python3", "test_calc.py"], cwd=ws, capture_output=True, text=True,
                       timeout=20, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if r.returncode == 0 and "all tests passed" in r.stdout:
        return True, ""
    return False, f"python3 test_calc.py exit {r.returncode}: {_show((r.stdout + r.stderr).strip()[-200:], 120)}"


# 4. rename files by a pattern -------------------------------------------------------------------

_DOCS = {"alpha": "first note\n", "beta": "second note\n", "gamma": "third note\n"}


def _rename_setup(ws: Path) -> None:
    (ws / "docs").mkdir()
    for stem, body in _DOCS.items():
        (ws / "docs" / f"{stem}.txt").write_text(body)
    (ws / "docs" / "index.rst").write_text("Index\n=====\n")


def _rename_verify(ws: Path) -> tuple[bool, str]:
    want = sorted([f"docs/{s}.md" for s in _DOCS] + ["docs/index.rst"])
    got = [f for f in _files(ws) if f.startswith("docs/")]
    if got != want:
        return False, f"docs/ holds {got}"
    for stem, body in _DOCS.items():
        if _read(ws / "docs" / f"{stem}.md") != body:
            return False, f"docs/{stem}.md has other content: {_show(_read(ws / 'docs' / f'{stem}.md'))}"
    if _read(ws / "docs" / "index.rst") != "Index\n=====\n":
        return False, "docs/index.rst was changed"
    return True, ""


# 5. extract a value from a JSON file ------------------------------------------------------------

_CONFIG = {"name": "inventory", "version": "2.4.1",
           "server": {"host": "0.0.0.0", "port": 8731, "workers": 4},
           "database": {"host": "db.internal", "port": 5432}}


def _json_setup(ws: Path) -> None:
    (ws / "config.json").write_text(json.dumps(_CONFIG, indent=2) + "\n")


def _json_verify(ws: Path) -> tuple[bool, str]:
    got = _read(ws / "port.txt")
    if got is not None and got.strip() == "8731":
        return True, ""
    return False, f"port.txt: {_show(got)} (want 8731)"


# 6. write an executable shell script ------------------------------------------------------------

def _script_setup(ws: Path) -> None:
    pass


def _script_verify(ws: Path) -> tuple[bool, str]:
    p = ws / "hello.sh"
    if not p.is_file():
        return False, "hello.sh is missing"
    if not os.access(p, os.X_OK):
        return False, f"hello.sh is not executable; it holds {_show(_read(p))}"
    try:
        r = subprocess.run(["./hello.sh"], cwd=ws, capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"./hello.sh did not run: {e}"
    if r.returncode == 0 and r.stdout.strip() == "Hello from the script":
        return True, ""
    return False, f"./hello.sh exit {r.returncode}, printed {_show(r.stdout + r.stderr)}"


# 7. append a line without clobbering ------------------------------------------------------------

_TODO = "call the plumber\nrenew passport\nwater the plants\n"


def _append_setup(ws: Path) -> None:
    (ws / "todo.txt").write_text(_TODO)


def _append_verify(ws: Path) -> tuple[bool, str]:
    got = _read(ws / "todo.txt")
    if got is not None and got.rstrip("\n").split("\n") == _TODO.rstrip("\n").split("\n") + ["buy milk"]:
        return True, ""
    return False, f"todo.txt: {_show(got, 120)}"


# 8. a two-step task -----------------------------------------------------------------------------

_LOGS = {"app.log": "started\nready\n", "db.log": "connected\n", "worker.log": "idle\n"}


def _backup_setup(ws: Path) -> None:
    (ws / "logs").mkdir()
    for n, body in _LOGS.items():
        (ws / "logs" / n).write_text(body)
    (ws / "logs" / "notes.txt").write_text("not a log\n")


def _backup_verify(ws: Path) -> tuple[bool, str]:
    b = ws / "backup"
    if not b.is_dir():
        return False, "backup/ is missing"
    logs = sorted(f for f in _files(b) if f.endswith(".log"))
    if logs != sorted(_LOGS):
        return False, f"backup/ holds {_files(b)}"
    for n, body in _LOGS.items():
        if _read(b / n) != body:
            return False, f"backup/{n} differs"
        if _read(ws / "logs" / n) != body:
            return False, f"logs/{n} was changed or moved"
    if (b / "notes.txt").exists():
        return False, "backup/notes.txt was copied too"
    got = _read(b / "count.txt")
    if got is None or got.strip() != "3":
        return False, f"backup/count.txt: {_show(got)} (want 3)"
    return True, ""


TASKS = [
    Task("hello_file",
         "Create a file named greeting.txt whose only line is: Hello, tern!",
         _hello_setup, _hello_verify),
    Task("count_lines",
         "How many lines does data.txt have? Write just that number into a new file count.txt.",
         _count_setup, _count_verify),
    Task("fix_python",
         "Running `python3 test_calc.py` fails. Fix the bug in calc.py so the test passes. "
         "Do not edit test_calc.py.",
         _fix_setup, _fix_verify),
    Task("rename_ext",
         "In the docs folder, rename every file ending in .txt so that it ends in .md instead. "
         "Leave the other files as they are.",
         _rename_setup, _rename_verify),
    Task("json_value",
         "config.json has a server section. Write the server's port number (only the number) "
         "into a file named port.txt.",
         _json_setup, _json_verify),
    Task("script_exec",
         "Write a bash script hello.sh that prints the line Hello from the script, "
         "and make it executable so ./hello.sh runs it.",
         _script_setup, _script_verify),
    Task("append_line",
         "Add the line buy milk at the end of todo.txt. Keep the lines that are already there.",
         _append_setup, _append_verify),
    Task("backup_logs",
         "Create a folder named backup, copy every .log file from the logs folder into it, "
         "then write how many files you copied into backup/count.txt.",
         _backup_setup, _backup_verify),
]

BY_NAME = {t.name: t for t in TASKS}
