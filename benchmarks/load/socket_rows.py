"""The cost of a Responses API response over a WebSocket against one over HTTP.

``python -m benchmarks.load.socket_rows`` (a line of ``make bench-load``,
after ``--workload openai``; issue 42). The OpenAI workload's gateway
(``benchmarks.load.openai_workload.start``: the same config, the same canned
OpenAI stub of 32 tokens) answers the ``gateway-responses`` row's request
(``benchmarks.load.openai_bodies.responses_body``: 2 KB, ``store: false``)
four ways, on the same number of client connections:

- ``http-stream``: ``POST /v1/responses`` with ``stream: true``, keep-alive,
  one after the other on each connection;
- ``ws``: one WebSocket on ``/v1/responses`` per connection, a
  ``response.create`` after the other, each a fresh conversation;
- ``ws-chained``: the same sockets; each turn continues the last with
  ``previous_response_id`` and only its new input (a short user message), a
  new conversation every ``chain`` turns (what an agent does);
- ``http-whole``: ``POST /v1/responses`` with ``stream: false``.

A socket always streams, so ``http-stream`` is the like-for-like row. The
modes are measured side by side in rounds, their order rotated each round;
the gateway's CPU (``/proc`` utime + stime of its process tree) is read
before and after each mode's run, after its connections are open and warm,
so the figure is per response (the client's CPU is not counted, nor the
stub's). The sockets and the keep-alive pool stay open for the whole run
(``websocket_max_per_caller`` is 16 by default). Figures are medians over
the rounds, with ratios to ``http-stream``. Each mode's answer is
spot-checked once (the stub's 32 tokens) before the first round.

Owns only this measurement and its report (``load-openai-socket.{json,md}``);
starts servers only through ``openai_workload.start`` and stops only those.
Reports figures, asserts none. Loopback only.

    python -m benchmarks.load.socket_rows                      # full run, ~2 min
    python -m benchmarks.load.socket_rows --rounds 3 --responses 2000 --out /tmp/s
    BENCH_QUICK=1 python -m benchmarks.load.socket_rows        # 2 short rounds, to a temp dir
    python -m benchmarks.load.socket_rows --tiny --out /tmp/s  # the test's mode
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import uvloop
from websockets.asyncio.client import ClientConnection, connect

from benchmarks.harness.report import head_facts, md_facts, md_table, num, ratio, times
from benchmarks.harness.results import (
    Log,
    finish,
    head,
    is_quick,
    rerender,
    source_revision,
    write_results,
)
from benchmarks.harness.sampling import server_usage
from benchmarks.harness.servers import HOST, Server, ServerGroup
from benchmarks.load import openai_workload
from benchmarks.load.clients import post, sse_text
from benchmarks.load.openai_bodies import BODY_BYTES, CHAT_HEADERS, chat_body, responses_body
from benchmarks.load.rows import ADAPTER_MODEL
from flatgate.proxy.transport.fast import PoolTransport

__all__ = ["FULL", "MODES", "QUICK", "TINY", "SocketSettings", "main", "render", "run", "summarise"]

NAME = "load-openai-socket"
MODES = ("http-stream", "ws", "ws-chained", "http-whole")
_WHAT = {
    "http-stream": "POST /v1/responses, stream: true (SSE), keep-alive",
    "ws": "one WebSocket per connection, a fresh conversation each turn",
    "ws-chained": "one WebSocket per connection, previous_response_id and a new user message",
    "http-whole": "POST /v1/responses, stream: false",
}
_BASE = "http-stream"
_TOKENS = 32  # the canned stub's answer ("stub" in openai_workload.STUBS)
_EXPECT = "tok " * _TOKENS
_NEXT_INPUT = "Go on, and keep it as short."
_DELTA = b'{"type":"response.output_text.delta"'
_MEASURED_HERE = ("proxy", "edge_translator", "generated", "benchmarks/harness", "benchmarks/load")


@dataclass(frozen=True, slots=True)
class SocketSettings:
    mode: str
    rounds: int
    seconds: float  # per mode per round (when responses is 0)
    responses: int = 0  # > 0: this many responses per mode per round instead
    connections: int = 16  # HTTP keep-alive connections, and WebSockets
    chain: int = 8  # ws-chained: turns per conversation


FULL = SocketSettings("full", rounds=5, seconds=4.0)
QUICK = SocketSettings("quick", rounds=2, seconds=1.5)
TINY = SocketSettings("tiny", rounds=1, seconds=0.3, connections=2, chain=3)


# the requests ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Requests:
    url: str  # http://host:port/v1/responses
    stream: bytes  # the HTTP body, stream: true
    whole: bytes  # the HTTP body, stream: false
    create: str  # the socket's first turn: the same body as a response.create
    instructions: str

    @classmethod
    def build(cls, base_url: str) -> Requests:
        chat = chat_body(BODY_BYTES, ADAPTER_MODEL)
        whole = responses_body(chat)
        body = msgspec.json.decode(whole)
        del body["stream"]  # a socket always streams
        create = json.dumps({"type": "response.create", **body}, separators=(",", ":"))
        return cls(
            base_url + "/v1/responses",
            responses_body(chat, stream=True),
            whole,
            create,
            body["instructions"],
        )

    def follow(self, previous: str) -> str:
        """A chained turn: only its new input, after ``previous``."""
        turn = {
            "type": "response.create",
            "model": ADAPTER_MODEL,
            "store": False,
            "instructions": self.instructions,
            "previous_response_id": previous,
            "input": _NEXT_INPUT,
        }
        return json.dumps(turn, separators=(",", ":"))


# the clients -------------------------------------------------------------------


class _Budget:
    """When a mode's run ends: at a deadline, or after a number of responses."""

    def __init__(self, s: SocketSettings) -> None:
        self.counted = s.responses > 0
        self.left = s.responses
        self.deadline = time.monotonic() + s.seconds

    def take(self) -> bool:
        """Whether one more response is to be asked for."""
        if self.counted:
            self.left -= 1
            return self.left >= 0
        return time.monotonic() < self.deadline


@dataclass(slots=True)
class _Count:
    responses: int = 0
    errors: int = 0


async def _http_worker(
    transport: PoolTransport, url: str, body: bytes, budget: _Budget, count: _Count
) -> None:
    while budget.take():
        data = await post(transport, url, body, CHAT_HEADERS)
        if data is not None and b'"status":"completed"' in data[-8192:]:
            count.responses += 1
        else:
            count.errors += 1


async def _turn(ws: ClientConnection, message: str) -> dict[str, Any] | None:
    """Send one ``response.create``; its ``response.completed`` event, or
    ``None`` when it ended otherwise (an error event, ``response.failed``)."""
    await ws.send(message)
    while True:
        event = await ws.recv(decode=False)
        assert isinstance(event, bytes)
        if event.startswith(_DELTA):
            continue  # the most of them: no need to read them here
        kind = msgspec.json.decode(event)["type"]
        if kind == "response.completed":
            return msgspec.json.decode(event)  # type: ignore[no-any-return]
        if kind in ("error", "response.failed", "response.incomplete"):
            return None


async def _ws_worker(
    ws: ClientConnection, req: Requests, chain: int, budget: _Budget, count: _Count
) -> None:
    previous: str | None = None
    turns = 0
    while budget.take():
        chained = chain > 0 and previous is not None and turns % chain
        done = await _turn(ws, req.follow(previous) if chained and previous else req.create)
        turns += 1
        if done is None:
            count.errors += 1
            previous = None
            turns = 0
        else:
            count.responses += 1
            previous = done["response"]["id"]


@dataclass
class _Clients:
    """The run's client side: one keep-alive pool and one socket per connection."""

    req: Requests
    transport: PoolTransport
    sockets: list[ClientConnection]

    @classmethod
    async def open(cls, req: Requests, connections: int) -> _Clients:
        transport = PoolTransport(limit=connections)
        ws_url = req.url.replace("http://", "ws://", 1)
        headers = dict(CHAT_HEADERS[1:])
        sockets = [
            await connect(ws_url, additional_headers=headers, max_size=None, compression=None)
            for _ in range(connections)
        ]
        clients = cls(req, transport, sockets)
        for mode in MODES:  # warm: every connection opened and used once
            await clients.run(mode, replace(TINY, responses=connections * 2), connections)
        return clients

    async def close(self) -> None:
        for ws in self.sockets:
            await ws.close()
        await self.transport.aclose()

    async def run(self, mode: str, s: SocketSettings, connections: int) -> _Count:
        budget, count = _Budget(s), _Count()
        work: list[Awaitable[None]]
        if mode.startswith("http"):
            body = self.req.stream if mode == "http-stream" else self.req.whole
            work = [
                _http_worker(self.transport, self.req.url, body, budget, count)
                for _ in range(connections)
            ]
        else:
            chain = s.chain if mode == "ws-chained" else 0
            work = [_ws_worker(ws, self.req, chain, budget, count) for ws in self.sockets]
        await asyncio.gather(*work)
        return count

    async def spot_check(self) -> dict[str, str]:
        """Each mode's answer text, read whole: the stub's tokens, or why not."""
        problems: dict[str, str] = {}
        stream = await post(self.transport, self.req.url, self.req.stream, CHAT_HEADERS)
        if stream is None or sse_text(stream).strip() != _EXPECT.strip():
            problems["http-stream"] = f"unexpected answer: {(stream or b'')[:300]!r}"
        whole = await post(self.transport, self.req.url, self.req.whole, CHAT_HEADERS)
        got = _output_text(msgspec.json.decode(whole)) if whole else ""
        if got.strip() != _EXPECT.strip():
            problems["http-whole"] = f"unexpected answer: {(whole or b'')[:300]!r}"
        first = await _text_turn(self.sockets[0], self.req.create)
        if first[0].strip() != _EXPECT.strip():
            problems["ws"] = f"unexpected answer: {first[0][:300]!r}"
        second = await _text_turn(self.sockets[0], self.req.follow(first[1]))
        if second[0].strip() != _EXPECT.strip():
            problems["ws-chained"] = f"unexpected answer: {second[0][:300]!r}"
        return problems


def _output_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output", [])
        for part in item.get("content", []) or []
    )


async def _text_turn(ws: ClientConnection, message: str) -> tuple[str, str]:
    """One turn read event by event: its streamed text and its response id."""
    await ws.send(message)
    text: list[str] = []
    while True:
        event = json.loads(await ws.recv())
        if event["type"] == "response.output_text.delta":
            text.append(event["delta"])
        elif event["type"] == "response.completed":
            return "".join(text), event["response"]["id"]
        elif event["type"] in ("error", "response.failed", "response.incomplete"):
            return json.dumps(event), ""


# the run -----------------------------------------------------------------------


def measure(
    s: SocketSettings,
    gateway: Server,
    stub: Server,
    runner: asyncio.Runner,
    log: Log,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every mode, side by side in rounds; the rounds' records and the spot check's problems."""
    clients = runner.run(_Clients.open(Requests.build(gateway.url), s.connections))
    records: list[dict[str, Any]] = []
    try:
        problems = runner.run(clients.spot_check())
        for name, why in problems.items():
            log(f"  {name}: {why}")
        for r in range(s.rounds):
            order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
            for mode in order:
                before, stub_before = server_usage(gateway), server_usage(stub)
                t0 = time.perf_counter()
                count = runner.run(clients.run(mode, s, s.connections))
                seconds = time.perf_counter() - t0
                after, stub_after = server_usage(gateway), server_usage(stub)
                stub_cpu = (stub_after.user + stub_after.system) - (
                    stub_before.user + stub_before.system
                )
                rec: dict[str, Any] = {
                    "round": r + 1,
                    "mode": mode,
                    "responses": count.responses,
                    "errors": count.errors,
                    "seconds": round(seconds, 4),
                    "user_s": round(after.user - before.user, 4),
                    "system_s": round(after.system - before.system, 4),
                    "stub_cpu_s": round(stub_cpu, 4),
                }
                records.append(rec)
                per = _per_response(rec)
                log(
                    f"  round {r + 1} {mode}: {count.responses} responses "
                    f"({count.errors} errors), {count.responses / seconds:,.0f}/s, "
                    f"{num(per, 0)} us CPU each"
                )
    finally:
        runner.run(clients.close())
    return records, problems


def _per_response(rec: dict[str, Any], key: str = "") -> float | None:
    cpu = rec[key] if key else rec["user_s"] + rec["system_s"]
    return cpu / rec["responses"] * 1e6 if rec["responses"] else None


def summarise(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mode: the medians over its rounds, and the ratios to ``http-stream``."""
    out: list[dict[str, Any]] = []
    for mode in MODES:
        recs = [r for r in records if r["mode"] == mode and r["responses"]]

        def median(f: Callable[[dict[str, Any]], float | None], rs: list[Any] = recs) -> Any:
            vals = [v for v in map(f, rs) if v is not None]
            return round(statistics.median(vals), 2) if vals else None

        out.append(
            {
                "mode": mode,
                "what": _WHAT[mode],
                "rounds": len(recs),
                "responses": sum(r["responses"] for r in recs),
                "errors": sum(r["errors"] for r in records if r["mode"] == mode),
                "rps": median(lambda r: r["responses"] / r["seconds"]),
                "cpu_us_per_response": median(_per_response),
                "user_us_per_response": median(lambda r: _per_response(r, "user_s")),
                "stub_cpu_us_per_response": median(lambda r: _per_response(r, "stub_cpu_s")),
            }
        )
    base = next(m for m in out if m["mode"] == _BASE)
    for m in out:
        cpu = ratio(m["cpu_us_per_response"], base["cpu_us_per_response"])
        rps = ratio(m["rps"], base["rps"])
        m["cpu_vs_http_stream"] = None if cpu is None else round(cpu, 3)
        m["rps_vs_http_stream"] = None if rps is None else round(rps, 3)
        m["cpu_vs_http_stream_by_round"] = _by_round(records, m["mode"])
    return out


def _by_round(records: Sequence[dict[str, Any]], mode: str) -> list[float]:
    """Each round's CPU per response of ``mode`` over ``http-stream``'s in the
    same round (side by side: a noisy neighbour hits both alike), sorted."""
    per = {(r["round"], r["mode"]): _per_response(r) for r in records}
    out = []
    for (n, m), cpu in per.items():
        base = per.get((n, _BASE))
        if m == mode and cpu is not None and base:
            out.append(round(cpu / base, 3))
    return sorted(out)


def _spread(values: Sequence[float]) -> str:
    """Per-round ratios: their median and range."""
    if not values:
        return "-"
    return f"{times(statistics.median(values))} ({values[0]:.2f}-{values[-1]:.2f})"


def run(s: SocketSettings, log: Log = print) -> dict[str, Any]:
    """Start the OpenAI workload's gateway and stubs, measure, stop them; the document."""
    revision = source_revision(_MEASURED_HERE)  # before the servers start: what they import
    settings = replace(openai_workload.OPENAI_TINY, rows=("gateway-responses",), peers=False)
    records: list[dict[str, Any]] = []
    problems: dict[str, str] = {}
    skipped: dict[str, str] = {}
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flatgate-socket-") as tmp:
        group = ServerGroup(Path(tmp))
        try:
            log(f"starting servers (the openai workload's gateway, {s.mode} mode)")
            started = openai_workload.start(group, settings)
            skipped = {k: v for k, v in started.skipped.items() if k in ("gateway", "stub")}
            if not skipped:
                gateway, stub = group.servers["gateway"], group.servers["stub"]
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    records, problems = measure(s, gateway, stub, runner, log)
        finally:
            group.stop_all()
    doc = head(revision, ("granian", "msgspec", "uvloop", "websockets"))
    method = (
        f"flatgate gateway (one granian worker, the OpenAI workload's config) on {HOST} in "
        f"front of the canned OpenAI stub ({_TOKENS} tokens); the gateway-responses row's "
        f"request ({BODY_BYTES} bytes, store: false) on {s.connections} client connections, "
        "each closed loop. Modes side by side in rounds, the order rotated each round, "
        + (f"{s.responses} responses" if s.responses else f"{s.seconds} s")
        + " per mode per round; the gateway's CPU from /proc utime+stime of its process "
        "tree before and after each mode's run (connections open and warm; client and stub "
        "CPU not counted); medians over the rounds. ws-chained: each turn "
        f"previous_response_id and a {len(_NEXT_INPUT)}-character user message, "
        f"a new conversation every {s.chain} turns (the backend gets the whole history)."
    )
    return {
        **doc,
        "workload": "openai-socket",
        "mode": s.mode,
        "settings": asdict(s),
        "method": method,
        "elapsed_seconds": round(time.monotonic() - began, 1),
        "skipped": skipped,
        "spot_check": problems,
        "modes": summarise(records) if records else [],
        "rounds": records,
    }


# the report --------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    s = doc["settings"]
    lines = [
        "# A Responses API response over a WebSocket against over HTTP",
        "",
        "`python -m benchmarks.load.socket_rows` (a line of `make bench-load`, after the "
        "OpenAI workload; issue 42).",
        "",
        *md_facts([*head_facts(doc), ("mode", doc["mode"]), ("rounds", s["rounds"])]),
        "",
        f"**Method.** {doc['method']}",
        "",
    ]
    for name, why in {**doc["skipped"], **doc["spot_check"]}.items():
        lines.append(f"- **{name}**: {why}")
    header = [
        "mode",
        "what",
        "responses/s",
        "gateway CPU µs per response",
        "user CPU µs",
        "CPU vs. http-stream",
        "the same, round by round (range)",
        "responses/s vs. http-stream",
        "responses",
        "errors",
    ]
    rows = [
        [
            m["mode"],
            m["what"],
            num(m["rps"], 0),
            num(m["cpu_us_per_response"], 0),
            num(m["user_us_per_response"], 0),
            times(m["cpu_vs_http_stream"]),
            _spread(m["cpu_vs_http_stream_by_round"]),
            times(m["rps_vs_http_stream"]),
            num(m["responses"]),
            num(m["errors"]),
        ]
        for m in doc["modes"]
    ]
    lines += [*md_table(header, rows, left=2), ""]
    lines += [
        "**Caveats.** The client (one Python process: flatgate's own keep-alive pool for "
        "HTTP, the `websockets` library for the sockets) shares the machine's cores with "
        "the gateway and the stub, so responses a second are as much the client's as the "
        "gateway's; CPU per response is the gateway's alone and is the figure to compare. "
        "A WebSocket response is the streamed one: set it against `http-stream`. "
        "`ws-chained` turns carry a growing conversation to the backend (the socket's kept "
        "response and its input), as an agent's turns do; its HTTP equivalent (the whole "
        "history in each request) is not measured.",
        "",
    ]
    return "\n".join(lines)


def write(doc: dict[str, Any], out: Path) -> list[Path]:
    return write_results(out, NAME, doc, render(doc))


def _resummarised(doc: dict[str, Any], out: Path) -> list[Path]:
    """``write``, the summary taken again from the rounds' records."""
    return write({**doc, "modes": summarise(doc["rounds"]) if doc["rounds"] else []}, out)


def _settings(args: argparse.Namespace) -> SocketSettings:
    s = TINY if args.tiny else QUICK if is_quick(args.quick) else FULL
    if args.rounds:
        s = replace(s, rounds=args.rounds)
    if args.seconds:
        s = replace(s, seconds=args.seconds, responses=0)
    if args.responses:
        s = replace(s, responses=args.responses)
    if args.connections:
        s = replace(s, connections=args.connections)
    return s


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.load.socket_rows", description=__doc__
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5)")
    parser.add_argument("--seconds", type=float, help="seconds per mode per round (default 4)")
    parser.add_argument("--responses", type=int, help="responses per mode per round instead")
    parser.add_argument("--connections", type=int, help="connections and sockets (default 16)")
    parser.add_argument("--quick", action="store_true", help="two short rounds (BENCH_QUICK=1)")
    parser.add_argument("--tiny", action="store_true", help="a second or two (the test's mode)")
    parser.add_argument(
        "--from-json", type=Path, help="measure nothing: summarise and render this json again"
    )
    parser.add_argument("--out", type=Path, help="results directory (default: benchmarks/results)")
    args = parser.parse_args(argv)
    if args.from_json:
        rerender(args.from_json, _resummarised, args.out)
        return 0
    s = _settings(args)
    partial = s != FULL
    doc = finish(lambda log: run(s, log), write, out=args.out, quick=partial, name=NAME)
    return 130 if doc is None else 0


if __name__ == "__main__":
    raise SystemExit(main())
