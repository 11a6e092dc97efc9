"""Secrets kept out of what leaves for a model server, and out of what spanscore logs.

Trace content is sent to an LLM judge, often a third party's. Agents' spans carry what
their tools saw: API keys in tool arguments, bearer tokens in HTTP headers, customers'
e-mail addresses. Before a trace's text reaches a prompt, `Redaction` replaces:

- built in (on unless turned off): the shapes of common secrets, each with a marker that
  says what was there, so the judge still reads "the agent sent an API key":
  provider API keys (`sk-...` of OpenAI and Anthropic, Stripe, AWS `AKIA...`, Google
  `AIza...`) → `[redacted api key]`; tokens (GitHub `ghp_...`, GitLab, Slack, Hugging
  Face, JWTs, `Bearer ...`) → `[redacted token]`; `Basic <user:password in base64>` →
  `Basic [redacted secret]`; PEM private keys; e-mail addresses, internationalized ones
  too → `[redacted email]`; payment card numbers (13-19 digits, run together or in
  printed groups, passing the Luhn check) → `[redacted card number]`; and the value of
  a secret-named key → `[redacted secret]`;
- the operator's own `patterns` (regular expressions) and `keys` → `[REDACTED]`.

A key is secret-named when its last words are a secret's name (`SECRET_KEYS`: `api_key`,
`token`, `secret`, `password`, `cookie`, `credentials`, `authorization`, ...), its words
split at `_`, `-`, `.` and case changes, compared in any case and with `_`, `-` or
nothing between them: `db_password`, `OPENAI_API_KEY`, `stripeSecretKey`,
`X-Auth-Token`, `http.request.header.authorization`, `apikey`. Words after the name make
another key: `token_count`, `gen_ai.usage.input_tokens`, `llm.token_count.prompt`,
`password_policy_url` are not secrets, and nor are `key` alone, `cache_key` or
`primary_key`. Keys are found as JSON keys and, in text, before `=` or `:` (`key=value`,
`KEY="value"`, `key: value`, `"key": "value"`, env-style `export DB_PASSWORD=...`). An
`Authorization` value keeps its scheme; a `Cookie` value runs to the end of its line.

`scrub` applies the built-in shapes to texts spanscore did not write (a server's error
message can echo the request, or the key it refused) and cuts them short, before they
reach a log line or an `eval.<metric>.error` attribute.

Every pattern starts with a literal (`sk-`, `eyJ`, `@`...) that the regex engine finds
with a fast scan, and none can backtrack badly: redacting costs tens of milliseconds per
megabyte of text, and text holding no secret shape is returned as it came.
"""

from __future__ import annotations

import base64
import json
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, model_validator

from spanscore.core.component import ComponentConfig

REDACTED = "[REDACTED]"  # what the operator's own patterns and keys become
SECRET = "[redacted secret]"
API_KEY = "[redacted api key]"
TOKEN = "[redacted token]"
EMAIL = "[redacted email]"
PRIVATE_KEY = "[redacted private key]"
CARD = "[redacted card number]"

# (pattern, marker), applied in this order. Each pattern starts with a literal, which the
# regex engine finds with a fast scan; the word boundary before it is a lookbehind after it.
SECRET_SHAPES: tuple[tuple[str, str], ...] = (
    (r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]*?-----END [A-Z ]{0,40}PRIVATE KEY-----", PRIVATE_KEY),
    # "Bearer <token>" keeps its first word: the judge should still see an Authorization was sent.
    (r"Bearer(?<!\wBearer)[ \t]+[A-Za-z0-9._~+/-]{16,}=*", f"Bearer {TOKEN}"),
    (r"bearer(?<!\wbearer)[ \t]+[A-Za-z0-9._~+/-]{16,}=*", f"bearer {TOKEN}"),
    (r"eyJ(?<!\weyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", TOKEN),  # JWT
    (r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}", API_KEY),  # OpenAI (sk-proj-...), Anthropic (sk-ant-...), DeepSeek...
    (r"sk_(?<!\wsk_)(?:live|test)_[A-Za-z0-9]{16,}", API_KEY),  # Stripe secret keys
    (r"rk_(?<!\wrk_)(?:live|test)_[A-Za-z0-9]{16,}", API_KEY),  # Stripe restricted keys
    (r"AKIA(?<!\wAKIA)[0-9A-Z]{16}\b", API_KEY),  # AWS access key ids
    (r"ASIA(?<!\wASIA)[0-9A-Z]{16}\b", API_KEY),
    (r"AIza(?<!\wAIza)[0-9A-Za-z_-]{35}", API_KEY),  # Google
    (r"gh[pousr]_(?<!\wgh[pousr]_)[A-Za-z0-9]{36,}", TOKEN),  # GitHub
    (r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{22,}", TOKEN),
    (r"glpat-(?<!\wglpat-)[A-Za-z0-9_-]{20,}", TOKEN),  # GitLab
    (r"xox[abeoprs]-(?<!\wxox[abeoprs]-)[A-Za-z0-9-]{10,}", TOKEN),  # Slack
    (r"hf_(?<!\whf_)[A-Za-z0-9]{30,}", TOKEN),  # Hugging Face
)
# A payment card number: 13 to 19 digits, run together or in the groups cards are printed
# in (4-4-4-4, 4-4-4-4-3; 4-6-5 and 4-6-4 of Amex and Diners) split by one kind of space
# or dash, starting with 2-6 (the issuers' major industry identifiers: Mastercard 2 and 5,
# Amex, Diners and JCB 3, Visa 4, Discover and UnionPay 6), and only when the Luhn check
# passes. So ISO timestamps, phone numbers, ids inside hex strings, millisecond epochs
# (starting with 1) and nine in ten order numbers are kept. Like the shapes above it starts
# with what the regex engine scans for fast, a digit, and its lookbehind comes after.
_CARD = re.compile(
    r"[2-6](?<![\w.,+-][2-6])(?:\d{12,18}"
    r"|\d{3}(?P<sep>[ -])\d{4}(?P=sep)\d{4}(?P=sep)\d{4}(?:(?P=sep)\d{3})?"
    r"|(?<=3)\d{3}(?P<sep2>[ -])\d{6}(?P=sep2)\d{4,5})(?![\w.,]?\d|[\w-])"
)
# "Basic <base64>" is hidden when the base64 decodes to "user:password" (RFC 7617), so
# that "basic understanding" stays.
_BASIC = tuple(
    re.compile(rf"({scheme})(?<!\w{scheme})[ \t]+([A-Za-z0-9+/]{{4,}}={{0,2}})(?![\w+/=])")
    for scheme in ("Basic", "basic")
)
# An e-mail address is found from its "@" and domain, whose labels and top-level domain
# may be in any script (IDNA); its local part, any script too, is walked back to by hand.
_EMAIL_DOMAIN = re.compile(r"@[\w-]{1,63}(?:\.[\w-]{1,63}){0,8}\.(?:xn--[a-z0-9-]{1,59}|[^\W\d_]{2,24})\b")
_EMAIL_LOCAL_MARKS = frozenset("._%+-")
MAX_EMAIL_LOCAL = 64
# A key is secret when its last words are one of these names, in any case and with "_",
# "-" or nothing between words: `token` covers `access_token`, `X-Auth-Token`, `idToken`;
# `secret` covers `client_secret`; `access_key` covers `aws_secret_access_key`.
SECRET_KEYS: tuple[str, ...] = (
    "api_key",
    "token",
    "secret",
    "secret_key",
    "access_key",
    "access_key_id",
    "private_key",
    "signing_key",
    "encryption_key",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "cookie",
    "cookies",
    "authorization",
)
# Keys whose value is `<scheme> <credentials>`: the scheme stays, as "Bearer ..." does.
_SCHEMED_KEYS = frozenset({"authorization"})
# Keys whose value is a list of `name=value; ...` pairs: all of it to the end of the line.
_LINE_KEYS = frozenset({"cookie", "cookies"})
MAX_MESSAGE_CHARS = 300  # a server's error message in a log line or an error attribute


# After a key's name: a closing quote, `:` or `=`, then a quoted or bare value (group 1)
# that is not already a marker.
_KEY_VALUE = re.compile(r"""["']?\s*[:=]\s*(?!["']?\[(?:REDACTED\]|redacted ))("[^"]*"|'[^']*'|[^\s,;&}\]]+)""")
# The same for an Authorization: the credentials (group 1) after a scheme, if there is one
# (HTTP's registered schemes and the usual others: a word that is none is the credentials).
_SCHEMES = (
    "bearer|basic|digest|token|negotiate|ntlm|apikey|api-key|aws4-hmac-sha256|hoba|mutual|dpop|gnap|"
    "privatetoken|scram-sha-1|scram-sha-256|vapid|concealed|sso|otp"
)
_SCHEMED_VALUE = re.compile(
    rf"""["']?\s*[:=]\s*["']?(?:(?i:{_SCHEMES})[ \t]+)?(?!\[(?:REDACTED\]|redacted ))([^\s"',;&}}\]]+)"""
)
# The same for a Cookie: the value (group 1) to the end of the line, or of its quotes.
_LINE_VALUE = re.compile(r"""["']?\s*[:=]\s*(?!["']?\[(?:REDACTED\]|redacted ))("[^"]*"|'[^']*'|[^\r\n"'}\]]+)""")
_KEY_CHARS = frozenset(string.ascii_lowercase + string.digits + "_-.")
# Where a key's words start: after a separator, at a case change (`apiKey`, `APIKey`), at digits.
_WORD_START = re.compile(r"(?<=[-_.])[^-_.]|(?<=[a-z0-9])[A-Z]|(?<=[A-Z])[A-Z](?=[a-z])|(?<=[A-Za-z])[0-9]")


def _normal(name: str) -> str:
    """A key's name as compared: lowercase, without the `_` and `-` between its words."""
    return name.lower().replace("_", "").replace("-", "")


@dataclass(frozen=True)
class _KeyNames:
    """Names of keys whose values are hidden, compared by `_normal`; a key is named by
    them when its last words are one (see the module docstring). In text, a key is found
    from a word of its name (`key` of `api_key`, `token`), which `str.find` on the
    lowered text finds much faster than a case-insensitive regex would the names; the
    whole key is then read around it."""

    names: frozenset[str]
    anchors: frozenset[str]
    suffixes: tuple[str, ...]  # the names, for `str.endswith`

    @classmethod
    def of(cls, keys: Iterable[str]) -> _KeyNames:
        keys = [key.lower() for key in keys if _normal(key)]
        # A name's longest word is found least often by chance (`access` of `access_key_id`,
        # not `id`); a word holding another (`cookies`, `cookie`) is found by the other.
        words = {max(reversed([w for w in re.split(r"[-_.]", key) if w]), key=len) for key in keys}
        anchors = {word for word in words if not any(other != word and other in word for other in words)}
        names = frozenset(map(_normal, keys))
        return cls(names, frozenset(anchors), tuple(names))

    def named(self, key: str) -> str | None:
        """The name, normalized, that a key (as written: its case splits words) ends
        with as whole words, the longest; None when it ends with none."""
        whole = _normal(key)
        if whole in self.names:
            return whole
        if not whole.endswith(self.suffixes):  # most keys found in text: `tokens`, `token_count`
            return None
        for start in _WORD_START.finditer(key):
            name = _normal(key[start.start() :])
            if name in self.names:
                return name
        return None


def _hide_key_values(text: str, keys: _KeyNames, marker: str) -> str:
    """`key=value`, `key: value`, `"key": "value"` with the value of each named key
    replaced by `marker`, inside its quotes if it has any; the value of an Authorization
    keeps its scheme."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lower to two ("İ"): keep the positions aligned
        lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    values: list[tuple[int, int]] = []
    for anchor in keys.anchors:
        found = lowered.find(anchor)
        while found != -1:
            start, end = found, found + len(anchor)
            while start > 0 and lowered[start - 1] in _KEY_CHARS:
                start -= 1
            while end < len(lowered) and lowered[end] in _KEY_CHARS:
                end += 1
            while lowered[end - 1] in ".-":  # "the password." ends a sentence, not a key
                end -= 1
            name = keys.named(text[start:end])
            if name is not None:
                value = _SCHEMED_VALUE if name in _SCHEMED_KEYS else _LINE_VALUE if name in _LINE_KEYS else _KEY_VALUE
                match = value.match(text, end)
                if match is not None:
                    values.append(match.span(1))
                    end = match.end()  # a name inside a value is part of the value: linear, not quadratic
            found = lowered.find(anchor, max(end, found + 1))
    if not values:
        return text
    parts, done = [], 0
    for start, end in sorted(values):
        if start < done:
            continue  # the same value found from another anchor (`secret_key`: `secret`, `key`)
        quote = text[start] if text[start] in "\"'" else ""
        parts += [text[done:start], quote, marker, quote]
        done = end
    return "".join([*parts, text[done:]])


_SHAPES = tuple((re.compile(pattern), marker) for pattern, marker in SECRET_SHAPES)
_SECRET_KEYS = _KeyNames.of(SECRET_KEYS)


@dataclass(frozen=True)
class Redaction:
    """What to hide before any text reaches a prompt or a result's metadata.

    `builtin`: the secret shapes and secret-named keys above. `patterns`: regular
    expressions whose matches become `[REDACTED]`. `keys`: names whose values become
    `[REDACTED]` under any key whose last words they are, matched as the built-in names
    are (`pin_code` covers `PinCode`, `customer_pin_code`, `http.request.header.pin-code`):
    as keys of structured tool arguments and results, and as `key=value` /
    `"key": value` inside text. The operator's rules run first.

    Threading: immutable; share it freely.
    """

    patterns: Sequence[str] = ()
    keys: Sequence[str] = ()
    builtin: bool = True
    _compiled: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _keys: _KeyNames = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = []
        for pattern in self.patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"redact.patterns: invalid regular expression {pattern!r}: {exc}") from None
        object.__setattr__(self, "_compiled", tuple(compiled))
        object.__setattr__(self, "_keys", _KeyNames.of(self.keys))

    @classmethod
    def from_config(cls, config: Redaction | Mapping[str, Any] | bool | None) -> Redaction:
        """Accepts the `redact:` setting as parsed YAML: `false` (nothing hidden), `true`,
        or `{builtin: true, patterns: [...], keys: [...]}`; None means the defaults."""
        if config is None or config is True:
            return cls()
        if config is False:
            return cls(builtin=False)
        if isinstance(config, Redaction):
            return config
        unknown = set(config) - {"patterns", "keys", "builtin"}
        if unknown:
            raise ValueError(f"redact: unknown keys {sorted(unknown)} (expected builtin, patterns, keys)")
        return cls(
            patterns=tuple(config.get("patterns") or ()),
            keys=tuple(config.get("keys") or ()),
            builtin=bool(config.get("builtin", True)),
        )

    @property
    def enabled(self) -> bool:
        return self.builtin or bool(self._compiled or self._keys.names)

    def key_marker(self, key: Any) -> str | None:
        """What the value under `key` becomes, or None when the key is not a secret's."""
        name = str(key)
        if self._keys.named(name) is not None:
            return REDACTED
        if self.builtin and _SECRET_KEYS.named(name) is not None:
            return SECRET
        return None

    def text(self, value: str) -> str:
        if self._keys.names:
            value = _hide_key_values(value, self._keys, REDACTED)
        for pattern in self._compiled:
            value = pattern.sub(REDACTED, value)
        if self.builtin:
            value = _builtin_text(value)
        return value

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secret keys and pattern matches hidden.

        A string holding a JSON object or array is redacted structurally, so that a
        secret key inside serialized tool arguments is found whatever its formatting.
        """
        if not self.enabled:
            return value
        if isinstance(value, Mapping):
            redacted = {}
            for key, item in value.items():
                marker = self.key_marker(key)
                redacted[key] = self.value(item) if marker is None else marker
            return redacted
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        if isinstance(value, str):
            parsed = _json_container(value)
            if parsed is not None:
                return json.dumps(self.value(parsed), ensure_ascii=False)
            return self.text(value)
        return value


def _builtin_text(value: str) -> str:
    value = _hide_key_values(value, _SECRET_KEYS, SECRET)
    for pattern, marker in _SHAPES:
        value = pattern.sub(marker, value)
    if "asic" in value:
        for pattern in _BASIC:
            value = pattern.sub(_basic_credentials, value)
    value = _CARD.sub(_card_number, value)
    return _hide_emails(value) if "@" in value else value


def _card_number(match: re.Match[str]) -> str:
    return CARD if luhn(re.sub(r"[ -]", "", match.group())) else match.group()


def luhn(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check that card numbers carry."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _basic_credentials(match: re.Match[str]) -> str:
    try:
        decoded = base64.b64decode(match.group(2), validate=True)
    except ValueError:
        return match.group()
    return f"{match.group(1)} {SECRET}" if b":" in decoded else match.group()


def _hide_emails(text: str) -> str:
    parts: list[str] = []
    done = 0
    for match in _EMAIL_DOMAIN.finditer(text):
        start = match.start()
        while start > max(done, match.start() - MAX_EMAIL_LOCAL) and (
            text[start - 1].isalnum() or text[start - 1] in _EMAIL_LOCAL_MARKS
        ):
            start -= 1
        if start == match.start():
            continue  # "@host.com" alone is not an address
        parts += [text[done:start], EMAIL]
        done = match.end()
    return "".join([*parts, text[done:]]) if parts else text


def _json_container(text: str) -> dict | list | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return None
    return parsed if isinstance(parsed, (dict, list)) else None


def scrub(text: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """A text from outside (a server's error message) fit for a log line: the built-in
    secret shapes hidden, then cut to `max_chars` with the length noted."""
    return cut(_builtin_text(text), max_chars)


def cut(text: str, max_chars: int) -> str:
    """`text` shortened to `max_chars`, saying how much was left out."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]} [… truncated {len(text) - max_chars:,} characters]"


def safe_url(url: str) -> str:
    """`url` fit for a log line: without user info (`https://user:pass@host`) or query
    (`?api-key=...`), where credentials are sometimes put."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[-1], parts.path, "", ""))


class RedactConfig(ComponentConfig):
    """The `redact:` setting of the components that send trace text to a model server:
    `true` (the default: the built-in shapes), `false`, or `{builtin, patterns, keys}`."""

    builtin: bool = True  # the shapes above: API keys, tokens, e-mail addresses
    patterns: list[str] = Field(default_factory=list)  # regexes; matches become [REDACTED]
    keys: list[str] = Field(default_factory=list)  # values under these keys become [REDACTED]

    @model_validator(mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        # `redact: false` sends trace content as recorded; `redact: true` is the default.
        return {"builtin": value} if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _compiles(self) -> RedactConfig:
        self.redaction()  # raises on a bad regex
        return self

    def redaction(self) -> Redaction:
        return Redaction(patterns=tuple(self.patterns), keys=tuple(self.keys), builtin=self.builtin)
