"""What every command says to a person: closed pipes, wrong flags, missing files, counts,
problems of a config and its dataset in one run, the metrics a missing judge skips."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import socket
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from tests.support.processes import ROOT, SPANSCORE

WEATHER = ROOT / "examples" / "weather-agent.json"
SUITE = ROOT / "examples" / "weather-suite.yaml"


def spanscore(*args: str, cwd: Path = ROOT, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*SPANSCORE, *args], capture_output=True, text=True, cwd=cwd, timeout=120, **kwargs)


def many_requests(tmp_path: Path, copies: int = 200) -> Path:
    """The sample session's request, `copies` times as JSON lines: output worth piping to head."""
    line = json.dumps(json.loads(WEATHER.read_text(encoding="utf-8")))
    path = tmp_path / "many.jsonl"
    path.write_text((line + "\n") * copies, encoding="utf-8")
    return path


def suite_summary(tmp_path: Path) -> Path:
    """A scored suite with attempts, for report and compare."""
    from tests.support.scored_suite import attempt, score_suite

    scored, _ = score_suite(tmp_path, [attempt("oslo", "Oslo"), attempt("oslo", "Bergen")])
    return scored


# -- a closed pipe ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "inspect-json", "report", "compare", "validate"])
def test_a_closed_pipe_ends_the_command_quietly(command, tmp_path):
    """`spanscore ... | head` when head has gone: exit 141, as a tool killed by SIGPIPE,
    and not a word on stderr. The pipe's reading end is closed before the command writes,
    so the first write fails whatever the timing."""
    args = {
        "inspect": ["inspect", str(many_requests(tmp_path))],
        "inspect-json": ["inspect", "--json", str(many_requests(tmp_path))],
        "report": ["report", "--k", "1"],
        "compare": ["compare"],
        "validate": ["validate", "otel-config.yaml"],
    }[command]
    if command in ("report", "compare"):
        scored = suite_summary(tmp_path)
        args += [str(scored)] * (2 if command == "compare" else 1)
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([*SPANSCORE, *args], stdout=write, stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr.decode()) == (141, "")


# -- flags, help, missing files ----------------------------------------------------------


def test_a_wrong_flag_shows_the_subcommands_usage():
    result = spanscore("inspect", "--jsn", str(WEATHER))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("usage: spanscore inspect [-h] [--json]")
    assert lines[-1] == "spanscore inspect: error: unrecognized arguments: --jsn"


@pytest.mark.parametrize("command", ["run", "validate", "inspect", "score", "report", "compare"])
def test_every_command_describes_itself(command):
    result = spanscore(command, "--help")
    assert result.returncode == 0
    usage, description = result.stdout.split("\n\n")[:2]
    assert usage.startswith(f"usage: spanscore {command}")
    assert not description.startswith(("options:", "positional arguments:")), description
    assert len(description.split()) >= 12, description  # a sentence or more


def test_report_on_a_missing_file_says_only_that(tmp_path):
    result = spanscore("report", "nope.jsonl", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "nope.jsonl: cannot read: No such file or directory\n"


def test_score_on_a_missing_file_stops_before_any_work(tmp_path):
    result = spanscore("score", str(WEATHER), "nope.json", "-o", "out.jsonl", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "spanscore score: nope.json: cannot read: No such file or directory"
    assert not (tmp_path / "out.jsonl").exists()


def test_inspect_on_a_missing_file_counts_no_traces(tmp_path):
    result = spanscore("inspect", "nope.json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "spanscore inspect: nope.json: cannot read: No such file or directory\n"


def test_counts_of_one_are_singular(tmp_path):
    scored = tmp_path / "scored.jsonl"
    result = spanscore("score", str(WEATHER), "-o", str(scored))
    assert result.returncode == 0, result.stderr
    assert " in 1 request -> 3 traces written to " in result.stderr
    assert "0 not agent traces" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "receivers: {otlp: {}}\nexporters: {debug: {}}\nservice: {pipelines: {traces: {receivers: [otlp]}}}\n"
    )
    assert spanscore("validate", str(bad)).stderr.splitlines()[0] == f"{bad}: 1 problem"


# -- validate: everything in one run -------------------------------------------------------


def test_validate_lists_the_problems_of_a_config_and_its_dataset_in_one_run(tmp_path):
    (tmp_path / "suite.yaml").write_text("cases:\n  - id: a\n  - id: b\n    turns: [{message: hi}]\n    bogus: 1\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        "receivers: {otlp: {}}\n"
        "processors: {ground_truth: {dataset: suite.yaml, trials: 4, judge: {bogus: 1}}}\n"
        "exporters: {debug: {}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [ground_truth], exporters: [debug]}}}\n"
    )
    result = spanscore("validate", "config.yaml", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "config.yaml: 4 problems",
        "  processors.ground_truth.dataset: suite.yaml is invalid:",
        "    cases[0] (id a): grades nothing; give subgoals, expected_tool_calls or a turn's expected_response",
        "    cases[1] (id b).bogus: unknown key",
        "  processors.ground_truth.judge.model: Field required",
        "  processors.ground_truth.judge.bogus: unknown key",
        "  processors.ground_truth.trials: trials must be odd, so yes/no verdicts have a majority (got 4)",
    ]
    assert "Value error" not in result.stderr


def test_validate_lists_the_problems_of_every_layer_in_one_run(tmp_path):
    # A judge metric of your own without its output, an unknown type, a bad duration, an
    # unset variable, a service setting and an undefined reference: none hides another.
    config = tmp_path / "config.yaml"
    config.write_text(
        "receivers: {otlp: {}}\n"
        "processors:\n"
        "  assembler: {trace_wait: 5 parsecs}\n"
        "  judge_metrics: {metrics: {politeness: {prompt: be polite}}}\n"
        "exporters:\n"
        "  debug: {}\n"
        "  kafka: {brokers: [a]}\n"
        "  file: {path: '${env:SPANSCORE_UNSET_OUTPUT}'}\n"
        "service:\n"
        "  telemetry: {logs: {level: loud}}\n"
        "  pipelines:\n"
        "    traces: {receivers: [otlp, zipkin], processors: [assembler, judge_metrics], exporters: [debug, file]}\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "SPANSCORE_UNSET_OUTPUT"}
    result = spanscore("validate", str(config), env=environ)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{config}: 6 problems",
        "  exporters.file.path: environment variable SPANSCORE_UNSET_OUTPUT is not set and has no default",
        "  processors.assembler.trace_wait: '5 parsecs' is not a duration; use forms like 1s, 500ms, 2m, 1h30m",
        "  processors.judge_metrics.metrics.politeness.output: required with a prompt: binary, score, "
        "{scale: [lo, hi]} or {categories: [...], pass: [...]}",
        "  exporters.kafka: unknown exporter type 'kafka'; known: debug, file, otlp, otlphttp, phoenix, prometheus",
        "  service.telemetry.logs.level: String should match pattern '^(?i)(debug|info|warn|warning|error)$' "
        "(got 'loud')",
        "  service.pipelines.traces.receivers[1]: 'zipkin' is not defined under receivers",
    ]
    assert "Traceback" not in result.stderr


def test_validate_lists_every_problem_of_evaluators_of_your_own_in_one_run(tmp_path):
    # Judge metrics of your own and checks: none of their problems hides another.
    config = tmp_path / "config.yaml"
    config.write_text(
        "receivers: {otlp: {}}\n"
        "processors:\n"
        "  judge_metrics:\n"
        "    metrics:\n"
        "      tone: {prompt: 'Polite? {output} {mood}', output: binary}\n"
        "      cited: {prompt: 'Cites a source? {context}', output: binary, on: tool}\n"
        "      rated: {prompt: 'Rate it. {output}', output: {scale: [5, 1]}}\n"
        "      graded: {prompt: 'Grade it. {output}', output: stars}\n"
        "      confidence: {prompt: 'Confident? {output}', output: score}\n"
        "  checks:\n"
        "    metrics:\n"
        "      no_refund: {field: output, not_regex: '(?i)refund('}\n"
        "      shaped: {field: output, json_schema: {type: object, properties: {answer: {type: strng}}}}\n"
        "exporters: {debug: {}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [judge_metrics, checks], exporters: [debug]}}}\n"
    )
    result = spanscore("validate", "config.yaml", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    own, check = "  processors.judge_metrics.metrics", "  processors.checks.metrics"
    assert result.stderr.splitlines() == [
        "config.yaml: 7 problems",
        f"{own}.tone.prompt: unknown placeholder {{mood}}; known: {{input}}, {{output}}, {{context}}, {{tool_calls}}, "
        "{steps}, {expected_output}, {attributes.KEY} (got 'Polite? {output} {mood}')",
        f"{own}.cited.prompt: {{context}} cannot be filled on: tool (it fills {{attributes.KEY}}, {{input}}, "
        "{output}) (got 'Cites a source? {context}')",
        f"{own}.rated.output: scale: expected [low, high] with low < high, got [5.0, 1.0]",
        f"{own}.graded.output: expected binary, score, {{scale: [lo, hi]}} or {{categories: [...], pass: [...]}}, "
        "got 'stars'",
        # A built-in's name with a prompt would redefine it: refused, not overridden.
        f"{own}.confidence.prompt: confidence is a built-in judge metric: give a metric of your own another name "
        "(got 'Confident? {output}')",
        f"{check}.no_refund.not_regex: invalid regular expression (?i)refund(: missing ), unterminated subpattern "
        "at position 10 (got '(?i)refund(')",
        f"{check}.shaped.json_schema: json_schema at $.answer: unknown type strng",
    ]
    assert "Traceback" not in result.stderr and "Value error" not in result.stderr


def test_score_lists_the_problems_of_its_config_and_its_dataset_in_one_run(tmp_path):
    (tmp_path / "suite.yaml").write_text("cases:\n  - id: a\n")
    (tmp_path / "config.yaml").write_text("receivers: {otlp: {}}\n")
    result = spanscore(
        "score", str(WEATHER), "-o", "out.jsonl", "--config", "config.yaml", "--dataset", "suite.yaml", cwd=tmp_path
    )
    assert result.returncode == 2
    assert "spanscore score: config.yaml is invalid:" in result.stderr
    assert "spanscore score: suite.yaml is invalid:\n  cases[0] (id a): grades nothing" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


# -- what a missing judge skips -------------------------------------------------------------


def test_score_names_up_front_what_it_skips_without_a_judge(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    result = spanscore("score", str(WEATHER), "--dataset", str(SUITE), "-o", str(tmp_path / "s.jsonl"), env=environ)
    lines = result.stderr.splitlines()
    assert lines[0].startswith("spanscore score: LLM-judge metrics not run (task_completion, ")
    assert "set OPENAI_API_KEY" in lines[0]
    assert lines[1] == (
        "spanscore score: ground_truth: 3 of 3 cases need a judge (subgoals, check: items, expected responses), "
        "so their attempts are left ungraded; set OPENAI_API_KEY (and OPENAI_BASE_URL, SPANSCORE_JUDGE_MODEL) "
        "or give ground_truth a judge with api_key or base_url"
    )
    report = spanscore("report", str(tmp_path / "s.jsonl"), env=environ)
    assert report.returncode == 2
    assert report.stderr.startswith(
        "spanscore report: no graded attempts found: the 1 attempt carries eval.success.error or .skipped "
        "(first: not every check could be graded: turn 0 answer not graded: needs a judge"
    )


# -- a busy port names its variable -------------------------------------------------------------


def test_a_busy_port_names_the_variable_that_sets_it(tmp_path):
    config = tmp_path / "busy.yaml"
    config.write_text(
        "receivers: {otlp: {protocols: {http: {endpoint: '${env:MY_HTTP_ENDPOINT:-127.0.0.1:1}'}}}}\n"
        "exporters: {debug: {}}\nservice: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}\n"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        endpoint = f"127.0.0.1:{busy.getsockname()[1]}"
        result = spanscore("run", "--config", str(config), env={**os.environ, "MY_HTTP_ENDPOINT": endpoint})
    assert result.returncode == 1
    assert (
        f"  receivers.otlp.protocols.http.endpoint is '{endpoint}', from MY_HTTP_ENDPOINT: "
        "set MY_HTTP_ENDPOINT to change it"
    ) in result.stderr.splitlines()


# -- progress on a terminal -------------------------------------------------------------------


def on_a_terminal(*args: str, columns: int = 120) -> str:
    """What `spanscore args` writes to a terminal of `columns` columns (stdout and stderr)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a sized terminal, then the command
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        os.chdir(ROOT)
        os.execv(SPANSCORE[0], [*SPANSCORE, *args])
    output, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return output.decode("utf-8", "replace")


def test_score_shows_a_progress_bar_on_a_terminal_and_none_when_quiet(tmp_path):
    many = many_requests(tmp_path, copies=50)
    size = many.stat().st_size
    shown = on_a_terminal("score", str(many), "-o", str(tmp_path / "out.jsonl"))
    frames = [frame for frame in shown.split("\r") if "%|" in frame]
    assert frames, shown
    total = f"{size / 1024:.0f}k" if size < 1024**2 else f"{size / 1024**2:.2f}M"
    assert all(f"/{total} " in frame for frame in frames), (total, frames[:2])
    assert "B/s" in frames[-1] and "traces, " in shown and "judge calls" in shown
    quiet = on_a_terminal("score", str(many), "-o", str(tmp_path / "out.jsonl"), "--quiet")
    assert "%|" not in quiet
