"""Crafting zip archives that zipfile cannot write: members that inflate far beyond their size (zip
bombs) and directories that lie about sizes."""

from __future__ import annotations

import struct
import zipfile
import zlib

_BLOCK = 1 << 22


def deflated_zeros(prefix: bytes, zeros: int):
    """(raw deflate stream, CRC-32, size) of ``prefix`` followed by ``zeros`` zero bytes, made in
    milliseconds however large: each 4 MiB block of zeros is compressed once after a full flush, which
    makes its compressed form the same every time, and repeated. The CRC is computed up to 1 GiB of
    zeros (beyond, 0: such members are for files refused before they are read)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(_BLOCK)) + c.flush(zlib.Z_FULL_FLUSH)
    count, rest = divmod(zeros, _BLOCK)
    tail = c.compress(bytes(rest)) + c.flush()
    crc = 0
    if zeros <= 1 << 30:
        crc = zlib.crc32(prefix)
        for _ in range(count):
            crc = zlib.crc32(bytes(_BLOCK), crc)
        crc = zlib.crc32(bytes(rest), crc)
    return head + block * count + tail, crc, len(prefix) + zeros


def write_zip(path, entries):
    """Write `zip_bytes` of ``entries`` to ``path``; returns the path."""
    with open(path, "wb") as f:
        f.write(zip_bytes(entries))
    return path


def zip_bytes(entries):
    """A zip64 archive of ``entries``: (name, method, payload, declared size, CRC-32), where the payload is
    the member's stored or raw-deflated bytes and the declared size may lie."""
    out, central = bytearray(), bytearray()
    for name, method, payload, size, crc in entries:
        encoded = name.encode()
        offset = len(out)
        extra = struct.pack("<HHQQ", 1, 16, size, len(payload))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, method, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                           len(encoded), len(extra)) + encoded + extra + payload
        cextra = struct.pack("<HHQQQ", 1, 24, size, len(payload), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0, crc, 0xFFFFFFFF,
                               0xFFFFFFFF, len(encoded), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + encoded + cextra
    start = len(out)
    out += central
    end64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central), start)
    out += struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return bytes(out)


def stored(name, data):
    """An entry of `write_zip` holding ``data`` as it is."""
    return name, zipfile.ZIP_STORED, data, len(data), zlib.crc32(data)


def deflated(name, data, declared=None):
    """An entry of `write_zip` holding ``data`` deflated, declaring ``declared`` bytes (default: the truth)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = c.compress(data) + c.flush()
    return name, zipfile.ZIP_DEFLATED, payload, len(data) if declared is None else declared, zlib.crc32(data)


def bomb(name, prefix, zeros, declared=None):
    """An entry of `write_zip` inflating to ``prefix`` and ``zeros`` zero bytes, declaring ``declared``."""
    payload, crc, size = deflated_zeros(prefix, zeros)
    return name, zipfile.ZIP_DEFLATED, payload, size if declared is None else declared, crc
