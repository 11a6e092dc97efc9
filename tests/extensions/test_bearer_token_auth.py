"""`bearertokenauth`: what it accepts, the header it sends, and a token file read again
when it changes, without the token ever reaching a log."""

from __future__ import annotations

import logging
import os

import pytest
from pydantic import ValidationError

from spanscore.core.auth import ClientAuthenticator, ServerAuthenticator
from spanscore.extensions.bearer_token_auth import BearerTokenAuth, BearerTokenAuthConfig

TOKEN = "tok-3e1f0c9a"


def auth(**settings) -> BearerTokenAuth:
    return BearerTokenAuth("bearertokenauth", BearerTokenAuthConfig.model_validate(settings))


def rewrite(path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # a new version even within one clock tick


def test_it_is_both_a_server_and_a_client_authenticator():
    extension = auth(token=TOKEN)
    assert isinstance(extension, ServerAuthenticator) and isinstance(extension, ClientAuthenticator)


@pytest.mark.parametrize(
    "header, accepted",
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer  {TOKEN} ", True),  # the scheme is case-insensitive; spaces around are not part of the token
        (f"Bearer {TOKEN.upper()}", False),
        (f"Bearer {TOKEN}x", False),
        (f"Basic {TOKEN}", False),
        (TOKEN, False),
        ("Bearer ", False),
        (None, False),
    ],
)
def test_only_the_scheme_and_the_exact_token_pass(header, accepted):
    headers = {} if header is None else {"authorization": header}
    assert auth(token=TOKEN).authenticate(headers) is accepted


def test_another_scheme_is_challenged_and_sent():
    extension = auth(token=TOKEN, scheme="Token")
    assert extension.authenticate({"authorization": f"Token {TOKEN}"})
    assert not extension.authenticate({"authorization": f"Bearer {TOKEN}"})
    assert extension.challenge() == "Token"
    assert extension.client_headers() == {"authorization": f"Token {TOKEN}"}


async def test_a_token_file_is_read_at_start_and_again_when_it_changes(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "token"
    rewrite(path, f"{TOKEN}\n")
    extension = auth(filename=str(path))
    await extension.start()
    assert extension.authenticate({"authorization": f"Bearer {TOKEN}"})
    rewrite(path, "rotated-71c2\n")
    assert extension.authenticate({"authorization": "Bearer rotated-71c2"})
    assert not extension.authenticate({"authorization": f"Bearer {TOKEN}"})
    assert "changed; using the new token" in caplog.text
    assert TOKEN not in caplog.text and "rotated-71c2" not in caplog.text


async def test_an_unreadable_token_file_keeps_the_previous_token_and_says_so_once(tmp_path, caplog):
    path = tmp_path / "token"
    rewrite(path, TOKEN)
    extension = auth(filename=str(path))
    await extension.start()
    rewrite(path, "")  # caught mid-rewrite
    for _ in range(3):
        assert extension.authenticate({"authorization": f"Bearer {TOKEN}"})
    path.unlink()
    for _ in range(3):
        assert extension.authenticate({"authorization": f"Bearer {TOKEN}"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("keeping the previous one" in w for w in warnings)
    assert TOKEN not in caplog.text


async def test_a_token_file_that_is_empty_at_start_stops_the_start(tmp_path):
    path = tmp_path / "token"
    path.write_text("\n")
    extension = auth(filename=str(path))
    with pytest.raises(OSError, match="cannot read a token"):
        await extension.start()
    assert not extension.authenticate({"authorization": "Bearer "})


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({}, "set one of token and filename"),
        ({"token": TOKEN, "filename": "/etc/hostname"}, "set one of token and filename"),
        ({"token": "  "}, "token is empty"),
        ({"filename": "/nonexistent/token"}, "does not exist"),
        ({"token": TOKEN, "scheme": "Bearer token"}, "should match pattern"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings, problem):
    with pytest.raises(ValidationError, match=problem):
        BearerTokenAuthConfig.model_validate(settings)


def test_the_token_stays_out_of_the_settings_repr():
    assert TOKEN not in repr(BearerTokenAuthConfig(token=TOKEN))
