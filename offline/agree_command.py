"""`spanscore agree`: read scored files and people's labels, compare, print, write, gate.

Exit codes: 0 when the comparison ran (and the gate, if asked for, passed), 1 when the
gate failed, 2 on bad input: an unreadable file or line, a bad label, a metric that no
scored span carries, or no label that meets a scored span. Every problem is printed
(file:line where there is one) before the results; a bad row costs only itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spanscore.core.quoting import excerpt
from spanscore.offline import agreement, agreement_report, judge_examples, trail_labels
from spanscore.offline.human_labels import HumanLabel, read_labels_file
from spanscore.offline.judge_scores import read_judge_scores
from spanscore.offline.reading_bounds import shown_problems

EXIT_GATE = 1
EXIT_INPUT = 2
MIN_RESAMPLES = 100


def run(args: argparse.Namespace) -> int:
    usage = _usage_problem(args)
    if usage:
        return _fail(usage)
    problems: list[str] = []
    labels = _labels(args, problems)
    if labels is None:
        return EXIT_INPUT
    if not labels:  # nothing could be read: the problems are the whole story
        for problem in shown_problems(problems):
            print(f"spanscore agree: {problem}", file=sys.stderr)
        return EXIT_INPUT
    scored = read_judge_scores([Path(f) for f in args.files])
    problems.extend(scored.problems)
    joined = agreement.join(labels, scored, args.metric)
    problems.extend(joined.problems)
    if joined.unscored_metrics:
        known = excerpt(", ".join(sorted(scored.metrics())), 400) or "none"  # names from the spans: quoted
        for metric, count in sorted(joined.unscored_metrics.items()):
            problems.append(
                f"metric {metric!r} ({count:,} label{'s' if count != 1 else ''}) is on no scored span; "
                f"the scored files carry: {known}"
            )
    for problem in shown_problems(problems):
        print(f"spanscore agree: {problem}", file=sys.stderr)
    if joined.unmatched_traces:
        print(
            f"spanscore agree: {joined.unmatched_traces:,} label(s) are about traces or spans not in the scored files",
            file=sys.stderr,
        )
    if not joined.groups:
        what = f" of metric {args.metric!r}" if args.metric else ""
        return _fail(f"no label{what} meets a score on a span of {', '.join(args.files)}")
    results = [agreement.compare(group, args.resamples, args.seed) for group in joined.groups]
    written = _write(args, results, joined)
    if written is None:
        return EXIT_INPUT
    print(agreement_report.text(results, args.resamples, args.seed))
    if written:
        print(f"wrote {', '.join(written)}")
    if problems:
        return EXIT_INPUT
    if args.min_kappa is not None:
        failures = agreement_report.gate_failures(results, args.min_kappa)
        for failure in failures:
            print(f"gate failed: {failure}")
        if failures:
            return EXIT_GATE
        print(f"gate passed: every κ lower bound is at least {args.min_kappa:g}")
    return 0


def _usage_problem(args: argparse.Namespace) -> str | None:
    if not (args.labels or args.trail or args.phoenix):
        return "give people's labels: --labels FILE, --trail FILE or --phoenix URL --project NAME"
    if args.phoenix and not args.project:
        return "--phoenix needs --project NAME"
    if (args.project or args.annotation) and not args.phoenix:
        return "--project and --annotation go with --phoenix URL"
    if args.trail_mapping and not args.trail:
        return "--trail-mapping goes with --trail FILE"
    if args.min_kappa is not None and not -1.0 <= args.min_kappa <= 1.0:
        return f"--min-kappa must be within [-1, 1], got {args.min_kappa}"
    if args.resamples < MIN_RESAMPLES:
        return f"--resamples must be at least {MIN_RESAMPLES}, got {args.resamples}"
    if args.count < 1:
        return f"--count must be at least 1, got {args.count}"
    bad = [a for a in args.annotation if "=" not in a or not all(part.strip() for part in a.split("=", 1))]
    if bad:
        return f"--annotation takes NAME=METRIC or NAME=METRIC:LOW-HIGH, got {bad[0]!r}"
    return None


def _labels(args: argparse.Namespace, problems: list[str]) -> list[HumanLabel] | None:
    """Every label from every source; None when a source could not be used at all."""
    labels: list[HumanLabel] = []
    for path in args.labels:
        labels.extend(read_labels_file(Path(path), problems))
    if args.trail:
        try:
            mapping = trail_labels.read_mapping(Path(args.trail_mapping or trail_labels.BUILT_IN_MAPPING))
        except trail_labels.MappingError as exc:
            _fail(str(exc))
            return None
        for path in args.trail:
            labels.extend(trail_labels.read_trail_labels(Path(path), mapping, problems))
    if args.phoenix:
        from spanscore.offline.phoenix_labels import PhoenixError, read_phoenix_labels

        names = dict(tuple(part.strip() for part in a.split("=", 1)) for a in args.annotation)
        try:
            labels.extend(read_phoenix_labels(args.phoenix, args.project, names or None, problems))
        except PhoenixError as exc:
            _fail(str(exc))
            return None
    return labels


def _write(args: argparse.Namespace, results: list[dict], joined: agreement.Joined) -> list[str] | None:
    written = []
    try:
        if args.json is not None:
            document = {"method": agreement_report.method(args.resamples, args.seed), "results": results}
            Path(args.json).write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(f"{args.json} (JSON)")
        if args.output is not None:
            from spanscore.offline import agreement_html

            page = agreement_html.render(results, agreement_report.method(args.resamples, args.seed), args.files)
            Path(args.output).write_text(page, encoding="utf-8")
            written.append(f"{args.output} (HTML page)")
        if args.write_examples is not None:
            count = judge_examples.write(Path(args.write_examples), joined, args, args.count)
            written.append(f"{args.write_examples} ({count} worked example{'s' if count != 1 else ''} to review)")
    except judge_examples.ExamplesError as exc:
        _fail(str(exc))
        return None
    except OSError as exc:
        _fail(f"cannot write {exc.filename}: {exc.strerror}")
        return None
    return written


def _fail(message: str) -> int:
    print(f"spanscore agree: {message}", file=sys.stderr)
    return EXIT_INPUT
