"""Issues 39's and 40's adapter ratios, side by side in one process: each
cloud adapter's adapt-request and adapt-chunk against the adapters it is
held to.

``make bench``'s micro rows (``benchmarks.micro``) measure each format in a
fresh process, one after the other: on a shared machine a neighbour's load
can land on one format's minute and not another's, and a ratio of two rows
moves with it. Here every op of the seven adapter codecs
(``micro_report.CLOUD_REFS``: the Bedrock Converse and InvokeModel rows, the
Azure OpenAI row, the Gemini API row and Claude on Vertex AI's, and the
openai and anthropic adapters they are held to) runs in one process, in
interleaved rounds, and each op's figure is its fastest round, so that load
hits every row alike. Prints one markdown table per op: the time per call at
each prompt size and each cloud row's ratio to each of its references, met
or missed against ``micro_report.CLOUD_TARGET`` (1.3x).

    python -m benchmarks.cloud_ratios [--sizes 1KB,16KB] [--rounds 15]
    python -m benchmarks.cloud_ratios --prepare

``--prepare``: instead, each backend's whole ``prepare`` (``PREPARED``: the
adapter built from its ``[[backends]]`` entry as the registry builds it) of
the load bench's 2 KB chat request (``openai_bodies.chat_body``), CPU per
call, fastest of interleaved rounds: the body, the URL, the headers and,
for ``bedrock``, the SigV4 signature (static credentials from a temporary
environment, read once through botocore's chain: no lookup beyond it) or
a Bedrock API key; for ``gemini``, ``x-goog-api-key``; for ``vertex``, the
bearer token its ``Refreshing`` holds (fetched once, before the rounds,
through google-auth with a service account's key made for the bench from a
token endpoint on loopback: ``benchmarks.google_token``).

Reports figures; asserts nothing. No I/O but the printing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.codecs import LABELS, load, operation
from benchmarks.google_token import loopback_key
from benchmarks.harness.report import md_table
from benchmarks.load.openai_bodies import chat_body
from benchmarks.micro_report import CLOUD_REFS, CLOUD_TARGET
from benchmarks.payloads import PROMPT_SIZES, make_request
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.registry import adapter_for, backend_config, backend_problems
from flatgate.proxy.plumbing.config import ConfigError, Problems
from flatgate.proxy.wire.request.decode import read_request

__all__ = ["FORMATS", "OPS", "PREPARED", "main", "measure", "prepare_costs", "report"]

FORMATS = ("openai-adapter", "anthropic-adapter", *CLOUD_REFS)
OPS = ("adapt-request", "adapt-chunk")
# Roughly 5 ms a round for each op: calls per round at a prompt size.
_REQUEST_CALLS = {"1KB": 300, "16KB": 150, "128KB": 30, "1MB": 5}
_CHUNK_CALLS = 2000


def _calls(op: str, size: str) -> int:
    return _CHUNK_CALLS if op == "adapt-chunk" else _REQUEST_CALLS.get(size, 5)


def measure(sizes: Sequence[str], rounds: int) -> dict[tuple[str, str, str], float]:
    """Fastest round's seconds per call, by ``(format, op, size)``."""
    best: dict[tuple[str, str, str], float] = {}
    for size in sizes:
        request = make_request(PROMPT_SIZES[size], 0)
        ops: dict[tuple[str, str, str], tuple[Callable[[Any], object], object]] = {}
        for fmt in FORMATS:
            codec = load(fmt)
            args = codec.inputs(request)
            for op in OPS:
                ops[(fmt, op, size)] = (operation(codec, op), args[op])
        for key in ops:
            best[key] = float("inf")
        for _ in range(rounds):
            for key, (fn, arg) in ops.items():
                n = _calls(key[1], size)
                start = time.perf_counter()
                for _ in range(n):
                    fn(arg)
                best[key] = min(best[key], (time.perf_counter() - start) / n)
    return best


def report(best: dict[tuple[str, str, str], float], sizes: Sequence[str]) -> str:
    """One table per op: each format's µs per call, each cloud row's ratios."""
    out: list[str] = []
    for op in OPS:
        head = ["format", *(f"µs/call, {s}" for s in sizes), "ratio to (at each size)", ""]
        rows = []
        for fmt in FORMATS:
            times = [f"{best[(fmt, op, s)] * 1e6:.2f}" for s in sizes]
            ratios, worst = [], 0.0
            for ref in CLOUD_REFS.get(fmt, ()):
                each = [best[(fmt, op, s)] / best[(ref, op, s)] for s in sizes]
                worst = max(worst, *each)
                ratios.append(f"{LABELS[ref]}: " + " / ".join(f"{r:.2f}x" for r in each))
            verdict = "" if not ratios else "met" if worst <= CLOUD_TARGET else "**missed**"
            rows.append([LABELS[fmt], *times, "; ".join(ratios), verdict])
        out += [f"{op} (at most {CLOUD_TARGET}x)", "", *md_table(head, rows), ""]
    return "\n".join(out)


_BEDROCK = {"protocol": "bedrock", "url": "https://bedrock-runtime.us-east-1.amazonaws.com"}
_VERTEX = {"protocol": "vertex", "project": "flatgate-bench", "location": "us-east5"}
# Each backend whose prepare is measured: its [[backends]] entry.
PREPARED: dict[str, dict[str, Any]] = {
    "openai": {"protocol": "openai", "url": "https://api.openai.com/v1", "api_key": "k"},
    "anthropic": {"protocol": "anthropic", "url": "https://api.anthropic.com", "api_key": "k"},
    "openai for Azure (deployment URL, api-key)": {
        "protocol": "openai",
        "url": "https://contoso-eastus.openai.azure.com",
        "azure_api_version": "2024-10-21",
        "auth": "api-key",
        "api_key": "k",
    },
    "bedrock, Converse, SigV4": {**_BEDROCK, "model": "amazon.nova-pro-v1:0"},
    "bedrock, Converse, Bedrock API key": {
        **_BEDROCK,
        "model": "amazon.nova-pro-v1:0",
        "api_key": "k",
    },
    "bedrock, InvokeModel (Claude), SigV4": {
        **_BEDROCK,
        "model": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    },
    "gemini (x-goog-api-key)": {"protocol": "gemini", "model": "gemini-2.5-flash", "api_key": "k"},
    "vertex, Gemini (bearer token)": {**_VERTEX, "model": "gemini-2.5-flash"},
    "vertex, Claude (bearer token)": {**_VERTEX, "model": "claude-sonnet-4-5@20250929"},
}
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDFLATGATEBENCH",
    "AWS_SECRET_ACCESS_KEY": "flatgate-bench-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/flatgate-bench/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/flatgate-bench/aws-credentials",
}


def _adapter(name: str, entry: dict[str, Any], google_key: str = "") -> Any:
    """The adapter of ``entry``, its credentials fetched once (AWS's from
    ``_AWS_ENV``, set only while they are read; Google's with the key file
    ``google_key``)."""

    problems = Problems()
    if entry["protocol"] == "vertex":
        entry = {**entry, "credentials_file": google_key}
    config = backend_config({"name": "bench", **entry}, name, problems)
    if config is not None:
        problems += backend_problems(config, name)
    if config is None or problems:
        raise ConfigError(*problems)
    adapter = adapter_for(config)
    refreshing = getattr(adapter, "credentials", None)
    if refreshing is not None:
        saved = {k: os.environ.get(k) for k in _AWS_ENV}
        os.environ.update(_AWS_ENV)
        try:
            refreshing.refresh()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return adapter


def prepare_costs(rounds: int, calls: int = 2000) -> dict[str, float]:
    """Fastest round's CPU µs per ``prepare``, by ``PREPARED``'s names."""

    req = decode_request(chat_body())
    decoded = read_request(write_request(req, provider=0, model_name=req.model, request_id="r-1"))
    call = Inbound(b"", lambda: decoded, "r-1", "")
    with loopback_key() as key:
        adapters = {name: _adapter(name, entry, str(key.path)) for name, entry in PREPARED.items()}
    prepares = {name: adapter.prepare for name, adapter in adapters.items()}
    best = dict.fromkeys(prepares, float("inf"))
    for _ in range(rounds):
        for name, prepare in prepares.items():
            start = time.process_time()
            for _ in range(calls):
                prepare(call)
            best[name] = min(best[name], (time.process_time() - start) / calls)
    return {name: seconds * 1e6 for name, seconds in best.items()}


def prepare_report(results: dict[str, float]) -> str:
    base = results["openai"]
    rows = [(name, f"{us:.2f}", f"{us / base:.2f}x") for name, us in results.items()]
    return "\n".join(
        md_table(["backend: prepare of a 2 KB chat request", "CPU µs", "vs. openai"], rows)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cloud_ratios", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--sizes", default=",".join(PROMPT_SIZES))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--prepare", action="store_true", help="each backend's prepare instead")
    args = parser.parse_args(argv)
    if args.prepare:
        print(prepare_report(prepare_costs(args.rounds)))
        return 0
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in PROMPT_SIZES]
    if unknown:
        parser.error(f"unknown sizes: {', '.join(unknown)}; known: {', '.join(PROMPT_SIZES)}")
    print(report(measure(sizes, args.rounds), sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
