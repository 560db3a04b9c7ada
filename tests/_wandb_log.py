"""A reader of W&B's offline run file (``offline-run-*/run-*.wandb``), for tests that check what a run wrote.

Recent wandb releases ship no Python reader of this file. It is LevelDB's log format: a 7-byte file header (``:W&B``,
magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each a 7-byte header (CRC-32 4 bytes, length 2, type 1:
full, first, middle, last) and its bytes; a block's tail shorter than a header is padding. A record is the bytes of
its chunks joined, a serialized ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: str | Path) -> list[wandb_internal_pb2.Record]:
    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path} is not a W&B run file (header {data[:7]!r})")
    records, parts, pos = [], [], 7
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # padding to the next block
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER:pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind == 0 and length == 0:  # zeros at the end of a file still being written
            break
        parts = [chunk] if kind in (FULL, FIRST) else parts + [chunk]
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def wait_for_exit(path: str | Path, timeout: float = 300.0) -> list[wandb_internal_pb2.Record]:
    """The records of a run file once it holds the run's ``exit`` record. W&B's service writes the file in its own
    process, which can still be flushing after the fit's process ended (seen on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path) if Path(path).is_file() else []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(1.0)

