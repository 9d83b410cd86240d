"""EDGE: the locations a user names -> the capture files they stand for, on any filesystem.

Input: locations (plain paths, `file://`, `s3://`, `gs://`, `hdfs://`, ...; see
dissector.capture.locations), each a file, a glob (`*`, `?`, `[...]`, `**` for any depth) or
a directory; an optional S3 endpoint.
Output: `expand_captures(locations, s3_endpoint)`: the capture files, sorted, each once, in
the form given (relative local paths stay relative, URIs stay URIs with their scheme).
Rules:
- A directory gives every file under it (recursively) named as a capture: .pcap, .pcapng,
  .cap, gzip'd or not, with tcpdump -C's number appended. A glob gives the files it matches.
- A name that is a file is taken as it is. A local name that does not exist or is not a
  regular file (`/dev/stdin`, a pipe) is passed on for the reader to judge.
- A glob or directory without captures, and a remote location that does not exist (or whose
  bucket does not), is an InputError naming it.
- pyarrow's filesystems have no glob (and fsspec's would be a dependency for ten lines): a
  remote glob lists the folder before its first wildcard recursively and matches each path
  segment by segment with fnmatch, as glob does: `*` stays within a segment, names starting
  with `.` need a pattern starting with `.`, `**` spans any number of segments.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dissector.capture.locations import filesystem_for, input_error, is_local, local_path
from dissector.errors import InputError

if TYPE_CHECKING:  # imported for remote locations only: listing local files needs no pyarrow
    import pyarrow.fs as pafs

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".gz")


def is_capture_name(name: str) -> bool:
    """A file name a capture has (tcpdump -C appends a number to the whole name)."""
    return name.rstrip("0123456789").endswith(CAPTURE_SUFFIXES)


def expand_captures(locations: Iterable[str], s3_endpoint: str | None = None) -> list[str]:
    """The capture files named by `locations` (files, globs, directories): see the module."""
    out: list[str] = []
    for location in locations:
        found = _local(location) if is_local(location) else _remote(location, s3_endpoint)
        if found is not None and not found:
            if glob.has_magic(location):
                raise InputError(f"{location}: no file matches")
            raise InputError(f"{location}: no capture file in this directory")
        out.extend([location] if found is None else found)
    return sorted(dict.fromkeys(out))


def _local(location: str) -> list[str] | None:
    """The files a local location names; None: the location itself, as given."""
    path = local_path(location)
    prefix = location[: len(location) - len(path)]  # "file://" or ""
    if os.path.isdir(path):
        return [
            prefix + os.path.join(root, f)
            for root, _, files in os.walk(path)
            for f in files
            if is_capture_name(f)
        ]
    if glob.has_magic(path) and not os.path.exists(path):
        return [prefix + p for p in glob.glob(path, recursive=True) if os.path.isfile(p)]
    return None


def _remote(location: str, s3_endpoint: str | None) -> list[str] | None:
    import pyarrow.fs as pafs

    parts = urlsplit(location)
    if parts.scheme in ("s3", "s3a", "gs", "gcs") and not parts.netloc:
        raise InputError(f"{location}: no bucket name ({parts.scheme}://BUCKET/PATH)")
    fs, path = filesystem_for(location, s3_endpoint)
    root = f"{location[: location.index('://')]}://{parts.netloc if path.startswith('/') else ''}"
    segments = path.split("/")
    wild = next((i for i, s in enumerate(segments) if glob.has_magic(s)), None)
    try:
        if wild is None:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                return None
            if info.type == pafs.FileType.NotFound:
                raise FileNotFoundError(path)
            return [root + p for p in _files_under(fs, path) if is_capture_name(_name(p))]
        base = "/".join(segments[:wild])
        if not base.strip("/"):
            raise InputError(f"{location}: wildcards in the bucket name are not supported")
        pattern = segments[wild:]
        return [
            root + p
            for p in _files_under(fs, base)
            if _matches(pattern, p[len(base) :].lstrip("/").split("/"))
        ]
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise input_error(location, exc, fs, path, s3_endpoint) from None


def _files_under(fs: pafs.FileSystem, base: str) -> list[str]:
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    return [i.path for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _matches(pattern: list[str], parts: list[str]) -> bool:
    """Whether path segments `parts` match glob segments `pattern` (`**`: any number)."""
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_matches(rest, parts[i:]) for i in range(len(parts) + 1))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _matches(rest, parts[1:])
