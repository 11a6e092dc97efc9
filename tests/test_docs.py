"""The documentation stands alone: its links resolve and its snippets are real.

Checked in every Markdown file of the repository (README.md, docs/, the READMEs under
examples/ and deploy/), except the recorded data under tests/fixtures:

- every relative link points at a file or folder of the repository, and a `#anchor`
  names a heading of the page it points at (GitHub's heading slugs);
- every ```yaml (or ```yml) block parses with `yaml.safe_load` and is classified by the
  rules below; a block no rule recognizes fails the suite, listed with its file and line;
- every ```toml, ```json and ```python block parses;
- every inline code span that reads as a YAML setting with a flow collection
  (`sending_queue: {storage: file_storage}`) parses, and one that is a whole config
  fragment (a config section at its top, nothing elided with `...`) validates;
- README.md stays short: at most `README_MAX_LINES` lines, the rest lives in docs/.

How a YAML block is classified, first rule that applies:

1. A block whose first line is a comment `# <section>.<component id>` (for instance
   `# exporters.otlp`) is the body of that one component: it is put at that place in an
   otherwise empty fragment and checked as a fragment (rule 3).
2. A mapping whose top-level keys are all spanscore config sections (`receivers`,
   `processors`, `exporters`, `extensions`, `service`) and that has `receivers`,
   `exporters` and `service.pipelines` is a full config: validated as written, by the
   loader behind `spanscore validate`.
3. Any other mapping of spanscore config sections only is a fragment. It is merged
   into `BASE_CONFIG` (mappings merge key by key, anything else in the fragment replaces
   what the base has); when the fragment has no `service` of its own, its processors
   are appended to the traces pipeline (`assembler` first) and its extensions to
   `service.extensions`. A component the pipelines name that no section defines (a
   snippet naming `otlp/tempo` or `judge_metrics` defined elsewhere) is defined with
   `STAND_INS[type]`, or with no settings for a type not listed there. The result is
   validated like a full config.
4. A mapping with only `cases` is an eval-suite dataset: validated by the dataset loader.
   One with only `examples` is a judge metric's worked examples: validated by their loader.
5. Deliberately not spanscore files, only parsed: a Kubernetes manifest (`apiVersion`
   and `kind`), a Compose file (`services`), a Prometheus config (`scrape_configs`), a
   CI workflow (`jobs`) or a list of CI steps (each a mapping with `run` or `uses`).

`${env:NAME}` references without a default are set to dummy values; the validation
sees no other environment, so the result does not depend on the machine. Files a block
names under `FILE_KEYS` (certificates, a token file) are the reader's own: each is
replaced by an empty file the test makes, since the loader checks that they exist. The example
plugin under examples/plugin is loaded from its source, so its config validates whether
or not the plugin is installed. Blocks are validated from the repository root, where
their relative paths (`examples/weather-suite.yaml`) point.
"""

from __future__ import annotations

import ast
import bisect
import copy
import importlib.util
import itertools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from spanscore.config.components import build_factories
from spanscore.config.loader import ConfigError, parse_config
from spanscore.processors.eval_dataset import DatasetError, parse_dataset
from spanscore.processors.judge_metrics.examples import ExamplesError, parse_examples

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 220
EXCLUDED = ("tests/fixtures/",)

SECTIONS = ("receivers", "processors", "exporters", "extensions", "service")
BASE_CONFIG: dict[str, Any] = {
    "receivers": {
        "otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:4317"}, "http": {"endpoint": "127.0.0.1:4318"}}}
    },
    "exporters": {"debug": {}},
    "service": {"pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["debug"]}}},
}
STAND_INS: dict[tuple[str, str], dict[str, Any]] = {
    ("receivers", "otlp"): {"protocols": {"grpc": {"endpoint": "127.0.0.1:4317"}}},
    ("exporters", "otlp"): {"endpoint": "127.0.0.1:4317", "tls": {"insecure": True}},
    ("exporters", "otlphttp"): {"endpoint": "http://127.0.0.1:4318"},
    ("exporters", "file"): {"path": "./scored.jsonl"},
    ("exporters", "phoenix"): {"endpoint": "http://127.0.0.1:6006"},
    ("extensions", "file_storage"): {"directory": "./spanscore-storage"},
    ("extensions", "bearertokenauth"): {"token": "dummy-token"},
}
FILE_KEYS = ("cert_file", "key_file", "ca_file", "client_ca_file", "filename")
ENV_WITHOUT_DEFAULT = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
BODY_MARKER = re.compile(r"#\s*(receivers|processors|exporters|extensions)\.([A-Za-z0-9_]+(?:/[A-Za-z0-9_.-]+)?)\s*$")


# -- reading Markdown -------------------------------------------------------------------


def tracked_files() -> set[str]:
    """The repository's files (tracked, or new and not ignored), as POSIX paths from the root.

    A virtualenv made inside the checkout under a name .gitignore does not know is left out.
    """
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every file but the hidden ones
        listed = [
            str(p.relative_to(ROOT).as_posix())
            for p in ROOT.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
        ]
    venvs = {str(PurePosixPath(path).parent) for path in listed if PurePosixPath(path).name == "pyvenv.cfg"}
    return {
        path for path in listed if (ROOT / path).exists() and not any(path.startswith(venv + "/") for venv in venvs)
    }


FILES = tracked_files()
FOLDERS = {str(parent) for path in FILES for parent in PurePosixPath(path).parents if str(parent) != "."}
MARKDOWN = sorted(path for path in FILES if path.endswith(".md") and not path.startswith(EXCLUDED))


@dataclass(frozen=True)
class Block:
    path: str
    line: int  # of the opening fence, 1-based
    info: str  # the fence's language, lowercased
    text: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Page:
    path: str
    lines: tuple[str, ...]  # outside code blocks; a line inside one is empty
    blocks: tuple[Block, ...]


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")


@cache
def page(path: str) -> Page:
    lines, blocks = [], []
    fence, info, start, body = None, "", 0, []
    for number, line in enumerate((ROOT / path).read_text(encoding="utf-8").splitlines(), start=1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence, info, start, body = opening.group(1), opening.group(2).lower(), number, []
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
                blocks.append(Block(path, start, info, "\n".join(body) + "\n"))
                fence = None
            else:
                body.append(line)
            lines.append("")
        else:
            lines.append(line)
    assert fence is None, f"{path}:{start}: code block never closed"
    return Page(path, tuple(lines), tuple(blocks))


CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"\[(?:[^\[\]`]|`[^`]*`)*\]\(\s*<?([^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def links(p: Page) -> list[tuple[int, str]]:
    """(line, target) of every link outside code: inline, reference definitions, images."""
    found = []
    for number, line in enumerate(p.lines, start=1):
        code = [m.span() for m in CODE_SPAN.finditer(line)]
        for match in LINK.finditer(line):
            bracket = match.group(0).rfind("](") + match.start()
            if not any(a <= bracket < b for a, b in code):
                found.append((number, match.group(1)))
        reference = REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered, lowercased, punctuation
    dropped (letters, digits, `_`, `-` and spaces stay), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*\*|__|\*)", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@cache
def anchors(path: str) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in page(path).lines:
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return frozenset(found)


def link_problem(source: str, target: str) -> str | None:
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None  # http:, https:, mailto:: not checked here
    path_part, _, anchor = target.partition("#")
    if path_part:
        base = PurePosixPath() if path_part.startswith("/") else PurePosixPath(source).parent
        parts: list[str] = []
        for part in (base / path_part.lstrip("/")).parts:
            if part == "..":
                if not parts:
                    return f"{target}: points outside the repository"
                parts.pop()
            elif part != ".":
                parts.append(part)
        resolved = "/".join(parts)
        if resolved not in FILES and resolved not in FOLDERS:
            return f"{target}: no such file or folder in the repository ({resolved})"
    else:
        resolved = source
    if anchor:
        if not resolved.endswith(".md") or resolved not in FILES:
            return f"{target}: an anchor into something that is not a Markdown page"
        if anchor not in anchors(resolved):
            return f"{target}: {resolved} has no heading with the anchor #{anchor}"
    return None


# -- YAML blocks --------------------------------------------------------------------------


def merge(base: Any, fragment: Any) -> Any:
    """`fragment` over `base`: mappings merge key by key; anything else in `fragment` replaces."""
    if isinstance(base, dict) and isinstance(fragment, dict):
        merged = dict(base)
        for key, value in fragment.items():
            merged[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(fragment)


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def as_config(fragment: dict[str, Any]) -> dict[str, Any]:
    """A fragment completed into a config, as the module docstring says (rule 3)."""
    config = merge(copy.deepcopy(BASE_CONFIG), fragment)
    service = config["service"]
    pipelines = service.setdefault("pipelines", {})
    traces = pipelines.setdefault("traces", {})
    if "service" not in fragment:
        processors = list(fragment.get("processors") or {})
        processors.sort(key=lambda cid: component_type(cid) != "assembler")
        traces["processors"] = list(traces.get("processors") or []) + processors
        service["extensions"] = list(service.get("extensions") or []) + list(fragment.get("extensions") or {})
    named = [("receivers", cid) for cid in traces.get("receivers") or []]
    named += [("processors", cid) for cid in traces.get("processors") or []]
    named += [
        ("exporters", cid)
        for pipeline in pipelines.values()
        if isinstance(pipeline, dict)
        for cid in pipeline.get("exporters") or []
    ]
    named += [("extensions", cid) for cid in service.get("extensions") or []]
    for section, component_id in named:
        defined = config.setdefault(section, {})
        implicit = section == "processors" and component_type(component_id) == "assembler"
        if component_id not in defined and not implicit:
            defined[component_id] = copy.deepcopy(STAND_INS.get((section, component_type(component_id)), {}))
    return config


def classify(block: Block, data: Any) -> str | None:
    """Which kind of YAML `block` holds (the module docstring's rules); None: not recognized."""
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    if BODY_MARKER.match(first) and isinstance(data, dict):
        return "component"
    if isinstance(data, dict) and data and set(data) <= set(SECTIONS):
        full = (
            {"receivers", "exporters"} <= set(data)
            and isinstance(data.get("service"), dict)
            and "pipelines" in data["service"]
        )
        return "config" if full else "fragment"
    if isinstance(data, dict) and set(data) == {"cases"}:
        return "dataset"
    if isinstance(data, dict) and set(data) == {"examples"}:
        return "worked-examples"
    if isinstance(data, dict) and {"apiVersion", "kind"} <= set(data):
        return "kubernetes"
    if isinstance(data, dict) and "services" in data and not set(data) & set(SECTIONS):
        return "compose"
    if isinstance(data, dict) and "scrape_configs" in data:
        return "prometheus"
    if isinstance(data, dict) and "jobs" in data:
        return "ci-workflow"
    if isinstance(data, list) and data and all(isinstance(step, dict) and {"run", "uses"} & set(step) for step in data):
        return "ci-steps"
    return None


@cache
def factories():
    """Built-ins, installed plugins, and the example plugin from its source."""
    source = ROOT / "examples" / "plugin" / "spanscore_example_plugin" / "__init__.py"
    spec = importlib.util.spec_from_file_location("_docs_example_plugin", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would: pydantic resolves the config's annotations there
    spec.loader.exec_module(module)
    return build_factories(extra=[module.FACTORY])


def dummy_environment(text: str) -> dict[str, str]:
    return {name: f"dummy-{name.lower().replace('_', '-')}" for name in ENV_WITHOUT_DEFAULT.findall(text)}


def with_files(data: Any, folder: Path) -> Any:
    """`data` with every path under a `FILE_KEYS` key replaced by an empty file in `folder`."""
    if isinstance(data, dict):
        replaced = {}
        for key, value in data.items():
            if key in FILE_KEYS and isinstance(value, str) and "${" not in value:
                stand_in = folder / f"{len(list(folder.iterdir()))}-{PurePosixPath(value).name}"
                stand_in.touch()
                value = str(stand_in)
            replaced[key] = with_files(value, folder)
        return replaced
    if isinstance(data, list):
        return [with_files(item, folder) for item in data]
    return data


def validate(block: Block, kind: str, data: Any, folder: Path) -> list[str]:
    """Problems with a classified block, stand-in files made in `folder`; [] when it is good."""
    if kind in ("component", "fragment", "config"):
        if kind == "component":
            section, component_id = BODY_MARKER.match(block.text.lstrip().splitlines()[0]).groups()
            data = {section: {component_id: data}}
        data = with_files(data if kind == "config" else as_config(data), folder)
        text = yaml.safe_dump(data, sort_keys=False)
        try:
            parse_config(text, source=block.where, environ=dummy_environment(block.text), factories=factories())
        except ConfigError as exc:
            return exc.problems
        return []
    if kind == "dataset":
        try:
            parse_dataset(block.text, "yaml", source=block.where)
        except DatasetError as exc:
            return exc.problems
    if kind == "worked-examples":
        try:
            parse_examples(block.text, jsonl=False, source=block.where)
        except ExamplesError as exc:
            return exc.problems
    return []  # the other kinds are only parsed


# -- the checks ---------------------------------------------------------------------------

BLOCKS = [block for path in MARKDOWN for block in page(path).blocks]
YAML_BLOCKS = [block for block in BLOCKS if block.info in ("yaml", "yml")]


def test_the_docs_are_found():
    assert "README.md" in MARKDOWN
    assert any(path.startswith("docs/") for path in MARKDOWN)
    assert YAML_BLOCKS


def test_readme_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES} and move details into docs/"
    )


@pytest.mark.parametrize("path", MARKDOWN)
def test_relative_links_resolve(path):
    problems = [
        f"{path}:{line}: {problem}"
        for line, target in links(page(path))
        for problem in [link_problem(path, target)]
        if problem
    ]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_yaml_block_is_recognized():
    unknown = []
    for block in YAML_BLOCKS:
        try:
            data = yaml.safe_load(block.text)
        except yaml.YAMLError:
            continue  # reported by test_yaml_block
        if classify(block, data) is None:
            shape = sorted(data) if isinstance(data, dict) else type(data).__name__
            unknown.append(f"{block.where}: top-level {shape}")
    assert not unknown, "YAML blocks no rule recognizes (see this file's docstring):\n" + "\n".join(unknown)


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[block.where for block in YAML_BLOCKS])
def test_yaml_block(block, monkeypatch, tmp_path):
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"{block.where}: not valid YAML: {exc}")
    kind = classify(block, data)
    assert kind is not None, f"{block.where}: no rule recognizes this block (see this file's docstring)"
    monkeypatch.chdir(ROOT)
    problems = validate(block, kind, data, tmp_path)
    assert not problems, f"{block.where} ({kind}):\n" + "\n".join(f"  {p}" for p in problems)


# An inline code span that reads as a YAML setting with a flow collection, such as
# `sending_queue: {storage: file_storage}`: a reader copies these as they are.
INLINE_YAML = re.compile(r"^[A-Za-z_][\w/.-]*: .*[{\[]")


def inline_yaml(path: str) -> list[Block]:
    """The inline YAML settings of a page, outside fenced blocks; a span may wrap lines."""
    lines = page(path).lines
    text = " ".join(lines)
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    return [
        Block(path, bisect.bisect_right(starts, match.start()), "inline", match.group(2).strip())
        for match in CODE_SPAN.finditer(text)
        if INLINE_YAML.match(match.group(2).strip())
    ]


INLINE_BLOCKS = [block for path in MARKDOWN for block in inline_yaml(path)]


def test_inline_yaml_is_found():
    assert any(block.text.startswith("sending_queue: {storage: file_storage}") for block in INLINE_BLOCKS)


@pytest.mark.parametrize("block", INLINE_BLOCKS, ids=[f"{b.path}:{b.text[:40]}" for b in INLINE_BLOCKS])
def test_inline_yaml(block, monkeypatch, tmp_path):
    """Parses; and, a whole config fragment (a section at the top, no `...` elided), validates."""
    problem = inline_yaml_problem(block, tmp_path, monkeypatch)
    assert problem is None, f"{block.where}: `{block.text}`: {problem}"


def inline_yaml_problem(block: Block, tmp_path: Path, monkeypatch) -> str | None:
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        return f"not valid YAML: {exc}"
    if "..." in block.text or classify(block, data) not in ("fragment", "config"):
        return None
    monkeypatch.chdir(ROOT)
    problems = validate(block, classify(block, data), data, tmp_path)
    return "; ".join(problems) or None


def test_a_bad_inline_snippet_is_caught(tmp_path, monkeypatch):
    unparsable = Block("README.md", 0, "inline", "judge: {model: gpt-4.1-mini, api_key: ${env:OPENAI_API_KEY}}")
    assert "not valid YAML" in inline_yaml_problem(unparsable, tmp_path, monkeypatch)
    invalid = Block("README.md", 0, "inline", "processors: {judge_metrics: {mode: sometimes}}")
    assert inline_yaml_problem(invalid, tmp_path, monkeypatch)


OTHER_BLOCKS = [block for block in BLOCKS if block.info in ("toml", "json", "python", "py")]


@pytest.mark.parametrize("block", OTHER_BLOCKS, ids=[block.where for block in OTHER_BLOCKS])
def test_other_blocks_parse(block):
    if block.info == "toml":
        tomllib.loads(block.text)
    elif block.info == "json":
        json.loads(block.text)
    else:
        ast.parse(block.text, block.where)


# -- the checker itself --------------------------------------------------------------------


def test_slugs_follow_github():
    assert slug("What did the judge see? `spanscore inspect`") == "what-did-the-judge-see-spanscore-inspect"
    assert slug("Processor `ground_truth`: eval suites") == "processor-ground_truth-eval-suites"
    assert slug("Deploy: image, compose stack, sidecar, scale-out") == "deploy-image-compose-stack-sidecar-scale-out"
    assert slug("pass@k and pass^k") == "passk-and-passk"


def test_a_fragment_is_completed_into_a_config():
    config = as_config({"processors": {"judge_metrics": {"mode": "combined"}}, "extensions": {"health_check": {}}})
    assert config["service"]["pipelines"]["traces"] == {
        "receivers": ["otlp"],
        "exporters": ["debug"],
        "processors": ["judge_metrics"],
    }
    assert config["service"]["extensions"] == ["health_check"]
    routed = as_config({"service": {"pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["otlp/tempo"]}}}})
    assert routed["exporters"]["otlp/tempo"] == STAND_INS[("exporters", "otlp")]


def test_a_broken_link_and_a_bad_snippet_are_caught(tmp_path):
    assert link_problem("README.md", "docs/no-such-page.md") is not None
    assert link_problem("README.md", "#no-such-heading") is not None
    bad = Block("README.md", 1, "yaml", "processors:\n  judge_metrics: {mode: sometimes}\n")
    assert validate(bad, classify(bad, yaml.safe_load(bad.text)), yaml.safe_load(bad.text), tmp_path)
    unknown = Block("README.md", 1, "yaml", "anything: 1\n")
    assert classify(unknown, yaml.safe_load(unknown.text)) is None
