"""One trace per request across a split deployment, at a real OTLP/HTTP
receiver (``tests.otlp``, Elastic's mockotlpserver): a client's streamed chat
request through ``flatgate edge`` and ``flatgate proxy`` processes, its
first backend refusing connections and the fallback answering. The spans:
the client's ``traceparent`` continued, the edge's SERVER span, the proxy's
SERVER span its child (over the ``traceparent`` the edge sent), one CLIENT
span per backend attempt under it (the failed one an error), the GenAI
attributes, the first token's event; and not a word of the prompt."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.otlp import OtlpReceiver, Span
from tests.servers import closed_port, running
from tests.stacks import QUIET, write_stack

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
PROMPT = "the secret plan is pineapples"


def by_service(spans: list[Span], service: str, kind: str) -> list[Span]:
    return [s for s in spans if s.service_name == service and s.kind == kind]


def whole_trace(spans: list[Span]) -> bool:
    """The edge's span, the proxy's, and both attempts, all exported."""
    ours = [s for s in spans if s.trace_id == CALLER_TRACE]
    return len(ours) >= 4 and len(by_service(ours, "flatgate-proxy", "CLIENT")) == 2


def test_a_streamed_request_with_failover_is_one_trace(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    telemetry = {"enabled": True, "otlp_endpoint": otlp_receiver.endpoint}
    with (
        closed_port() as dead,
        running("stub", [], tmp_path) as stub,
    ):
        proxy_cfg = write_stack(
            tmp_path / "proxy.toml",
            proxy=QUIET,
            backends={"dead": f"http://127.0.0.1:{dead}", "stub": stub.url},
            routes={"echo": {"backends": ["dead"], "fallbacks": ["stub"]}},
            telemetry=telemetry,
        )
        with running("proxy", ["--config", proxy_cfg], tmp_path) as proxy:
            edge_cfg = write_stack(
                tmp_path / "edge.toml",
                edge={"proxy_url": proxy.url},  # its access log on
                models={"echo": "SelfHosted"},
                telemetry=telemetry,
            )
            with running("edge", ["--config", edge_cfg], tmp_path) as edge:
                traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
                with httpx.stream(
                    "POST",
                    f"{edge.url}/v1/chat/completions",
                    json={
                        "model": "echo",
                        "stream": True,
                        "messages": [{"role": "user", "content": PROMPT}],
                    },
                    headers={"traceparent": traceparent, "tracestate": "caller=1"},
                    timeout=30,
                ) as r:
                    assert r.status_code == 200
                    text = "".join(r.iter_text())
                assert "pineapples" in text  # the stub echoes the prompt back
                spans = otlp_receiver.wait_for(whole_trace, timeout=30)
                # The access log names the trace (its line is flushed in 0.5 s).
                deadline = time.monotonic() + 15
                while f"trace={CALLER_TRACE}" not in edge.log.read_text():
                    assert time.monotonic() < deadline, edge.log.read_text()[-2000:]
                    time.sleep(0.1)

    ours = [s for s in spans if s.trace_id == CALLER_TRACE]
    (edge_span,) = by_service(ours, "flatgate-edge", "SERVER")
    (proxy_span,) = by_service(ours, "flatgate-proxy", "SERVER")
    attempts = sorted(by_service(ours, "flatgate-proxy", "CLIENT"), key=lambda s: s.start_ns)
    # The caller's trace, continued: the edge's span is the caller's span's child.
    assert edge_span.parent_span_id == CALLER_SPAN
    assert proxy_span.parent_span_id == edge_span.span_id
    assert [a.parent_span_id for a in attempts] == [proxy_span.span_id] * 2
    failed, answered = attempts
    assert failed.attributes["flatgate.backend"] == "dead" and failed.status == "ERROR"
    assert failed.attributes["error.type"].startswith("Upstream")
    assert answered.attributes["flatgate.backend"] == "stub" and answered.status != "ERROR"
    assert failed.end_ns <= answered.start_ns
    # The GenAI conventions on the request's spans.
    for span in (edge_span, proxy_span):
        assert span.name == "chat echo", (span.service_name, span.attributes)
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "echo"
        assert span.attributes["gen_ai.usage.output_tokens"] == len(PROMPT.split())
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["flatgate.request_id"] == edge_span.attributes["flatgate.request_id"]
        assert [e for e in span.events if e[0] == "gen_ai.first_token"]
    assert edge_span.attributes["flatgate.client_api"] == "openai-chat"
    assert edge_span.attributes["gen_ai.usage.input_tokens"] > 0  # the edge reads the usage
    assert proxy_span.attributes["flatgate.backend"] == "stub"
    # The edge's span began before it asked the proxy (each ends when its
    # side has logged the request: in either order).
    assert edge_span.start_ns <= proxy_span.start_ns
    # Nothing of the prompt or the completion, anywhere.
    for span in spans:
        values = [*span.attributes.values()]
        for _, attributes in span.events:
            values += attributes.values()
        assert not any("pineapples" in str(v) or "secret" in str(v) for v in values), span


def test_the_one_process_gateway_hangs_its_attempts_under_the_request(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """``flatgate gateway``: one service, ``flatgate``; the router's backend
    attempt is the child of the edge's request span (the task's span, in
    process); without a caller's ``traceparent`` a new trace begins."""
    with running("stub", [], tmp_path) as stub:
        cfg = write_stack(
            tmp_path / "gateway.toml",
            proxy=QUIET,
            backends={"stub": stub.url},
            routes={"echo": "stub"},
            edge=QUIET,
            models={"echo": "SelfHosted"},
            telemetry={"enabled": True, "otlp_endpoint": otlp_receiver.endpoint},
        )
        with running("gateway", ["--config", cfg], tmp_path) as gateway:
            r = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json={"model": "echo", "messages": [{"role": "user", "content": "hi there"}]},
                timeout=30,
            )
            assert r.status_code == 200
            spans = otlp_receiver.wait_for(lambda s: len(s) >= 2, timeout=30)
            metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
            # Exported as they came: none dropped (the counter, shown once).
            assert metrics.count("\nflatgate_edge_telemetry_dropped_spans_total 0.0") == 1
    (server,) = by_service(spans, "flatgate", "SERVER")
    (attempt,) = by_service(spans, "flatgate", "CLIENT")
    assert server.parent_span_id == "" and attempt.parent_span_id == server.span_id
    assert attempt.trace_id == server.trace_id
    assert attempt.attributes["flatgate.backend"] == "stub"
    assert server.attributes["gen_ai.usage.output_tokens"] == 2
