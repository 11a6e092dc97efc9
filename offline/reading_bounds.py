"""The bounds of what the offline commands read and print, whatever a file holds.

One home for the limits the trace files (`otlp_files`) and the labels files of `agree`
(`human_labels`, `trail_labels`) are read within:

- a line, or a file read whole, of more than MAX_DOCUMENT_BYTES is not read (`read_whole`
  refuses such a file in one problem);
- past MAX_REPORTED_LINES problems by line in one file, the rest are counted in one line,
  not listed (`LineProblems`);
- a command prints at most MAX_PROBLEMS_SHOWN problems in all, then how many more there
  are (`shown_problems`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spanscore.core.quoting import excerpt
from spanscore.core.wording import counted

MAX_DOCUMENT_BYTES = 128 * 2**20  # a line, or a file read whole
MAX_REPORTED_LINES = 10  # problems by line listed per file; the rest are counted
MAX_PROBLEMS_SHOWN = 50  # problems a command prints in all; the rest are counted


@dataclass
class LineProblems:
    """A file's problems by line: the first MAX_REPORTED_LINES are appended to `problems`,
    the rest only counted, their count appended by `close` (`what` names one of them)."""

    path: Path
    problems: list[str]
    what: str = "broken line"
    count: int = 0

    def add(self, number: int, message: str) -> None:
        self.count += 1
        if self.count <= MAX_REPORTED_LINES:
            self.problems.append(f"{self.path}:{number}: {message}")

    def close(self) -> None:
        if self.count > MAX_REPORTED_LINES:
            more = counted(self.count - MAX_REPORTED_LINES, f"more {self.what}")
            self.problems.append(f"{self.path}: {more} not listed")


def read_whole(path: Path, what: str, problems: list[str], encoding: str = "utf-8") -> str | None:
    """The text of a file read whole, such as a labels file; None, with the problem
    appended, when it cannot be read, is not UTF-8 or holds more than MAX_DOCUMENT_BYTES
    (`what` names the file in that problem: "a labels file")."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        problems.append(f"{path}: cannot read: {excerpt(str(exc.strerror or exc))}")
        return None
    if len(data) > MAX_DOCUMENT_BYTES:
        problems.append(f"{path}: {what} larger than {size_text(MAX_DOCUMENT_BYTES)}: not read")
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None


def shown_problems(problems: Sequence[str]) -> list[str]:
    """The lines a command prints for `problems`: the first MAX_PROBLEMS_SHOWN, then how
    many more there are."""
    shown = list(problems[:MAX_PROBLEMS_SHOWN])
    if len(problems) > MAX_PROBLEMS_SHOWN:
        shown.append(f"... and {len(problems) - MAX_PROBLEMS_SHOWN:,} more problems")
    return shown


def size_text(size: int) -> str:
    """`128 MiB`, or `2,000 bytes` when not whole MiB."""
    return f"{size // 2**20} MiB" if size >= 2**20 and size % 2**20 == 0 else f"{size:,} bytes"
