"""The offline readers are bounded whatever a file holds: line and document size, the
problems listed, nesting depth; one clear message and exit code 2, never a traceback or
gigabytes read."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import pytest

from spanscore.cli import main
from spanscore.core.otlp_json import encode_request
from spanscore.offline import inspect, otlp_files, reading_bounds
from spanscore.offline.human_labels import read_labels_file
from spanscore.offline.trail_labels import BUILT_IN_MAPPING, read_mapping, read_trail_labels
from tests.support.agreement_files import scored_root, write_labels, write_scored
from tests.support.processes import ROOT, run_spanscore
from tests.support.spans import AGENT_ROOT, request_of, span

WEATHER = ROOT / "examples" / "weather-agent.json"
MIB = 2**20


def run_inspect(*paths: Path) -> tuple[int, str, list[str]]:
    out, err = io.StringIO(), io.StringIO()
    code = inspect.run([str(p) for p in paths], False, out=out, err=err)
    return code, out.getvalue(), err.getvalue().splitlines()


def agent_line(number: int) -> str:
    trace_id = number.to_bytes(16, "big")
    return encode_request(request_of([span(trace_id, f"run {number}", attributes=AGENT_ROOT)]))


def score_config(directory: Path) -> Path:
    """A config scoring without a judge (hashing embedder): `score` runs in a second."""
    config = directory / "config.yaml"
    config.write_text(
        "processors: {assembler: {trace_wait: 100ms}, embedding_metrics: {embedder: {type: hashing}}}\n"
        "exporters: {file: {path: unused.jsonl}}\n"
        "receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [assembler, embedding_metrics], "
        "exporters: [file]}}}\n",
        encoding="utf-8",
    )
    return config


def padded(line: str, size: int) -> str:
    """`line` (a JSON object) grown to exactly `size` bytes by a field no reader knows."""
    head = line[:-1] + ',"pad":"'
    return head + "x" * (size - len(head) - 2) + '"}'


# Size -------------------------------------------------------------------------------------


def test_the_default_limit_stops_a_gzip_line_just_over_it(tmp_path):
    # 128 MiB + 1 byte of one line, built in chunks: the file on disk is a few hundred KiB.
    path = tmp_path / "huge-line.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"resourceSpans":[],"pad":"')
        written = 27
        chunk = b"x" * MIB
        while written + len(chunk) <= reading_bounds.MAX_DOCUMENT_BYTES:
            f.write(chunk)
            written += len(chunk)
        f.write(b"x" * (reading_bounds.MAX_DOCUMENT_BYTES + 1 - written))
    assert reading_bounds.MAX_DOCUMENT_BYTES == 128 * MIB
    result = run_spanscore("inspect", path)
    assert result.returncode == 2
    assert result.stderr == f"spanscore inspect: {path}:1: a line longer than 128 MiB: the file is not read on\n"
    assert result.stdout == ""


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_is_read_to_the_limit_not_on():
    result = run_spanscore("inspect", "/dev/zero")
    assert result.returncode == 2
    assert result.stderr == "spanscore inspect: /dev/zero:1: a line longer than 128 MiB: the file is not read on\n"


def test_a_line_at_the_limit_is_read_and_one_over_it_stops_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", 2000)
    path = tmp_path / "lines.jsonl"
    lines = [padded(agent_line(1), 2000), padded(agent_line(2), 2001), agent_line(3)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, problems = run_inspect(path)
    assert code == 2
    assert problems == [f"spanscore inspect: {path}:2: a line longer than 2,000 bytes: the file is not read on"]
    assert out.splitlines()[-1] == "1 trace in 1 file (OTLP/JSON); 1 would be scored"


def test_a_pretty_printed_document_over_the_limit_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", 4000)
    assert WEATHER.stat().st_size > 4000
    code, out, problems = run_inspect(WEATHER)
    assert code == 2
    assert problems == [f"spanscore inspect: {WEATHER}: a JSON document larger than 4,000 bytes: not read"]
    assert out == ""
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", WEATHER.stat().st_size)
    assert run_inspect(WEATHER)[0] == 0


def test_a_long_run_of_blank_lines_stops_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(otlp_files, "MAX_BLANK_LINES", 100)
    path = tmp_path / "blank.jsonl.gz"
    path.write_bytes(gzip.compress((agent_line(1) + "\n" * 100 + agent_line(2) + "\n" * 102 + agent_line(3)).encode()))
    code, out, problems = run_inspect(path)
    assert code == 2
    assert problems == [f"spanscore inspect: {path}:202: over 100 blank lines in a row: the file is not read on"]
    assert out.splitlines()[-1] == "2 traces in 1 file (gzipped OTLP/JSON); 2 would be scored"


def test_a_pretty_printed_document_stopped_at_its_second_line_is_one_problem(tmp_path, monkeypatch):
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", 1000)
    path = tmp_path / "doc.json"
    path.write_text("{\n\n" + '  "resourceSpans": [' + " " * 2000 + "]\n}\n", encoding="utf-8")
    code, out, problems = run_inspect(path)
    assert (code, out) == (2, "")
    assert problems == [f"spanscore inspect: {path}:3: a line longer than 1,000 bytes: the file is not read on"]


# Problems listed ---------------------------------------------------------------------------


def test_random_bytes_give_a_dozen_lines_not_thousands(tmp_path):
    path = tmp_path / "random.bin"
    path.write_bytes(random.Random(7).randbytes(5 * MIB))
    result = run_spanscore("inspect", path)
    assert result.returncode == 2
    problems = result.stderr.splitlines()
    assert len(problems) == reading_bounds.MAX_REPORTED_LINES + 2
    assert all(p.startswith(f"spanscore inspect: {path}:") for p in problems)
    assert problems[-2] == (
        f"spanscore inspect: {path}: not read on after 1,000 broken lines and none readable: not trace JSON lines"
    )
    assert problems[-1] == f"spanscore inspect: {path}: 990 more broken lines not listed"
    assert "Traceback" not in result.stderr


def test_past_ten_broken_lines_of_a_file_the_rest_are_counted_and_the_good_lines_read(tmp_path):
    path = tmp_path / "mostly-broken.jsonl"
    path.write_text("\n".join(["{not json"] * 25 + [agent_line(n) for n in range(1, 6)]) + "\n", encoding="utf-8")
    code, out, problems = run_inspect(path)
    assert code == 2
    assert problems == [
        *(
            f"spanscore inspect: {path}:{n}: invalid JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)"
            for n in range(1, 11)
        ),
        f"spanscore inspect: {path}: 15 more broken lines not listed",
    ]
    assert out.splitlines()[-1] == "5 traces in 1 file (OTLP/JSON); 5 would be scored"


def test_inspect_prints_fifty_problems_then_counts_the_rest(tmp_path):
    paths = []
    for n in range(6):
        path = tmp_path / f"broken-{n}.jsonl"
        path.write_text('{"foo": 1}\n' * 12, encoding="utf-8")
        paths.append(path)
    code, _, problems = run_inspect(*paths)
    assert code == 2
    assert len(problems) == reading_bounds.MAX_PROBLEMS_SHOWN + 1 == 51
    assert problems[-1] == "spanscore inspect: ... and 16 more problems"  # 6 files x (10 listed + 1 count) = 66


# Nesting ----------------------------------------------------------------------------------


def test_a_million_brackets_are_one_broken_document_not_a_recursion_error(tmp_path):
    path = tmp_path / "brackets.json"
    path.write_text("[" * 1_000_000, encoding="utf-8")
    result = run_spanscore("inspect", path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"spanscore inspect: {path}:1: invalid JSON: nested too deeply\n"


def test_deep_nesting_on_a_line_is_that_lines_problem(tmp_path):
    path = tmp_path / "lines.jsonl"
    deep = '{"resourceSpans": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text("\n".join([agent_line(1), deep, agent_line(2)]) + "\n", encoding="utf-8")
    code, out, problems = run_inspect(path)
    assert code == 2
    assert problems == [f"spanscore inspect: {path}:2: invalid JSON: nested too deeply"]
    assert out.splitlines()[-1] == "2 traces in 1 file (OTLP/JSON); 2 would be scored"


def test_score_reports_deep_nesting_and_a_broken_gzip_without_a_traceback(tmp_path):
    deep = tmp_path / "brackets.jsonl"
    deep.write_text("[" * 1_000_000 + "\n", encoding="utf-8")
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(agent_line(1).encode() * 50)[:40] + b"\x00" * 64)
    result = run_spanscore(
        "score", deep, broken, "-o", tmp_path / "scored.jsonl", "--config", score_config(tmp_path), "--quiet"
    )
    assert result.returncode == 2
    assert f"{deep}:1: invalid JSON: nested too deeply" in result.stderr
    assert f"{broken}: cannot read: " in result.stderr
    assert "Traceback" not in result.stderr


# The labels file of `agree` ---------------------------------------------------------------


def test_a_csv_field_over_the_csv_modules_limit_is_reported_by_line(tmp_path, capsys):
    labels = tmp_path / "labels.csv"
    trace = "5c00e5c00e0000000000000000000001"
    labels.write_text(
        f"trace_id,metric,label,note\n{trace},task_completion,pass,short\n"
        f'{trace},task_completion,fail,"{"x" * 140_000}"\n',
        encoding="utf-8",
    )
    problems: list[str] = []
    [label] = read_labels_file(labels, problems)
    assert label.label == "pass"
    assert problems == [f"{labels}:3: field larger than field limit (131072): the rest of the file is not read"]
    scored = write_scored(tmp_path / "scored.jsonl", [scored_root(trace, "task_completion", 0.9)])
    code = main(["agree", str(scored), "--labels", str(labels)])
    err = capsys.readouterr().err
    assert code == 2
    assert "field larger than field limit (131072)" in err
    assert "Traceback" not in err


def test_a_deeply_nested_json_label_line_is_that_lines_problem(tmp_path):
    labels = tmp_path / "labels.jsonl"
    good = {"trace_id": "5c00e5c00e0000000000000000000001", "metric": "task_completion", "label": "pass"}
    labels.write_text(json.dumps(good) + '\n{"note": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    problems: list[str] = []
    assert len(read_labels_file(labels, problems)) == 1
    assert problems == [f"{labels}:2: not a JSON object: nested too deeply"]


def test_past_ten_bad_label_rows_of_a_file_the_rest_are_counted_and_the_good_rows_read(tmp_path, capsys):
    trace = "5c00e5c00e0000000000000000000001"
    labels = tmp_path / "labels.csv"
    rows = [f"{trace},task_completion,pass"] + [f"{trace},Task Completion,fail"] * 5000
    labels.write_text("trace_id,metric,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    scored = write_scored(tmp_path / "scored.jsonl", [scored_root(trace, "task_completion", 0.9)])
    code = main(["agree", str(scored), "--labels", str(labels)])
    captured = capsys.readouterr()
    assert code == 2
    bad = "metric must be a metric name (a-z, 0-9, _), got Task Completion"
    assert captured.err.splitlines() == [
        *(f"spanscore agree: {labels}:{n}: {bad}" for n in range(3, 13)),
        f"spanscore agree: {labels}: 4,990 more bad rows not listed",
    ]
    assert "task_completion" in captured.out  # the good row was compared


def test_past_ten_bad_trail_lines_the_rest_are_counted(tmp_path):
    path = tmp_path / "trail.jsonl"
    good = {"trace_id": "5c00e5c00e0000000000000000000001", "scores": [{"reliability_score": 4}]}
    path.write_text(json.dumps(good) + "\n" + '{"no": "trace id"}\n' * 30, encoding="utf-8")
    problems: list[str] = []
    labels = read_trail_labels(path, read_mapping(BUILT_IN_MAPPING), problems)
    assert len(labels) == 1
    bad = "not a TRAIL annotation: expected an object with trace_id, errors and scores"
    assert problems == [*(f"{path}:{n}: {bad}" for n in range(2, 12)), f"{path}: 20 more bad lines not listed"]


def test_a_labels_file_over_the_size_limit_is_refused_in_one_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", 1000)
    trace = "5c00e5c00e0000000000000000000001"
    row = {"trace_id": trace, "metric": "task_completion", "label": "pass"}
    labels = write_labels(tmp_path / "labels.jsonl", [row] * 20)
    assert labels.stat().st_size > 1000
    scored = write_scored(tmp_path / "scored.jsonl", [scored_root(trace, "task_completion", 0.9)])
    code = main(["agree", str(scored), "--labels", str(labels)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == f"spanscore agree: {labels}: a labels file larger than 1,000 bytes: not read\n"
    assert captured.out == ""
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", labels.stat().st_size)  # at the limit: read
    problems: list[str] = []
    assert len(read_labels_file(labels, problems)) == 20
    assert problems == []


def test_a_trail_file_over_the_size_limit_is_refused_in_one_message(tmp_path, monkeypatch):
    monkeypatch.setattr(reading_bounds, "MAX_DOCUMENT_BYTES", 1000)
    path = tmp_path / "trail.jsonl"
    record = {"trace_id": "5c00e5c00e0000000000000000000001", "scores": [{"reliability_score": 4}]}
    path.write_text((json.dumps(record) + "\n") * 20, encoding="utf-8")
    problems: list[str] = []
    assert read_trail_labels(path, read_mapping(BUILT_IN_MAPPING), problems) == []
    assert problems == [f"{path}: a TRAIL annotations file larger than 1,000 bytes: not read"]


def test_a_labels_or_trail_file_that_is_not_utf8_is_one_problem(tmp_path):
    labels, trail = tmp_path / "labels.csv", tmp_path / "trail.jsonl"
    labels.write_bytes(b"trace_id,metric,label\n\xff\n")
    trail.write_bytes(b'{"trace_id": "\xc3("}\n')
    problems: list[str] = []
    assert read_labels_file(labels, problems) == []
    assert read_trail_labels(trail, read_mapping(BUILT_IN_MAPPING), problems) == []
    assert problems == [
        f"{labels}: not UTF-8 text (invalid start byte at byte 22)",
        f"{trail}: not UTF-8 text (invalid continuation byte at byte 14)",
    ]


def test_agree_prints_fifty_problems_then_counts_the_rest(tmp_path, capsys):
    trace = "5c00e5c00e0000000000000000000001"
    files = []
    for n in range(6):
        labels = tmp_path / f"labels-{n}.csv"
        rows = [f"{trace},task_completion,pass"] + [f"{trace},Task Completion,fail"] * 12
        labels.write_text("trace_id,metric,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
        files += ["--labels", str(labels)]
    scored = write_scored(tmp_path / "scored.jsonl", [scored_root(trace, "task_completion", 0.9)])
    code = main(["agree", str(scored), *files])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    # 6 files x (10 bad rows listed + 1 count) = 66 problems
    assert len(err) == reading_bounds.MAX_PROBLEMS_SHOWN + 1
    assert err[0].startswith(f"spanscore agree: {tmp_path / 'labels-0.csv'}:3: ")
    assert err[-1] == "spanscore agree: ... and 16 more problems"


# What `score` prints ------------------------------------------------------------------------


@pytest.mark.parametrize("quiet", [True, False])
def test_score_prints_fifty_problems_then_counts_the_rest(tmp_path, quiet):
    paths = []
    for n in range(6):
        path = tmp_path / f"broken-{n}.jsonl"
        path.write_text('{"foo": 1}\n' * 12, encoding="utf-8")
        paths.append(path)
    flags = ["--quiet"] if quiet else []
    result = run_spanscore("score", *paths, "-o", tmp_path / "scored.jsonl", "--config", score_config(tmp_path), *flags)
    assert result.returncode == 2
    # 6 files x (10 broken lines listed + 1 count) = 66 problems
    assert result.stderr.splitlines()[-1].strip() == "... and 16 more problems"
    listed = [line.strip() for line in result.stderr.splitlines() if line.strip().startswith(str(tmp_path / "broken-"))]
    assert len(listed) == reading_bounds.MAX_PROBLEMS_SHOWN == 50
    assert listed[0].startswith(f"{paths[0]}:1: not trace JSON")
    assert listed[-1].startswith(f"{paths[4]}:6: not trace JSON")
    if quiet:
        assert len(result.stderr.splitlines()) == 51
    else:
        assert "66 problems (skipped):" in result.stderr


def test_a_deeply_nested_trail_line_is_that_lines_problem(tmp_path):
    path = tmp_path / "trail.jsonl"
    good = {"trace_id": "5c00e5c00e0000000000000000000001", "scores": [{"reliability_score": 4}]}
    path.write_text(json.dumps(good) + '\n{"scores": ' + "[" * 100_000 + "]" * 100_000 + "}\n", encoding="utf-8")
    problems: list[str] = []
    assert len(read_trail_labels(path, read_mapping(BUILT_IN_MAPPING), problems)) == 1
    assert problems == [f"{path}:2: not a JSON object: nested too deeply"]


def test_a_csv_field_over_the_limit_is_listed_after_ten_bad_rows(tmp_path):
    labels = tmp_path / "labels.csv"
    trace = "5c00e5c00e0000000000000000000001"
    rows = [f"{trace},task_completion,pass,"] + [f"{trace},Task Completion,fail,"] * 12
    labels.write_text(
        "trace_id,metric,label,note\n" + "\n".join(rows) + f'\n{trace},task_completion,fail,"{"x" * 140_000}"\n',
        encoding="utf-8",
    )
    problems: list[str] = []
    assert len(read_labels_file(labels, problems)) == 1
    assert len(problems) == 12
    assert problems[-2:] == [
        f"{labels}:15: field larger than field limit (131072): the rest of the file is not read",
        f"{labels}: 2 more bad rows not listed",
    ]
