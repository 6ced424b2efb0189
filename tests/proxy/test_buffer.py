"""``wire.buffer``: the bounds-checked primitives every reader and writer uses,
each check on a hand-made buffer."""

from __future__ import annotations

import struct

import pytest

from flatgate.proxy.wire.buffer import (
    ENTRIES,
    STRUCTS,
    MalformedBuffer,
    Window,
    check_input,
    elements,
    entries,
    field_at,
    put_string,
    ref_at,
    string_at,
    string_bytes,
    vector_at,
    window_string,
)


def table_buffer(fields: tuple[int, ...] = (4,), tsize: int = 8) -> bytes:
    """A vtable at 0 (with ``fields``' entries), its table at 8, then room."""
    vsize = 4 + 2 * len(fields)
    vt = struct.pack(f"<HH{len(fields)}H", vsize, tsize, *fields)
    vt += bytes(8 - len(vt))
    return vt + struct.pack("<i", 8) + bytes(28)


def test_malformed_buffer_names_the_check_and_the_offset() -> None:
    exc = MalformedBuffer("string not 4-byte aligned", 13)
    assert str(exc) == "string not 4-byte aligned at offset 13"
    assert (exc.check, exc.offset, exc.path) == ("string not 4-byte aligned", 13, [])
    assert str(MalformedBuffer("input: released memoryview")) == "input: released memoryview"
    assert isinstance(exc, ValueError)


def test_check_input_takes_bytes_and_read_only_views_only() -> None:
    data = b"abcd"
    assert check_input(data) is data
    view = memoryview(data)
    assert check_input(view) is view
    for bad in (bytearray(data), memoryview(bytearray(data)), memoryview(data).cast("H"), "abcd"):
        with pytest.raises(MalformedBuffer, match="input"):
            check_input(bad)
    view.release()
    with pytest.raises(MalformedBuffer, match="released"):
        check_input(view)


def string_buffer(text: bytes, terminator: bytes = b"\0") -> bytes:
    """A uoffset at 0 pointing at a string at 4."""
    return struct.pack("<II", 4, len(text)) + text + terminator + bytes(8)


def test_string_at() -> None:
    buf = string_buffer(b"hello")
    assert string_at(buf, len(buf), 0) == 5
    with pytest.raises(MalformedBuffer, match="string uoffset not 4-byte aligned"):
        string_at(buf, len(buf), 1)
    with pytest.raises(MalformedBuffer, match="string not 4-byte aligned"):
        string_at(struct.pack("<I", 5) + buf[4:], len(buf), 0)
    with pytest.raises(MalformedBuffer, match="string length past buffer end"):
        string_at(buf, 6, 0)
    with pytest.raises(MalformedBuffer, match="string bytes or terminator past buffer end"):
        string_at(buf, 13, 0)
    bad = string_buffer(b"hello", b"x")
    with pytest.raises(MalformedBuffer, match="string terminator is not NUL at offset 13"):
        string_at(bad, len(bad), 0)


def test_vector_at_and_ref_at() -> None:
    buf = struct.pack("<III", 4, 2, 0) + bytes(4)
    assert vector_at(buf, len(buf), 0) == (8, 2)
    with pytest.raises(MalformedBuffer, match="vector uoffset not 4-byte aligned"):
        vector_at(buf, len(buf), 2)
    with pytest.raises(MalformedBuffer, match="vector of 2 elements past buffer end at offset 4"):
        vector_at(buf, 12, 0)
    with pytest.raises(MalformedBuffer, match="vector length past buffer end"):
        vector_at(buf, 6, 0)
    assert ref_at(buf, 0) == 4
    with pytest.raises(MalformedBuffer, match="table uoffset not 4-byte aligned at offset 2"):
        ref_at(buf, 2)


def test_window_keeps_every_read_inside_its_slice() -> None:
    inner = table_buffer((4,)) + string_buffer(b"x")
    data = b"\xff" * 16 + inner
    w = Window(data, 16, len(data))
    assert w.table(24, "t", 32) == (24, (4,))
    assert w.slot(24, 0, "t", 32) == 4
    assert w.slot(24, 5, "t", 32) == 0  # past the vtable: absent
    with pytest.raises(MalformedBuffer, match="t vtable size 6"):
        w.table(24, "t", 0)
    with pytest.raises(MalformedBuffer, match="t out of bounds"):
        w.check(15, 4, "t")
    with pytest.raises(MalformedBuffer, match="t out of bounds"):
        w.ref(24, 1000, "t")
    assert w.scalar(24, 0, STRUCTS["i"], "t") == 0


def test_window_string() -> None:
    data = b"\0" * 8 + string_buffer("é".encode())
    assert window_string(data, 8, len(data), 8, "s") == "é"
    with pytest.raises(MalformedBuffer, match="s out of bounds"):
        window_string(data, 8, 14, 8, "s")
    bad = b"\0" * 8 + string_buffer(b"\xff")
    with pytest.raises(MalformedBuffer, match="s is not UTF-8"):
        window_string(bad, 8, len(bad), 8, "s")


def test_unchecked_lookups() -> None:
    buf = table_buffer((4, 0))
    assert entries(buf, 8, 2) == (4, 0)
    assert entries(buf, 8, 4) == (4, 0, 0, 0)  # padded past the vtable's end
    assert field_at(buf, 8, 4) == 12
    assert field_at(buf, 8, 6) == 0  # present in the vtable, 0: absent
    assert field_at(buf, 8, 8) == 0  # past the vtable
    vec = struct.pack("<IIII", 4, 2, 8, 8)
    assert elements(vec, 0) == [16, 20]
    assert elements(vec, 0, most=1) == [16]
    assert ENTRIES[3](struct.pack("<3H", 1, 2, 3), 0) == (1, 2, 3)


def test_strings_are_written_with_their_nul_and_padding() -> None:
    for text in (b"", b"a", b"abc", b"abcd"):
        data = string_bytes(text)
        assert len(data) % 4 == 0
        assert data[4 + len(text)] == 0
        assert string_at(struct.pack("<I", 4) + data, 4 + len(data), 0) == len(text)
        buf = bytearray(b"xxxx")
        assert put_string(buf, text) == 4
        assert bytes(buf[4:]) == data
