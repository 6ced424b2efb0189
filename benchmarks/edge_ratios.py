"""Issue 41's edge ratios, side by side in one process: the Gemini edge's
translate and streamed-delta render against the Chat Completions edge's.

- translate: a request's JSON bytes in, the ``CompletionRequest`` FlatBuffer
  out, the edge's whole op (``codecs.flatgate.translate_json`` for Chat
  Completions; ``translate_gemini_json`` for the same conversation as a
  Gemini ``streamGenerateContent`` request, ``payloads.to_gemini``), at each
  prompt size (``payloads.make_request``: 8 messages with a tool call and a
  tool definition);
- render: ``read_chunk`` + ``StreamRenderer.feed`` of a one-word content
  frame, one streamed delta (Chat Completions' ``data:`` chunk; Gemini's
  ``alt=sse`` event, a ``GenerateContentResponse``).

As ``cloud_ratios``: every op runs in interleaved rounds in one process, and
each op's figure is its fastest round, so that a neighbour's load hits both
rows alike. Prints one markdown table per op with each Gemini figure's ratio
to the Chat Completions one, met or missed against ``TARGET`` (1.2x).

    python -m benchmarks.edge_ratios [--sizes 1KB,16KB,128KB] [--rounds 15]

Reports figures; asserts nothing. No I/O but the printing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from functools import partial

import msgspec

from benchmarks.codecs.common import MODELS, REQUEST_ID
from benchmarks.codecs.flatgate import translate_gemini_json, translate_json
from benchmarks.codecs.stock_chunk import build_chunk
from benchmarks.harness.report import md_table
from benchmarks.payloads import PROMPT_SIZES, make_request, to_gemini
from flatgate.edge_translator.gemini.render import StreamRenderer as GeminiRenderer
from flatgate.edge_translator.openai.render import StreamRenderer as ChatRenderer
from flatgate.proxy.wire.builders import BuilderPool
from flatgate.proxy.wire.chunk.reader import read_chunk

__all__ = ["EDGES", "SIZES", "TARGET", "main", "measure", "operations", "report"]

TARGET = 1.2
EDGES = ("chat", "gemini")
SIZES = ("1KB", "16KB", "128KB")
_LABELS = {"chat": "Chat Completions edge", "gemini": "Gemini edge"}
# Roughly 5 ms a round for each op: calls per round.
_TRANSLATE_CALLS = {"1KB": 150, "16KB": 80, "128KB": 25, "1MB": 3}
_RENDER_CALLS = 2000
_MODEL = next(iter(MODELS))
Op = Callable[[], object]


def operations(sizes: Sequence[str]) -> dict[tuple[str, str, str], tuple[Op, int]]:
    """Each ``(op, size, edge)``'s call and its calls per round (render's size is "")."""
    ops: dict[tuple[str, str, str], tuple[Op, int]] = {}
    for size in sizes:
        chat = make_request(PROMPT_SIZES[size], 1)
        raw_chat = msgspec.json.encode(chat)
        raw_gemini = msgspec.json.encode(to_gemini(chat))
        n = _TRANSLATE_CALLS.get(size, 3)
        ops[("translate", size, "chat")] = (
            partial(translate_json, raw_chat, models=MODELS, tenant="acme"),
            n,
        )
        ops[("translate", size, "gemini")] = (
            partial(translate_gemini_json, raw_gemini, model=_MODEL, models=MODELS, tenant="acme"),
            n,
        )
    frame = build_chunk(BuilderPool(), request_id=REQUEST_ID, content="token ", model=_MODEL)
    chat_r = ChatRenderer(
        completion_id=REQUEST_ID, created=1_700_000_000, model=_MODEL, include_usage=True
    )
    chat_r.feed(read_chunk(frame))  # past the first (role) delta
    gemini_r = GeminiRenderer(response_id=REQUEST_ID, model=_MODEL, sse=True)
    gemini_r.feed(read_chunk(frame))
    ops[("render", "", "chat")] = (lambda: chat_r.feed(read_chunk(frame)), _RENDER_CALLS)
    ops[("render", "", "gemini")] = (lambda: gemini_r.feed(read_chunk(frame)), _RENDER_CALLS)
    return ops


def measure(sizes: Sequence[str], rounds: int) -> dict[tuple[str, str, str], float]:
    """Fastest round's seconds per call, by ``(op, size, edge)``."""
    ops = operations(sizes)
    best = dict.fromkeys(ops, float("inf"))
    for _ in range(rounds):
        for key, (fn, n) in ops.items():
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best[key] = min(best[key], (time.perf_counter() - start) / n)
    return best


def report(best: dict[tuple[str, str, str], float], sizes: Sequence[str]) -> str:
    """Each op's µs per call by edge, and the Gemini edge's ratio to Chat Completions'."""
    rows = []
    for op, size in [*(("translate", s) for s in sizes), ("render", "")]:
        chat, gemini = best[(op, size, "chat")], best[(op, size, "gemini")]
        ratio = gemini / chat
        rows.append(
            [
                f"{op} {size}".strip(),
                f"{chat * 1e6:.2f}",
                f"{gemini * 1e6:.2f}",
                f"{ratio:.2f}x",
                "met" if ratio <= TARGET else "**missed**",
            ]
        )
    head = ["op", f"µs/call, {_LABELS['chat']}", f"µs/call, {_LABELS['gemini']}", "ratio", ""]
    return "\n".join(
        [f"Gemini edge vs Chat Completions edge (at most {TARGET}x)", "", *md_table(head, rows), ""]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.edge_ratios")
    parser.add_argument("--sizes", default=",".join(SIZES), help="labels of payloads.PROMPT_SIZES")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    sizes = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in PROMPT_SIZES]
    if unknown:
        parser.error(f"size {unknown[0]!r}: not one of {', '.join(PROMPT_SIZES)}")
    print(report(measure(sizes, args.rounds), sizes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
