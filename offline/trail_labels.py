"""People's labels from TRAIL's annotation files, for `spanscore agree --trail`.

TRAIL (a benchmark of agent traces annotated by people) gives each trace one line,
`{"trace_id", "errors", "scores"}`, where `scores[0]` holds 1–5 scores with reasons:
`reliability_score` and `reliability_reasoning`, and the same for `security`,
`instruction_adherence` and `plan_opt`. A mapping file (YAML; the built-in one is
`trail_scores.yaml` beside this module) says which spanscore metric each score is
compared with; each mapped score becomes one `HumanLabel` on that scale, with the
reason as its note and `trail` as its annotator. A bad line is reported with its file
and line and skipped; the file is read within the bounds of a labels file
(`human_labels`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from spanscore.offline.human_labels import HumanLabel, LabelError, make_label, parse_scale
from spanscore.offline.reading_bounds import LineProblems, read_whole

BUILT_IN_MAPPING = Path(__file__).with_name("trail_scores.yaml")
ANNOTATOR = "trail"


class MappingError(ValueError):
    pass


def read_mapping(path: Path) -> tuple[str, dict[str, str]]:
    """(scale, {TRAIL score name: metric}) from a mapping file; MappingError says what is wrong."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MappingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise MappingError(f"{path}: not YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("scores"), dict) or not document["scores"]:
        raise MappingError(f"{path}: expected a mapping with `scores: {{trail_score_name: metric}}`")
    scale = str(document.get("scale", "1-5"))
    try:
        parse_scale(scale)
    except LabelError as exc:
        raise MappingError(f"{path}: {exc}") from None
    scores = {}
    for name, metric in document["scores"].items():
        if not isinstance(metric, str) or not metric:
            raise MappingError(f"{path}: scores.{name} must name a metric")
        scores[str(name)] = metric
    return scale, scores


def read_trail_labels(path: Path, mapping: tuple[str, dict[str, str]], problems: list[str]) -> list[HumanLabel]:
    scale, scores = mapping
    labels: list[HumanLabel] = []
    text = read_whole(path, "a TRAIL annotations file", problems)
    if text is None:
        return labels
    lines = text.splitlines()
    del text  # a file near the limit is held once, as lines
    bad = LineProblems(path, problems, "bad line")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            labels.extend(_labels_of(json.loads(line), scale, scores, f"{path}:{number}"))
        except ValueError as exc:  # LabelError and JSON's errors
            bad.add(number, str(exc))
        except RecursionError:
            bad.add(number, "not a JSON object: nested too deeply")
    bad.close()
    if not labels and not any(p.startswith(f"{path}:") for p in problems):
        problems.append(f"{path}: no TRAIL scores in the file")
    return labels


def _labels_of(record: Any, scale: str, scores: dict[str, str], where: str) -> list[HumanLabel]:
    if not isinstance(record, dict) or "trace_id" not in record:
        raise LabelError("not a TRAIL annotation: expected an object with trace_id, errors and scores")
    scored = record.get("scores") or [{}]
    if not isinstance(scored, list) or not isinstance(scored[0], dict):
        raise LabelError("scores must be a list holding one object of scores")
    found = []
    for name, metric in scores.items():
        value = scored[0].get(f"{name}_score")
        if value is None:
            continue
        reason = scored[0].get(f"{name}_reasoning")
        found.append(
            make_label(
                {
                    "trace_id": record["trace_id"],
                    "metric": metric,
                    "score": value,
                    "scale": scale,
                    "annotator": ANNOTATOR,
                    "note": f"{name}: {reason}" if isinstance(reason, str) else name,
                },
                where,
            )
        )
    return found
