"""Secrets never reach the judge, the logs or the error attributes: the built-in shapes by
hand, then prompts and log lines around a real loopback server."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from spanscore.core.redaction import Redaction, safe_url, scrub
from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.judge_metrics.client import OpenAIJudge
from spanscore.processors.judge_metrics.planner import JudgePlan
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from tests.support.judge_answers import schema_judge
from tests.support.judge_request import FAST_RETRY
from tests.support.openai_server import ErrorReply, OpenAIServer
from tests.support.scripted_judge import tool_step

OPENAI_KEY = "sk-proj-" + "Ab3" * 12
ANTHROPIC_KEY = "sk-ant-api03-" + "x9Y" * 10
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "0aZ" * 12
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
BEARER = "tok_8f7a6b5c4d3e2f1a0b9c"
EMAIL = "jane.doe+billing@example.co.uk"
PASSWORD = "hunter2-correct-horse"
BASIC = "Ym9iOmh1bnRlcjItY29ycmVjdC1ob3JzZQ=="  # bob:hunter2-correct-horse
IDN_EMAIL = "bob@exämple.de"
TOOL_TOKEN = "tk-5f0c2a9e77d1"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, AWS_KEY, GITHUB_TOKEN, JWT, BEARER, EMAIL, PASSWORD, BASIC, IDN_EMAIL, TOOL_TOKEN)


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"key {OPENAI_KEY}.", "key [redacted api key]."),
        (f"x-api-key: {ANTHROPIC_KEY}", "x-api-key: [redacted secret]"),
        (f"claude key {ANTHROPIC_KEY}", "claude key [redacted api key]"),
        (f"aws {AWS_KEY} ok", "aws [redacted api key] ok"),
        ("stripe sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "stripe [redacted api key]"),
        ("google AIza" + "SyD" * 11 + "-_", "google [redacted api key]"),
        (f"git push https://{GITHUB_TOKEN}@github.com", "git push https://[redacted token]@github.com"),
        (f"Authorization: Bearer {BEARER}", "Authorization: Bearer [redacted secret]"),  # a secret key's value
        (f"sent Bearer {BEARER} along", "sent Bearer [redacted token] along"),
        (f"Authorization: Basic {BASIC}", "Authorization: Basic [redacted secret]"),
        (f'[["Authorization", "Basic {BASIC}"]]', '[["Authorization", "Basic [redacted secret]"]]'),
        (f"curl -H 'proxy-authorization: basic {BASIC}' x", "curl -H 'proxy-authorization: basic [redacted secret]' x"),
        (f"mail {IDN_EMAIL}, thanks", "mail [redacted email], thanks"),
        (
            "jörg.müller@beispiel.de or 用户@例子.广告 or a@b.xn--p1ai",
            "[redacted email] or [redacted email] or [redacted email]",
        ),
        (f'{{"city": "Paris", "token": "{TOOL_TOKEN}"}}', '{"city": "Paris", "token": "[redacted secret]"}'),
        (
            f"X-Auth-Token: {TOOL_TOKEN}; secret={TOOL_TOKEN}",
            "X-Auth-Token: [redacted secret]; secret=[redacted secret]",
        ),
        (f"sent {JWT}", "sent [redacted token]"),
        (f"mail {EMAIL}, thanks", "mail [redacted email], thanks"),
        (f'{{"user": "ann", "password": "{PASSWORD}"}}', '{"user": "ann", "password": "[redacted secret]"}'),
        (f"api_key={OPENAI_KEY}&q=1", "api_key=[redacted secret]&q=1"),
        (f"İstanbul office, PASSWORD = {PASSWORD}", "İstanbul office, PASSWORD = [redacted secret]"),  # "İ" lowers to 2
        ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----", "[redacted private key]"),
        # Look-alikes stay: words ending in "sk-", prefixes inside longer words, a bare "@host".
        *[
            (text, text)
            for text in (
                "task-0123456789abcdefghijklmn and xAKIAIOSFODNN7EXAMPLE",
                "the bearer of this letter, max_tokens=512, @example.com",
                "a basic understanding, Basic dGVzdA== (no user:password), token_count: 5, tokens: 5",
            )
        ],
    ],
)
def test_builtin_secret_shapes_become_markers(text, expected):
    assert Redaction().value(text) == expected


@pytest.mark.parametrize(
    "key", ["token", "Token", "TOKEN", "accessToken", "Access-Token", "CLIENT_SECRET", "clientSecret", "X-Api-Key"]
)
def test_secret_keys_match_in_any_case_and_spelling_in_any_json(key):
    arguments = {"query": "weather", "auth": {key: TOOL_TOKEN}, "headers": [{key: TOOL_TOKEN}]}
    expected = {"query": "weather", "auth": {key: "[redacted secret]"}, "headers": [{key: "[redacted secret]"}]}
    assert Redaction().value(arguments) == expected
    assert Redaction().value(json.dumps(arguments)) == json.dumps(expected)  # serialized tool arguments
    assert TOOL_TOKEN not in Redaction().value(json.dumps(arguments)[:-3])  # cut short: no longer JSON
    assert Redaction(builtin=False, keys=["pin_code"]).value({key.replace("token", "pin_code"): 1, "PinCode": 2}) == {
        key.replace("token", "pin_code"): 1 if "token" not in key else "[REDACTED]",
        "PinCode": "[REDACTED]",
    }


COMPOUND_SECRET_KEYS = (
    "db_password",
    "openai_api_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "stripeSecretKey",
    "myServiceApiKey",
    "APIKey",
    "passphrase",
    "cookie",
    "Set-Cookie",
    "credentials",
    "OPENAI_API_KEY",
    "DB_PASSWORD",
    "x-auth-token",
    "my_token",
    "http.request.header.authorization",
)
# Attributes spanscore reads, and words that only begin like a secret's name.
NOT_SECRET_KEYS = (
    "token_count",
    "max_tokens",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",
    "llm.token_count.total",
    "password_policy_url",
    "tokenizer",
    "cache_key",
    "primary_key",
    "key",
    "session.id",
    "secretary",
    "cookie_consent",
)


@pytest.mark.parametrize("key", COMPOUND_SECRET_KEYS)
def test_compound_secret_keys_are_found_in_json_and_in_text(key):
    assert Redaction().value({key: TOOL_TOKEN, "city": "Paris"}) == {key: "[redacted secret]", "city": "Paris"}
    for text in (
        f"{key}={TOOL_TOKEN}",
        f'{key}="{TOOL_TOKEN}"',
        f"{key}: {TOOL_TOKEN}",
        f'{{"{key}": "{TOOL_TOKEN}"}}',
    ):
        assert TOOL_TOKEN not in Redaction().text(f"ran it with {text} and got 200"), text


def test_env_style_assignments_in_free_text_are_redacted():
    shell = f"export OPENAI_API_KEY={OPENAI_KEY[:12]}\nDB_PASSWORD='{PASSWORD}' ./run.sh\nmyServiceApiKey={TOOL_TOKEN}"
    assert Redaction().text(shell) == (
        "export OPENAI_API_KEY=[redacted secret]\nDB_PASSWORD='[redacted secret]' ./run.sh\n"
        "myServiceApiKey=[redacted secret]"
    )
    # A Cookie header's pairs are its value, all of them.
    assert Redaction().text("Cookie: sid=abc123; theme=dark\nHost: x") == "Cookie: [redacted secret]\nHost: x"


@pytest.mark.parametrize("key", NOT_SECRET_KEYS)
def test_keys_that_only_begin_with_a_secrets_name_are_kept(key):
    assert Redaction().value({key: 512}) == {key: 512}
    assert Redaction().text(f"{key}=512 and {key}: 512") == f"{key}=512 and {key}: 512"


def test_operator_keys_match_compound_names_too():
    rules = Redaction(builtin=False, keys=["pin_code"])
    assert rules.value({"customerPinCode": 1, "card_pin_code": 2, "pin_code_length": 4}) == {
        "customerPinCode": "[REDACTED]",
        "card_pin_code": "[REDACTED]",
        "pin_code_length": 4,
    }
    assert rules.text("CARD_PIN_CODE=1234") == "CARD_PIN_CODE=[REDACTED]"


def test_operator_rules_come_first_and_redact_false_turns_the_builtin_off():
    rules = Redaction.from_config({"keys": ["password"], "patterns": [r"\b\d{16}\b"]})
    assert rules.text(f"card 4111111111111111 password: {PASSWORD} {EMAIL}") == (
        "card [REDACTED] password: [REDACTED] [redacted email]"
    )
    assert Redaction.from_config(False).text(f"{EMAIL} {OPENAI_KEY}") == f"{EMAIL} {OPENAI_KEY}"
    assert Redaction.from_config({"builtin": False, "keys": ["pin"]}).text(f"pin=1234 {EMAIL}") == (
        f"pin=[REDACTED] {EMAIL}"
    )


@pytest.mark.parametrize(
    "setting, seen",
    [
        ({}, "pin=1234 [redacted email]"),
        ({"redact": True}, "pin=1234 [redacted email]"),
        ({"redact": False}, f"pin=1234 {EMAIL}"),
        ({"redact": {"keys": ["pin"]}}, "pin=[REDACTED] [redacted email]"),
        ({"redact": {"builtin": False, "keys": ["pin"]}}, f"pin=[REDACTED] {EMAIL}"),
    ],
)
def test_the_redact_setting_of_judge_metrics(setting, seen):
    config = JudgeMetricsConfig.model_validate({"judge": {"model": "m", "base_url": "http://judge/v1"}, **setting})
    assert JudgeMetrics("judge_metrics", config).plan.redact.text(f"pin=1234 {EMAIL}") == seen


def test_a_bad_redact_pattern_is_a_config_error():
    with pytest.raises(ValidationError, match="redact.patterns: invalid regular expression"):
        JudgeMetricsConfig.model_validate({"redact": {"patterns": ["("]}})


def test_scrub_cuts_what_a_server_said_and_safe_url_drops_credentials():
    said = f"bad request for {EMAIL}: " + "x" * 400
    # 34 characters before the x's once redacted, 434 in all: 300 kept, 134 cut.
    assert scrub(said) == f"bad request for [redacted email]: {'x' * 266} [… truncated 134 characters]"
    assert safe_url("https://user:pw@judge.example/v1?api-key=k") == "https://judge.example/v1"


def secret_trace() -> AgentTrace:
    return AgentTrace(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        agent_name="billing_agent",
        system_prompt=f"Call the billing API with Authorization: Bearer {BEARER}",
        user_input=f"Refund order 42 and email {EMAIL}",
        final_output=f"Refunded; confirmation sent to {EMAIL}.",
        steps=[
            tool_step(
                "refund",
                {"order": 42, "api_key": OPENAI_KEY, "auth": {"password": PASSWORD}},
                result=f"ok, charged with {AWS_KEY}",
            ),
            tool_step(
                "notify", f'{{"to": "{EMAIL}", "token": "{JWT}"}}', result="queued " + "log line " * 400, span="b2"
            ),
            tool_step(
                "fetch",
                {
                    "url": "https://api.example/v1",
                    "Token": TOOL_TOKEN,
                    "headers": [["Authorization", f"Basic {BASIC}"]],
                },
                result=f"contact {IDN_EMAIL}",
                span="b4",
            ),
            tool_step(
                "push",
                {"remote": f"https://{GITHUB_TOKEN}@github.com/acme/app", "key": ANTHROPIC_KEY},
                result="pushed",
                span="b3",
            ),
        ],
    )


async def test_prompts_reach_the_judge_with_markers_instead_of_secrets_and_long_fields_cut():
    with OpenAIServer(handler=schema_judge(score=0.8)) as server:
        judge = OpenAIJudge(model="judge-test", base_url=server.base_url, api_key="test-key", retry=FAST_RETRY)
        results, usage = await JudgePlan(max_field_chars=1000).run(secret_trace(), judge)
    prompts = [r.messages()[-1]["content"] for r in server.requests_to("/chat/completions")]
    assert len(prompts) == usage["calls"] == 8
    for prompt in prompts:
        assert not [secret for secret in SECRETS if secret in prompt]
        assert "Authorization: Bearer [redacted secret]" in prompt
        assert "user_input: Refund order 42 and email [redacted email]" in prompt
        assert '"api_key": "[redacted secret]", "auth": {"password": "[redacted secret]"}' in prompt
        assert "result: ok, charged with [redacted api key]" in prompt
        assert '"to": "[redacted email]", "token": "[redacted secret]"' in prompt
        assert '"Token": "[redacted secret]", "headers": [["Authorization", "Basic [redacted secret]"]]' in prompt
        assert "contact [redacted email]" in prompt
        assert "https://[redacted token]@github.com/acme/app" in prompt and '"key": "[redacted api key]"' in prompt
        # "queued " + 400 x "log line " is 3,607 characters: 1,000 kept (7 + 110 x 9 + "log"), 2,607 cut.
        assert "result: queued log line" in prompt and "line log [… truncated 2,607 characters]" in prompt
    tools = next(r for r in results if r.name == "tool_correctness").metadata["tools_called"]
    assert tools[0]["parameters"] == {
        "order": 42,
        "api_key": "[redacted secret]",
        "auth": {"password": "[redacted secret]"},
    }


async def test_what_a_server_echoes_never_reaches_a_log_line_or_an_error(caplog):
    # As `spanscore run` sets it: spanscore's loggers at the configured level, the HTTP
    # libraries (which log each request's URL at INFO) at WARNING.
    caplog.set_level(logging.DEBUG, logger="spanscore")
    api_key = "sk-live-" + "Q7w" * 10
    echo = f"upstream refused Authorization: Bearer {BEARER} for {EMAIL} with {api_key} " + "x" * 500
    with OpenAIServer(handler=lambda request: ErrorReply(401, f"Incorrect API key provided: {api_key}")) as server:
        server.enqueue(ErrorReply(500, echo), ErrorReply(503, echo))
        judge = OpenAIJudge(
            model="judge-test",
            base_url=server.base_url.replace("://", f"://user:{PASSWORD}@"),
            api_key=api_key,
            retry=FAST_RETRY,
        )
        with pytest.raises(Exception) as caught:
            await judge.complete(
                [{"role": "user", "content": "grade"}],
                {"type": "object", "properties": {"score": {"type": "number"}}},
                "grade",
            )
    error = str(caught.value)
    assert error.endswith(
        "failed (not retryable): HTTP 401: Error code: 401 - Incorrect API key provided: [redacted api key]"
    )
    retries = [r.getMessage() for r in caplog.records if "judge request failed" in r.getMessage()]
    assert len(retries) == 2 and "Bearer [redacted secret] for [redacted email] with [redacted api key]" in retries[0]
    assert "[… truncated" in retries[0] and len(retries[0]) < 400
    logged = caplog.text + error + repr(judge)
    assert not [secret for secret in (api_key, BEARER, EMAIL, PASSWORD) if secret in logged]
