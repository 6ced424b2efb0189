"""``python -m benchmarks.soak``: mixed traffic through edge + proxy for a long while.

Starts, on free loopback ports and with one config written to a temporary
directory, the built-in stub twice (speaking ``fbs``, and ``openai`` behind
the proxy's adapter), the proxy and the edge, each through the ``flatgate``
command (``benchmarks.harness.servers``). Then sends ``--requests`` requests to the
edge's ``POST /v1/chat/completions``, ``--concurrency`` at a time, in the mix
of ``benchmarks.soak.traffic.MIX`` (streams, non-streams, faults before the
first byte and mid-stream, client disconnects, invalid requests), and
classifies every answer. When half the requests have been sent, the fbs stub
is restarted on its port (SIGTERM to the process it started, SIGKILL to its
group if it lingers) while the traffic goes on. Every ``--sample-seconds`` the
RSS, open descriptors and pool gauges of every server are sampled
(``benchmarks.soak.sampler``); after the traffic, once more.

The pass condition (``benchmarks.soak.report``): every request has a defined
outcome and the outcomes add up, and RSS, descriptors and pool sizes are flat
after the warm-up. Each criterion is printed PASS, FAIL or SKIP; the exit
status is 1 when any failed. Results: ``soak.{json,md,png}`` in ``--out``
(``make bench-load`` gives ``benchmarks/results/soak``), else in a new
temporary directory, printed.

    python -m benchmarks.soak --out benchmarks/results/soak   # make bench-load: 200,000
    python -m benchmarks.soak --quick              # 5,000 requests, 4 samples a second
    python -m benchmarks.soak --requests 20000 --concurrency 64 --sample-seconds 2
    python -m benchmarks.soak --from-json soak.json --out DIR   # re-render only

Bounded by count and by ``--time-limit``; every server is stopped at the end,
on errors, and on Ctrl-C or SIGTERM. Must not listen or send beyond
127.0.0.1, nor stop processes it did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.harness.results import (
    MEASURED,
    Log,
    finish,
    head,
    is_quick,
    rerender,
    source_revision,
)
from benchmarks.harness.sampling import fetch, requests_by_status
from benchmarks.harness.servers import HOST, Server, ServerGroup, gateway_config
from benchmarks.soak.report import as_rows, checks, verdict, write_results
from benchmarks.soak.sampler import Sampler, Watched, read_gauges
from benchmarks.soak.traffic import (
    ECHO_MODEL,
    FAULT_MODELS,
    MIX,
    OPENAI_MODEL,
    Traffic,
    plan,
)

__all__ = ["Settings", "config_text", "main", "run"]

# The servers, in the report's order; the stub is the one restarted.
SERVICES = ("edge", "proxy", "stub", "stub-openai")
_COMPLETIONS = "/v1/chat/completions"
# The stub's drain on SIGTERM (config below), and how long its stop may take.
_STUB_DRAIN = (0.5, 2.0)
_STOP_SECONDS = 10.0
_UP_SECONDS = 30.0
# How long, after the traffic, every gauge has to come back to 0.
_SETTLE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Settings:
    requests: int = 200_000
    concurrency: int = 32
    sample_seconds: float = 10.0
    warmup_fraction: float = 0.2
    # The run stops sending at this many seconds, whatever is left.
    time_limit_seconds: float = 3600.0
    restart: bool = True
    seed: int = 7
    # The stubs' pacing: time to first token and between tokens.
    ttft_ms: float = 5.0
    itl_ms: float = 1.0


# ``--quick`` (or BENCH_QUICK=1): a check that the soak runs, in seconds.
QUICK = Settings(requests=5_000, sample_seconds=0.25)


def config_text(stub_port: int, openai_port: int, settings: Settings) -> str:
    """The one config file: routes for every edge model (the faults go to a
    backend of their own on the same stub, so its cool-downs touch nothing else)."""
    grace, seconds = _STUB_DRAIN
    stub = f"""[stub]
ttft_ms = {settings.ttft_ms}
itl_ms = {settings.itl_ms}
drain_grace_seconds = {grace}
drain_seconds = {seconds}
"""
    fbs = f"http://{HOST}:{stub_port}"
    return gateway_config(
        {
            "echo": (fbs, "fbs"),
            "faults": (fbs, "fbs"),
            "echo-openai": (f"http://{HOST}:{openai_port}/v1", "openai"),
        },
        {ECHO_MODEL: ["echo"], OPENAI_MODEL: ["echo-openai"], f"{ECHO_MODEL}@*": ["faults"]},
        dict.fromkeys([ECHO_MODEL, OPENAI_MODEL, *FAULT_MODELS], "OpenAI"),
        before=stub,
    )


class Soak:
    """The servers of one run, which epoch it is in, and the stub's restart."""

    def __init__(self, group: ServerGroup, settings: Settings, log: Log) -> None:
        self.group = group
        self.settings = settings
        self.log = log
        self.servers: dict[str, Server] = {}
        self.epoch = 1  # 2 from the restart on
        self.stub_args: list[str] = []
        self.down = False  # the stub is being restarted: not sampled
        self.t0 = time.monotonic()
        self.sent: Callable[[], int] = lambda: 0
        self.restart: dict[str, Any] = {"wanted": settings.restart, "ok": False}
        # Held while a server is spawned: once closed (the run is ending, maybe
        # interrupted mid-restart), the restart starts nothing more.
        self.lock = threading.Lock()
        self.closed = False

    def start(self) -> None:
        g = self.group
        config = g.workdir / "gateway.toml"
        self.stub_args = ["--config", str(config)]
        stub = g.flatgate("stub", "stub", self.stub_args)
        openai = g.flatgate("stub-openai", "stub", [*self.stub_args, "--protocol", "openai"])
        config.write_text(config_text(stub.port, openai.port, self.settings))
        proxy = g.flatgate("proxy", "proxy", ["--config", str(config)], metrics=True)
        edge_args = ["--config", str(config), "--proxy-url", proxy.url]
        edge = g.flatgate("edge", "edge", edge_args, metrics=True)
        self.servers = {"edge": edge, "proxy": proxy, "stub": stub, "stub-openai": openai}
        failed = g.wait_healthy()
        if failed:
            raise RuntimeError("; ".join(f"{n}: {why}" for n, why in failed.items()))

    def state(self) -> tuple[str, int]:
        """The phase (``restart`` while the stub is down) and the epoch."""
        return ("restart" if self.down else "traffic"), self.epoch

    def watched(self) -> dict[str, Watched]:
        prefixes = {"edge": "flatgate_edge", "proxy": "flatgate"}
        return {
            name: Watched(self.servers[name], prefixes.get(name, ""))
            for name in SERVICES
            if not (name == "stub" and self.down)
        }

    def restart_stub(self) -> None:
        """SIGTERM to the stub this run started, SIGKILL to its group if it is
        still there after ``_STOP_SECONDS``; then the stub again on its port."""
        old = self.servers["stub"]
        began = time.monotonic()
        self.restart.update(at_request=self.sent(), t=round(began - self.t0, 2))
        self.log(f"restarting the stub (pid {old.proc.pid}) at request {self.sent():,}")
        self.down = True
        self.epoch = 2
        try:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old.proc.pid, signal.SIGTERM)
            try:
                old.proc.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.restart["killed"] = True
            # Its group: a worker left behind (granian's leader gone first).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(old.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.proc.wait(timeout=5)
            for attempt in range(3):  # the port may take a moment to free
                with self.lock:
                    if self.closed:
                        return
                    name = f"stub-restarted-{attempt}"
                    new = self.group.flatgate(name, "stub", self.stub_args, port=old.port)
                with contextlib.suppress(RuntimeError):
                    new.wait_healthy(_UP_SECONDS)
                    break
                new.stop()
                time.sleep(0.5)
            else:
                self.restart["error"] = f"the stub did not come back: {new.log_tail(600)}"
                return
            self.servers["stub"] = new
            self.restart["ok"] = True
            self.restart["down_seconds"] = round(time.monotonic() - began, 2)
            self.log(f"the stub is back after {self.restart['down_seconds']:.1f} s")
        finally:
            self.down = False

    def drained(self) -> bool:
        """Whether no server has anything in flight, streaming or waiting."""
        for w in self.watched().values():
            gauges = read_gauges(w)
            if gauges is None or any(
                gauges.get(k) for k in ("in_flight", "active_streams", "pool_waiting")
            ):
                return False
        return True


# The code the servers run: a revision is marked "+changes" when it differs from HEAD.
_MEASURED = (*MEASURED, "benchmarks/soak")


def _method(s: Settings) -> str:
    mix = ", ".join(f"{k.name} {k.weight / 10:g}%" for k in MIX)
    restart = (
        "When half the requests have been sent, the fbs stub is stopped (SIGTERM, a "
        f"{_STUB_DRAIN[0]} s drain, SIGKILL after {_STOP_SECONDS:.0f} s) and started again "
        "on its port while the traffic goes on. "
        if s.restart
        else ""
    )
    return (
        "All servers on 127.0.0.1, one granian worker each, started by the flatgate command "
        "with the shipped defaults (ASGI, the fast upstream pool, access logs on): the edge, "
        "the proxy, and the built-in echo stub twice, speaking fbs and (behind the proxy's "
        f"openai adapter) the OpenAI API, pacing {s.ttft_ms:g} ms to the first token and "
        f"{s.itl_ms:g} ms between tokens, 12 tokens a request. A closed-loop asyncio client "
        f"(uvloop, the proxy's own keep-alive pool) keeps {s.concurrency} requests in flight "
        f"to the edge's /v1/chat/completions, drawn with seed {s.seed} from this mix: {mix}. "
        "Faults are the stub's, asked for by a model-name suffix (@fail, @rate_limit before "
        "the first byte; @error:2, @die:2 after two tokens); a disconnect closes the "
        "connection after the first SSE event; bad-json is a body cut in half. Every answer "
        "is checked: a stream must end with [DONE] or an error event and carry the echo "
        f"exactly, a chat.completion must carry it. {restart}Every {s.sample_seconds:g} s, "
        "and once after the traffic, each server's process tree is read from /proc (RSS, "
        "open descriptors) and its gauges from /metrics (edge, proxy) or /stats (stubs)."
    )


def run(settings: Settings, log: Log = print) -> dict[str, Any]:
    """Start the servers, send the traffic, sample, stop; the result document."""
    revision = source_revision(_MEASURED)
    kinds = plan(settings.requests, settings.seed)
    with tempfile.TemporaryDirectory(prefix="flatgate-soak-") as tmp:
        group = ServerGroup(Path(tmp))
        soak = Soak(group, settings, log)
        try:
            log(f"starting servers in {tmp}")
            soak.start()

            async def restart() -> None:
                await asyncio.to_thread(soak.restart_stub)

            edge = soak.servers["edge"].url
            traffic = Traffic(
                edge + _COMPLETIONS,
                kinds,
                settings.concurrency,
                deadline=time.monotonic() + settings.time_limit_seconds,
                milestone=settings.requests // 2 if settings.restart else None,
                on_milestone=restart,
            )
            soak.sent = lambda: traffic.sent
            sampler = Sampler(
                soak.watched,
                lambda: (traffic.sent, traffic.finished),
                settings.sample_seconds,
                log,
                state=soak.state,
            )
            log(f"sending {settings.requests:,} requests, {settings.concurrency} at a time")
            sampler.start()
            soak.t0 = sampler.started
            try:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                    runner.run(traffic.run())
            finally:
                sampler.stop()
            elapsed = time.monotonic() - soak.t0
            deadline = time.monotonic() + _SETTLE_SECONDS
            while not soak.drained() and time.monotonic() < deadline:
                time.sleep(0.2)
            sampler.sample(final=True)
            text = fetch(edge + "/metrics")
            counted = None
            if text is not None:
                counted = requests_by_status(text, "flatgate_edge", _COMPLETIONS) or None
        finally:
            with soak.lock:
                soak.closed = True
            group.stop_all()
    if traffic.hook_error:
        soak.restart["error"] = traffic.hook_error
    doc: dict[str, Any] = {
        **head(revision, ("granian", "msgspec", "httptools", "uvloop")),
        "settings": asdict(settings),
        "method": _method(settings),
        "mix": [
            {"kind": k.name, "weight": k.weight, "model": k.model, "expect": str(k.expect)}
            for k in MIX
        ],
        "services": list(SERVICES),
        "sent": traffic.sent,
        "elapsed_seconds": round(elapsed, 1),
        "outcomes": {str(k): v for k, v in traffic.buckets.most_common()},
        "by_kind": {
            kind: {str(k): v for k, v in got.most_common()} for kind, got in traffic.by_kind.items()
        },
        "undefined_examples": traffic.examples,
        "edge_requests": None if counted is None else {str(k): v for k, v in counted.items()},
        "restart": soak.restart,
        "absent_gauges": sorted(sampler.absent),
        "failed_scrapes": sampler.failed_scrapes,
        "samples": [asdict(s) for s in sampler.samples],
    }
    rows = checks(doc)
    doc["checks"] = as_rows(rows)
    doc["verdict"] = verdict(rows)
    return doc


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
        return value

    return parse


def _settings(argv: Sequence[str] | None) -> tuple[Settings, argparse.Namespace]:
    d = Settings()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.requests:,} requests, a sample every {QUICK.sample_seconds:g} s "
        "(also BENCH_QUICK=1)",
    )
    parser.add_argument("--requests", type=_positive(int), help=f"default {d.requests:,}")
    parser.add_argument("--concurrency", type=_positive(int), default=d.concurrency)
    parser.add_argument(
        "--sample-seconds", type=_positive(float), help=f"default {d.sample_seconds:g}"
    )
    parser.add_argument(
        "--warmup", type=float, default=d.warmup_fraction, help="share of samples dropped"
    )
    parser.add_argument(
        "--time-limit",
        type=_positive(float),
        default=d.time_limit_seconds,
        help="seconds after which no request is sent (the run then fails)",
    )
    parser.add_argument("--no-restart", action="store_true", help="leave the backend running")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--out", type=Path, help="results directory (default: a new temp dir)")
    parser.add_argument(
        "--from-json", type=Path, help="measure nothing: render soak.md/png from this json"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < 1:
        parser.error("--warmup: expected a share in [0, 1)")
    base = QUICK if is_quick(args.quick) else d
    s = replace(
        base,
        requests=args.requests or base.requests,
        concurrency=args.concurrency,
        sample_seconds=args.sample_seconds or base.sample_seconds,
        warmup_fraction=args.warmup,
        time_limit_seconds=args.time_limit,
        restart=not args.no_restart,
        seed=args.seed,
    )
    return s, args


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = _settings(argv)
    if args.from_json:
        rerender(args.from_json, write_results, args.out)
        return 0
    faulthandler.register(signal.SIGUSR1)  # every thread's stack, on demand
    doc = finish(
        lambda log: run(settings, log=log), write_results, out=args.out, quick=True, name="soak"
    )
    if doc is None:
        return 130
    for c in doc["checks"]:
        print(f"{c['verdict']:4}  {c['name']}: {c['detail']}")
    print(f"soak: {doc['verdict']}")
    return 0 if doc["verdict"] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
