"""The NSS key log: parsing (tls.keylog), files followed as they grow (keylog_files),
and the option as the Spark data source takes it.

Lines are written by hand in the format NSS documents (LABEL, 32-byte client random and
secret in hex), as SSLKEYLOGFILE writers and Python's keylog_filename produce them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector.errors import InputError
from dissector.keylog_files import KeylogFiles, check_keylogs
from dissector.tls.keylog import KeyLog

RANDOM = bytes(range(32))
OTHER = bytes(range(1, 33))
MASTER = bytes(range(100, 148))  # 48 bytes: a TLS 1.2 master secret
SECRET = bytes(range(200, 232))


def line(label: str, random: bytes, secret: bytes) -> str:
    return f"{label} {random.hex()} {secret.hex()}\n"


def test_labels_are_kept_by_client_random() -> None:
    log = KeyLog(
        "# a comment\n\n"
        + line("CLIENT_RANDOM", RANDOM, MASTER)
        + line("SERVER_TRAFFIC_SECRET_0", OTHER, SECRET)
        + line("EXPORTER_SECRET", OTHER, SECRET)  # of no use here: ignored
        + "CLIENT_RANDOM zz 00\n"  # not hex
        + "CLIENT_RANDOM 00 11 22\n"  # four words
        + line("CLIENT_RANDOM", b"short", MASTER)  # not 32 bytes
    )
    assert log.get(RANDOM, "CLIENT_RANDOM") == MASTER
    assert log.get(OTHER, "SERVER_TRAFFIC_SECRET_0") == SECRET
    assert log.get(OTHER, "EXPORTER_SECRET") is None
    assert log.get(OTHER, "CLIENT_RANDOM") is None
    assert (len(log), log.bad_lines) == (2, 3)
    assert MASTER.hex() not in repr(log) and SECRET.hex() not in repr(log)


def test_a_line_cut_in_two_waits_for_its_end() -> None:
    text = line("CLIENT_TRAFFIC_SECRET_0", RANDOM, SECRET + SECRET[:16])  # 48-byte secret
    log = KeyLog()
    cut = len(text) - 33  # the first 32 bytes' worth of hex would look like a whole secret
    assert log.feed(text[:cut]) == 0 and log.version == 0
    assert log.feed(text[cut:]) == 1 and log.version == 1
    assert log.get(RANDOM, "CLIENT_TRAFFIC_SECRET_0") == SECRET + SECRET[:16]
    # The same line again adds nothing; flush takes a last line without newline.
    assert log.feed(text) == 0 and log.version == 1
    assert log.feed(line("CLIENT_RANDOM", OTHER, MASTER).rstrip("\n")) == 0
    assert log.flush() == 1 and log.get(OTHER, "CLIENT_RANDOM") == MASTER


def test_files_are_followed_as_they_grow(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(line("CLIENT_RANDOM", RANDOM, MASTER))
    b.write_text("")
    files = KeylogFiles([a, b], follow=True)
    assert files.keylog.get(RANDOM, "CLIENT_RANDOM") == MASTER
    assert files.poll() == 0
    with b.open("a") as f:
        f.write(line("SERVER_HANDSHAKE_TRAFFIC_SECRET", OTHER, SECRET))
    assert files.poll() == 1
    assert files.keylog.get(OTHER, "SERVER_HANDSHAKE_TRAFFIC_SECRET") == SECRET
    b.write_text(line("CLIENT_RANDOM", OTHER, SECRET))  # rewritten, shorter: read again
    assert files.poll() == 1 and files.keylog.get(OTHER, "CLIENT_RANDOM") == SECRET


@pytest.mark.parametrize("follow", [False, True])
def test_a_file_ending_mid_line_does_not_swallow_the_next_files_first_line(
    tmp_path: Path, follow: bool
) -> None:
    # The campaign rerun's tls input 162: a key log cut short (no newline, half a secret)
    # given before a whole one; the whole file's first line is a secret of its own.
    cut, whole = tmp_path / "cut.log", tmp_path / "whole.log"
    cut.write_text(line("CLIENT_RANDOM", OTHER, MASTER)[:100])
    whole.write_text(
        line("SERVER_HANDSHAKE_TRAFFIC_SECRET", RANDOM, SECRET)
        + line("CLIENT_HANDSHAKE_TRAFFIC_SECRET", RANDOM, MASTER)
    )
    files = KeylogFiles([cut, whole], follow=follow)
    assert files.keylog.get(RANDOM, "SERVER_HANDSHAKE_TRAFFIC_SECRET") == SECRET
    assert files.keylog.get(RANDOM, "CLIENT_HANDSHAKE_TRAFFIC_SECRET") == MASTER
    assert files.keylog.get(OTHER, "CLIENT_RANDOM") is None
    if follow:  # the cut file's line ends later: it is whole then, and still its own
        with cut.open("a") as f:
            f.write(line("CLIENT_RANDOM", OTHER, MASTER)[100:])
        assert files.poll() == 1 and files.keylog.get(OTHER, "CLIENT_RANDOM") == MASTER


def test_unreadable_files_name_the_file_never_its_contents(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        check_keylogs([tmp_path / "missing.log"])
    assert str(err.value) == (
        f"{tmp_path / 'missing.log'}: cannot read the TLS key log: no such file or directory"
    )
    with pytest.raises(InputError, match="is a folder"):
        check_keylogs([tmp_path])


def test_spark_option_is_comma_separated_paths() -> None:
    pytest.importorskip("pyspark")
    from dissector.frontends.spark import options_from

    assert options_from({"tls_keylog": "a.log, /x/b.log"}).tls_keylog == ("a.log", "/x/b.log")
    assert options_from({}).tls_keylog == ()
