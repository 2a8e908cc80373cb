"""Write a small Outlook ``.msg`` file (for the tests and the demo: no Python library writes them).

A .msg is a Compound File Binary ([MS-CFB], version 3, 512-byte sectors) whose root storage holds the
message's properties ([MS-OXMSG]): a ``__properties_version1.0`` stream (a 32-byte header, then one
16-byte entry per property) and one ``__substg1.0_<id><type>`` stream per string property (UTF-16LE).
Streams under 4,096 bytes live in the mini stream (64-byte sectors), as the format requires.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from pathlib import Path

_SECTOR, _MINI, _CUTOFF = 512, 64, 4096
_FREE, _END, _FATSECT, _NOSTREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF
_PT_LONG, _PT_UNICODE, _PT_SYSTIME = 0x0003, 0x001F, 0x0040
_STORE_UNICODE_OK = 0x00040000


def write_msg(path: Path, *, subject: str, body: str, sender_name: str, sender_email: str,
              sent: datetime | None = None) -> Path:
    """A plain-text message with a subject, a sender and a send time."""
    strings = {0x001A: "IPM.Note", 0x0037: subject, 0x1000: body, 0x0C1A: sender_name, 0x0C1F: sender_email,
               0x0042: sender_name, 0x0065: sender_email}
    streams: dict[str, bytes] = {}
    entries = b""
    for pid, value in strings.items():
        data = value.encode("utf-16-le")  # no terminator in the stream; the size counts one
        streams[f"__substg1.0_{pid:04X}{_PT_UNICODE:04X}"] = data
        entries += struct.pack("<IIII", (pid << 16) | _PT_UNICODE, 6, len(data) + 2, 0)
    filetime = int(((sent or datetime.now(UTC)).timestamp() + 11644473600) * 10_000_000)
    entries += struct.pack("<IIQ", (0x0039 << 16) | _PT_SYSTIME, 6, filetime)  # client submit time
    entries += struct.pack("<IIQ", (0x340D << 16) | _PT_LONG, 6, _STORE_UNICODE_OK)  # strings are UTF-16
    header = struct.pack("<8sIIII8s", b"", 0, 0, 0, 0, b"")
    streams["__properties_version1.0"] = header + entries
    path.write_bytes(_compound_file(streams))
    return path


def _chain(fat: list[int], start: int, count: int) -> None:
    for i in range(count):
        fat[start + i] = start + i + 1 if i < count - 1 else _END


def _compound_file(streams: dict[str, bytes]) -> bytes:
    """A CFB file whose root storage holds ``streams`` (all small: they go in the mini stream)."""
    names = sorted(streams, key=lambda n: (len(n), n.upper()))  # the order CFB compares names in
    mini = b""
    minifat: list[int] = []
    starts = {}
    for name in names:
        data = streams[name]
        assert len(data) < _CUTOFF, "only small streams are written"
        first = len(mini) // _MINI
        count = max(1, -(-len(data) // _MINI))
        starts[name] = first
        minifat.extend(range(first + 1, first + count))
        minifat.append(_END)
        mini += data.ljust(count * _MINI, b"\0")
    mini_sectors = -(-len(mini) // _SECTOR)
    minifat_bytes = struct.pack(f"<{len(minifat)}I", *minifat)
    minifat_sectors = -(-len(minifat_bytes) // _SECTOR)
    directory = _entry("Root Entry", 5, child=1 if names else _NOSTREAM, start=0 if mini else _END, size=len(mini))
    for i, name in enumerate(names, start=1):
        directory += _entry(name, 2, right=i + 1 if i < len(names) else _NOSTREAM, start=starts[name],
                            size=len(streams[name]))
    directory_sectors = -(-len(directory) // _SECTOR)
    data_sectors = mini_sectors + minifat_sectors + directory_sectors
    fat_sectors = 1
    while (data_sectors + fat_sectors) > fat_sectors * (_SECTOR // 4):
        fat_sectors += 1
    fat = [_FREE] * (fat_sectors * (_SECTOR // 4))
    _chain(fat, 0, mini_sectors)
    _chain(fat, mini_sectors, minifat_sectors)
    _chain(fat, mini_sectors + minifat_sectors, directory_sectors)
    for i in range(fat_sectors):
        fat[data_sectors + i] = _FATSECT
    difat = [data_sectors + i for i in range(fat_sectors)] + [_FREE] * (109 - fat_sectors)
    header = struct.pack(
        "<8s16sHHHHH6sIIIIIIIII", bytes.fromhex("D0CF11E0A1B11AE1"), b"", 0x3E, 3, 0xFFFE, 9, 6, b"", 0,
        fat_sectors, mini_sectors + minifat_sectors, 0, _CUTOFF,
        mini_sectors if minifat else _END, minifat_sectors, _END, 0,
    ) + struct.pack("<109I", *difat)

    def pad(data: bytes) -> bytes:
        return data.ljust(-(-len(data) // _SECTOR) * _SECTOR, b"\0")

    return (header + pad(mini) + pad(minifat_bytes) + pad(directory)
            + struct.pack(f"<{len(fat)}I", *fat))


def _entry(name: str, kind: int, *, child: int = _NOSTREAM, right: int = _NOSTREAM, start: int = _END,
           size: int = 0) -> bytes:
    encoded = name.encode("utf-16-le") + b"\0\0"
    return struct.pack("<64sHBBIII16sIQQIQ", encoded, len(encoded), kind, 1, _NOSTREAM, right, child, b"", 0, 0, 0,
                       start, size)
