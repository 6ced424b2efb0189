"""The access log's ``method`` field (``plumbing.accesslog``), in both formats:
between ``api`` and ``path``, ``-`` / ``null`` when not known, and a method
no client sends quoted in text so it cannot forge a field."""

from __future__ import annotations

import json

from flatgate.proxy.plumbing.accesslog import AccessLog, Entry, LogFormat


def rendered(log_format: LogFormat, **fields: object) -> str:
    out: list[bytes] = []
    log = AccessLog("edge", log_format, write=out.append)
    entry = Entry()
    for name, value in fields.items():
        setattr(entry, name, value)
    log.write(entry)
    log.flush()
    (line,) = b"".join(out).decode().splitlines()
    return line


def test_text_has_the_method_between_api_and_path() -> None:
    line = rendered("text", api="openai-chat", method="POST", path="/v1/chat/completions")
    assert " service=edge api=openai-chat method=POST path=/v1/chat/completions rid=- " in line
    assert " method=- path=- " in rendered("text")


def test_json_has_the_method_between_api_and_path() -> None:
    line = rendered("json", api=None, method="HEAD", path="/")
    record = json.loads(line)
    assert record["method"] == "HEAD" and record["path"] == "/" and record["api"] is None
    keys = list(record)
    assert keys.index("api") + 1 == keys.index("method") == keys.index("path") - 1
    assert json.loads(rendered("json"))["method"] is None


def test_a_method_a_caller_made_up_cannot_forge_a_field() -> None:
    line = rendered("text", method='GET status=200 x="', path="/")
    assert ' method="GET status=200 x=\\"" path=/ ' in line
    assert json.loads(rendered("json", method="M" * 500))["method"] == "M" * 128
