"""The fast transport's bodies of known length that span several reads: taken
as read (not through llhttp), handed on whole, and the connection's next
response parsed as before."""

from __future__ import annotations

import asyncio
import random

import pytest

from flatgate.proxy.transport.base import (
    ResponseTooLarge,
    Upstream,
    UpstreamProtocolError,
    read_whole,
)
from flatgate.proxy.transport.fast import LOW_WATER, PoolTransport, _PoolResponse
from tests.proxy.test_httpclient import FAST, Handler, RawServer, answers, post, read_request

BIG = random.Random(7).randbytes(600 << 10)  # past uvloop's and asyncio's read size


def in_pieces(body: bytes, *, times: int = 1, extra: bytes = b"", head: bytes = b"") -> Handler:
    """Answers each of ``times`` requests with ``body`` (its Content-Length
    ``head``'s, else its own), written in uneven pieces with pauses between,
    followed by ``extra`` bytes."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(times):
            await read_request(r)
            w.write(head or b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            at = 0
            for size in (5, 70_000, 1, 200_000):
                w.write(body[at : at + size])
                at += size
                await w.drain()
                await asyncio.sleep(0.01)
            w.write(body[at:] + extra)
            await w.drain()

    return handler


async def test_a_large_body_arrives_whole_and_the_connection_is_reused() -> None:
    t = PoolTransport(limit=1)
    server = RawServer(in_pieces(BIG, times=3))
    try:
        async with server as url:
            for _ in range(3):
                resp = await post(t, url)
                assert resp.status == 200
                assert await read_whole(resp, len(BIG)) == BIG
            # The next head was parsed by a fresh parser each time, on one connection.
            assert server.connections == 1
    finally:
        await t.aclose()


async def test_large_pieces_are_handed_on_alone_and_small_ones_joined() -> None:
    t = PoolTransport(limit=1)
    done = asyncio.Event()

    async def head_only(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n")
        await w.drain()
        await done.wait()

    try:
        async with RawServer(head_only) as url:
            resp = await post(t, url)
            assert isinstance(resp, _PoolResponse)
            # The pieces as the connection hands them over, all there when the consumer looks.
            large = [random.Random(n).randbytes(LOW_WATER) for n in range(2)]
            small = [b"abc", b"de"]
            for piece in (*large, *small):
                resp.feed(piece)
            resp.finish(keep_alive=False)
            pieces = [piece async for piece in resp.iter_bytes()]
            assert pieces[0] is large[0] and pieces[1] is large[1]  # not copied
            assert pieces[2:] == [b"abcde"]
            done.set()
    finally:
        await t.aclose()


async def test_bytes_past_the_length_are_a_protocol_error() -> None:
    t = PoolTransport(limit=1)
    server = RawServer(in_pieces(BIG, extra=b"HTTP/1.1 200 OK\r\n"))
    try:
        async with server as url:
            resp = await post(t, url)
            with pytest.raises(UpstreamProtocolError, match="more than its Content-Length"):
                await resp.read()
            # That connection is not reused.
            resp = await post(t, url)
            assert server.connections == 2
            await resp.aclose()
    finally:
        await t.aclose()


async def test_a_body_cut_short_is_a_protocol_error() -> None:
    t = PoolTransport(limit=1)
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % (len(BIG) + 10)
    try:
        async with RawServer(in_pieces(BIG, head=head)) as url:
            resp = await post(t, url)
            with pytest.raises(UpstreamProtocolError, match="mid-response"):
                await resp.read()
    finally:
        await t.aclose()


async def test_a_large_chunked_body_is_read_through_llhttp() -> None:
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BIG), BIG)
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    t = PoolTransport(limit=1)
    server = RawServer(in_pieces(chunked, times=2, head=head))
    try:
        async with server as url:
            for _ in range(2):
                resp = await t.request(Upstream("POST", url, body=b"", headers=[], timeouts=FAST))
                assert await resp.read() == BIG
            assert server.connections == 1
    finally:
        await t.aclose()


async def test_connection_close_after_a_large_body_is_honoured() -> None:
    head = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(BIG)
    t = PoolTransport(limit=1)
    server = RawServer(in_pieces(BIG, head=head))
    try:
        async with server as url:
            resp = await post(t, url)
            assert await resp.read() == BIG
            resp = await post(t, url)  # a new connection: the first was not kept
            assert server.connections == 2
            await resp.aclose()
    finally:
        await t.aclose()


async def test_a_head_and_body_in_one_read_are_parted_before_llhttp() -> None:
    # One write: the first read holds the head and most of the body.
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(BIG) + BIG
    t = PoolTransport(limit=1)
    server = RawServer(answers(answer, times=4))
    try:
        async with server as url:
            resp = await post(t, url)
            assert await read_whole(resp, len(BIG)) == BIG
            resp = await post(t, url)
            pieces = [piece async for piece in resp.iter_bytes()]
            assert {type(p) for p in pieces} == {bytes}  # views are made bytes for consumers
            assert b"".join(pieces) == BIG
            resp = await post(t, url)
            assert isinstance(resp, _PoolResponse)
            raw = [piece async for piece in resp.uncopied()]
            assert memoryview in {type(p) for p in raw}  # the first read's body: not copied
            assert b"".join(raw) == BIG
            resp = await post(t, url)
            with pytest.raises(ResponseTooLarge):  # by its Content-Length, nothing read
                await read_whole(resp, len(BIG) - 1)
            await resp.aclose()
            assert server.connections == 1  # all four on one connection
    finally:
        await t.aclose()
