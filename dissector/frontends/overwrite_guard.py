"""EDGE: refuse an output that is one of the run's inputs, before anything is opened for writing.

Input: the run's input files (captures, TLS key logs) and its outputs (the files of -o and -w,
and standard output when it is a file).
Output: nothing, or a UsageError naming the output and the input it would overwrite.
Rule: files are compared by identity, the device and inode number of what a path leads to
after every link is followed, never by name: `in.pcap`, `./in.pcap`, `/abs/in.pcap`, a
symbolic or a hard link to it are one file. An output that does not exist yet is no input;
only regular files are compared (a device such as /dev/stdout, a FIFO or `-` is a stream);
remote locations (s3://, gs://, hdfs://) are not compared.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from typing import TextIO

from dissector.errors import UsageError

#: (device, inode) of a regular file.
FileId = tuple[int, int]


def _identity(st: os.stat_result) -> FileId | None:
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def file_id(path: str | os.PathLike[str] | os.PathLike[bytes] | bytes) -> FileId | None:
    """The identity of the regular file a local path leads to; None for anything else (no
    such file, a remote location, a device, a folder)."""
    name = os.fsdecode(path)
    if "://" in name:
        return None
    try:
        return _identity(os.stat(path))
    except (OSError, ValueError):
        return None


def stream_id(stream: TextIO) -> FileId | None:
    """The identity of the regular file a stream writes to (stdout redirected to a file)."""
    try:
        return _identity(os.fstat(stream.fileno()))
    except (OSError, ValueError, AttributeError):
        return None


def refuse_overwrite(
    inputs: Iterable[str | os.PathLike[str]],
    outputs: Iterable[str | None],
    stdout: TextIO | None = sys.stdout,
) -> None:
    """UsageError when an output (None or '-' is standard output) is one of the inputs."""
    seen: dict[FileId, str] = {}
    for path in inputs:
        found = file_id(path)
        if found is not None:
            seen.setdefault(found, os.fsdecode(path))
    if not seen:
        return
    for out in outputs:
        if out is None or out == "-":
            found = stream_id(stdout) if stdout is not None else None
            label = "standard output"
        else:
            found, label = file_id(out), out
        if found is not None and found in seen:
            raise UsageError(
                f"{label}: is the input {seen[found]}: writing it would destroy it "
                "(choose another output)"
            )
