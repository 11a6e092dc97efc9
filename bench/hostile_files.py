"""Hostile files given to the offline commands: how long each takes, its peak resident
memory, its exit code and how many lines it prints on stderr.

    python bench/hostile_files.py

Each case is a fresh `spanscore` process (`inspect`, or `agree` for the labels file):
/dev/zero (no newline, ever); a ~1 MB gzip holding a 1 GiB line; 5 MiB of random bytes;
a million `[`; a labels CSV with a 140,000-character field. The sample session
(examples/weather-agent.json) is the yardstick. Peak memory is the child's ru_maxrss
(os.wait4); figures are for one run on this machine.
"""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
MIB = 2**20


def measure(arguments: list[str]) -> tuple[float, float, int, int]:
    """Seconds, peak MiB, exit code and stderr lines of one `spanscore` run."""
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-m", "spanscore", *arguments], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().count(b"\n")
    return seconds, usage.ru_maxrss / 1024, child.returncode, lines


def gzip_bomb(path: Path) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as f:
        chunk = b"x" * (16 * MIB)
        f.write(b'{"resourceSpans":[],"pad":"')
        for _ in range(GIB // len(chunk)):
            f.write(chunk)
        f.write(b'"}\n')
    return path


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        bomb = gzip_bomb(work / "bomb.jsonl.gz")
        noise = work / "random.bin"
        noise.write_bytes(random.Random(7).randbytes(5 * MIB))
        brackets = work / "brackets.json"
        brackets.write_text("[" * 1_000_000)
        labels = work / "labels.csv"
        labels.write_text(
            "trace_id,metric,label,note\n" + f'{"1" * 32},task_completion,pass,"{"x" * 140_000}"\n', encoding="utf-8"
        )
        scored = ROOT / "examples" / "weather-agent.json"
        cases = [
            ("sample session (yardstick)", ["inspect", str(scored)]),
            ("/dev/zero", ["inspect", "/dev/zero"]),
            (f"gzip bomb ({bomb.stat().st_size / MIB:.1f} MiB -> 1 GiB line)", ["inspect", str(bomb)]),
            ("5 MiB of random bytes", ["inspect", str(noise)]),
            ("a million [", ["inspect", str(brackets)]),
            ("labels CSV, 140,000-char field", ["agree", str(scored), "--labels", str(labels)]),
        ]
        print(f"{'case':<44}{'seconds':>9}{'peak MiB':>10}{'exit':>6}{'stderr lines':>14}")
        for name, arguments in cases:
            seconds, peak, code, lines = measure(arguments)
            print(f"{name:<44}{seconds:>9.2f}{peak:>10.0f}{code:>6}{lines:>14}")


if __name__ == "__main__":
    main()
