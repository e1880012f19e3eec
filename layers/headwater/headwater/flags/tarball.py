"""Deterministic closure snapshots: the same closure gives the same tar.gz bytes, whatever
order its mapping holds (spec: Idempotence and caching).

The tar is POSIX ustar, one regular-file member per path in UTF-8 byte order, no directory
members; every member has mtime 0, uid/gid 0, empty uname/gname and mode 0644. The gzip
layer has mtime 0, no file name, and compression level 9. (The bytes depend on the zlib
build: stable within one deployment, which is all the ETag and the S3 copy need.)

`read_snapshot` is the client's way back: it reuses the publish-time safety checks.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headwater.flags.manifest import DEFAULT_LIMITS, TreeLimits, parse_tarball


@dataclass(frozen=True, slots=True)
class Snapshot:
    body: bytes  # tar.gz
    tar_size: int  # uncompressed, the event's advisory snapshot_size_bytes


def _member(path: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def build_snapshot(files: Mapping[str, bytes]) -> Snapshot:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for path in sorted(files, key=lambda p: p.encode("utf-8")):
            content = files[path]
            archive.addfile(_member(path, len(content)), io.BytesIO(content))
    tar = raw.getvalue()
    return Snapshot(body=gzip.compress(tar, compresslevel=9, mtime=0), tar_size=len(tar))


def tar_size(sizes: Iterable[int]) -> int:
    """The uncompressed size `build_snapshot` gives a closure with these file sizes, without
    its bytes: a 512-byte header per member, contents padded to 512, two zero blocks, the
    whole padded to tarfile's 10 KiB record."""
    total = sum(tarfile.BLOCKSIZE + -(-n // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE for n in sizes)
    total += 2 * tarfile.BLOCKSIZE
    return -(-total // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def read_snapshot(body: bytes, limits: TreeLimits = DEFAULT_LIMITS) -> dict[str, bytes]:
    return parse_tarball(body, limits)
