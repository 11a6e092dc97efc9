"""`${env:VAR}` and `${env:VAR:-default}` in config values, as the Collector expands them.

Expansion runs on the parsed YAML scalars, not on the raw text, so a problem can be
reported with the key path it sits under and an expanded value cannot inject YAML
structure. A value that is exactly one reference is re-read as a YAML scalar, so
`port: ${env:PORT}` yields an int and `insecure: ${env:TLS_OFF}` a bool. `$$` escapes a
literal `$`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

_REFERENCE = re.compile(r"\$\$|\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MALFORMED = re.compile(r"\$\{(?!env:[A-Za-z_][A-Za-z0-9_]*(?::-[^}]*)?\})[^}]*\}?")


def expand_env(
    node: Any,
    path: str,
    problems: list[str],
    environ: Mapping[str, str] | None = None,
    sources: dict[str, EnvSource] | None = None,
    unexpanded: set[str] | None = None,
) -> Any:
    """Return `node` with every env reference expanded; problems are appended by key path.

    `sources`, when given, gets each expanded value's key path, the variables it read and
    the value, so an error about a value can name the variable to change. `unexpanded`,
    when given, gets the key path of each value whose reference could not be expanded.
    """
    env = os.environ if environ is None else environ
    if isinstance(node, dict):
        return {
            key: expand_env(value, _join(path, key), problems, env, sources, unexpanded) for key, value in node.items()
        }
    if isinstance(node, list):
        return [expand_env(value, f"{path}[{i}]", problems, env, sources, unexpanded) for i, value in enumerate(node)]
    if not isinstance(node, str) or "$" not in node:
        return node
    where = path or "<root>"
    bad = _MALFORMED.search(node.replace("$$", ""))
    if bad:
        problems.append(
            f"{where}: {bad.group(0)!r} is not a valid reference; use ${{env:VAR}} or ${{env:VAR:-default}}"
        )
        if unexpanded is not None:
            unexpanded.add(where)
        return node

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.append(f"{where}: environment variable {name} is not set and has no default")
        if unexpanded is not None:
            unexpanded.add(where)
        return ""

    whole = _REFERENCE.fullmatch(node)
    expanded = _REFERENCE.sub(substitute, node)
    if sources is not None:
        names = tuple(m.group(1) for m in _REFERENCE.finditer(node) if m.group(1))
        if names:
            sources[path] = EnvSource(names, expanded)
    if whole and whole.group(0) != "$$":
        try:
            return yaml.safe_load(expanded) if expanded.strip() else expanded
        except yaml.YAMLError:
            return expanded
    return expanded


@dataclass(frozen=True)
class EnvSource:
    """Where a config value came from: the variables its text referenced, and what it became."""

    variables: tuple[str, ...]
    value: str


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)
