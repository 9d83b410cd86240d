"""EDGE: read TLS key log files (NSS format) into one `KeyLog`, and follow them as they grow.

Input: the paths given with --tls-keylog / `tls_keylog=` (several files allowed).
Output: `KeylogFiles.keylog`, fed every file's text; `poll()` feeds what was appended since
the last read (live capture: the peers write secrets as they open sessions).
Rules: a missing or unreadable file is an InputError naming the file, never its contents
(key logs hold secrets: no line of one ever appears in a message). A file that shrank was
replaced (rotated, rewritten): it is read again from its start. Text is decoded as UTF-8
with replacement; the key log parser passes over lines that do not parse. Each file keeps its
own unfinished last line: a file's lines never join another file's (a first file ending in a
cut line without its newline once swallowed the second file's first secret: fuzzing campaign
rerun, tls input 162 of seed 31). A line is decoded when whole.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from dissector.errors import InputError, os_reason
from dissector.tls.keylog import MAX_LINE, KeyLog


class KeylogFiles:
    """Key log files read into one KeyLog; see the module docstring."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], *, follow: bool = False) -> None:
        """follow: the files may still grow (live): a last line without its newline waits
        for the rest; else it is taken as it is."""
        self.paths = [os.fspath(p) for p in paths]
        self.keylog = KeyLog()
        self._pos = dict.fromkeys(self.paths, 0)
        # per file, the bytes after its last newline (a line still being written)
        self._held = dict.fromkeys(self.paths, b"")
        self._follow = follow
        for path in self.paths:
            self._read(path, strict=True)
        if not follow:  # files that do not grow: a last line without its newline is whole
            for path in self.paths:
                self.keylog.feed(self._held[path].decode("utf-8", "replace"))
                self.keylog.flush()
                self._held[path] = b""

    def poll(self) -> int:
        """Read what the files gained since the last read; returns the secrets added. A file
        that became unreadable is skipped until it is readable again."""
        return sum(self._read(path, strict=False) for path in self.paths)

    def _read(self, path: str, strict: bool) -> int:
        try:
            size = os.path.getsize(path)
            start = self._pos[path]
            if size < start:  # replaced by a shorter file: read it again
                start = 0
                self._held[path] = b""
            if size == start:
                return 0
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(size - start)
        except OSError as exc:
            if strict:
                raise InputError(f"{path}: cannot read the TLS key log: {os_reason(exc)}") from None
            return 0
        self._pos[path] = start + len(data)
        data = self._held[path] + data
        cut = data.rfind(b"\n") + 1
        held = data[cut:]
        if len(held) > MAX_LINE:  # not a key log line (bounds the held piece)
            held = b""
            self.keylog.bad_lines += 1
        self._held[path] = held
        return self.keylog.feed(data[:cut].decode("utf-8", "replace"))


def check_keylogs(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Every key log file is readable (InputError for the first that is not)."""
    for path in paths:
        if os.path.isdir(path):
            raise InputError(f"{os.fspath(path)}: cannot read the TLS key log: is a folder")
        KeylogFiles([path])
