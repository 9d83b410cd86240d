"""A STRING schema's `__charset` (a Java charset name) -> the Python text codec that decodes
as Java's charset does.

Input: the `__charset` property of a STRING schema (Pulsar's StringSchema passes it to
Java's `Charset.forName`) and the payload.
Output: `decode_text` -> the text; `BadValue` for a name that is not an allowed text charset
("unsupported charset X") or bytes that are not text in it.
Rule: only the names below are accepted, by an explicit allow-list, never `codecs.lookup`
(which also knows `zlib`, `base64`, `rot13`, `unicode_escape`, `idna`, `punycode`: codecs
no Java charset is). The names are Java's: the standard charsets every Java platform has
(java.nio.charset.StandardCharsets and the `Charset` class documentation: US-ASCII,
ISO-8859-1, UTF-8, UTF-16BE, UTF-16LE, UTF-16) and the extended ones of the JDK's
"Supported Encodings" page that Python has as text codecs, each with the aliases Java
accepts (its canonical name, its IANA name and the `Charset.aliases()` in common use), matched
case-insensitively as `Charset.forName` does. UTF-16 and UTF-32 decode as Java's do: a
leading byte-order mark says the order and is dropped, big-endian without one (Python's
own `utf-16` would take the machine's order); UTF-16BE/LE keep a leading U+FEFF as text.
"""

from __future__ import annotations

from dissector.values.model import BadValue

#: Java canonical name: (Python codec, Java's aliases).
_JAVA_CHARSETS: dict[str, tuple[str, tuple[str, ...]]] = {
    # the standard charsets (every Java platform)
    "UTF-8": ("utf-8", ("UTF8", "unicode-1-1-utf-8")),
    "US-ASCII": (
        "ascii",
        (
            "ASCII",
            "us",
            "ISO646-US",
            "iso-ir-6",
            "ANSI_X3.4-1968",
            "ANSI_X3.4-1986",
            "ISO_646.irv:1991",
            "cp367",
            "IBM367",
            "csASCII",
            "646",
            "ascii7",
            "default",
        ),
    ),
    "ISO-8859-1": (
        "latin-1",
        (
            "ISO8859_1",
            "ISO8859-1",
            "ISO_8859-1",
            "ISO_8859-1:1987",
            "8859_1",
            "latin1",
            "l1",
            "iso-ir-100",
            "cp819",
            "IBM819",
            "IBM-819",
            "819",
            "csISOLatin1",
        ),
    ),
    "UTF-16BE": ("utf-16-be", ("UTF_16BE", "X-UTF-16BE", "ISO-10646-UCS-2", "UnicodeBigUnmarked")),
    "UTF-16LE": ("utf-16-le", ("UTF_16LE", "X-UTF-16LE", "UnicodeLittleUnmarked")),
    "UTF-16": ("utf-16", ("UTF_16", "utf16", "unicode", "UnicodeBig")),
    # extended charsets of the JDK that Python decodes alike
    "UTF-32": ("utf-32", ("UTF_32", "UTF32")),
    "UTF-32BE": ("utf-32-be", ("UTF_32BE", "X-UTF-32BE")),
    "UTF-32LE": ("utf-32-le", ("UTF_32LE", "X-UTF-32LE")),
    **{
        f"ISO-8859-{n}": (f"iso8859-{n}", (f"ISO8859_{n}", f"ISO8859-{n}", f"ISO_8859-{n}"))
        for n in (2, 3, 4, 5, 6, 7, 8, 9, 13, 15)
    },
    **{f"windows-125{n}": (f"cp125{n}", (f"cp125{n}",)) for n in range(9)},
    "KOI8-R": ("koi8-r", ("koi8_r", "koi8", "cskoi8r")),
    "KOI8-U": ("koi8-u", ("koi8_u",)),
    "Shift_JIS": (
        "shift_jis",
        ("sjis", "shift_jis", "shift-jis", "ms_kanji", "x-sjis", "csShiftJIS"),
    ),
    "windows-31j": ("cp932", ("MS932", "windows-932", "csWindows31J")),
    "EUC-JP": (
        "euc_jp",
        ("euc_jp", "eucjis", "eucjp", "x-euc-jp", "x-eucjp", "csEUCPkdFmtjapanese"),
    ),
    "ISO-2022-JP": ("iso2022_jp", ("iso2022jp", "jis", "csISO2022JP", "jis_encoding")),
    "EUC-KR": (
        "euc_kr",
        ("euc_kr", "ksc5601", "euckr", "ks_c_5601-1987", "ksc5601-1987", "csEUCKR"),
    ),
    "x-windows-949": ("cp949", ("MS949", "windows949", "windows-949")),
    "GBK": ("gbk", ("CP936", "windows-936")),
    "GB18030": ("gb18030", ("gb18030-2000", "gb18030-2022")),
    "GB2312": ("gb2312", ("gb2312", "euc-cn", "EUC_CN", "euccn", "x-EUC-CN", "gb2312-80")),
    "Big5": ("big5", ("csBig5",)),
    "Big5-HKSCS": ("big5hkscs", ("Big5_HKSCS", "big5hk", "big5-hkscs", "big5hkscs")),
    "TIS-620": ("tis-620", ("tis620", "tis620.2533")),
    **{
        f"IBM{n}": (f"cp{n}", (f"cp{n}", f"ibm-{n}", f"ibm{n}", str(n)))
        for n in (437, 850, 852, 855, 857, 862, 866)
    },
}

#: Any accepted name, lower case -> (Python codec, whether a leading byte-order mark decides).
CHARSETS: dict[str, tuple[str, bool]] = {
    name.lower(): (codec, codec in ("utf-16", "utf-32"))
    for canonical, (codec, aliases) in _JAVA_CHARSETS.items()
    for name in (canonical, *aliases)
}

_BOMS = {
    "utf-16": ((b"\xfe\xff", "utf-16-be"), (b"\xff\xfe", "utf-16-le")),
    "utf-32": ((b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe\x00\x00", "utf-32-le")),
}


def decode_text(data: bytes, charset: str) -> str:
    """`data` as text of the Java charset named `charset`, or BadValue saying why not."""
    known = CHARSETS.get(charset.lower())
    if known is None:
        raise BadValue(f"STRING: unsupported charset {charset!r}")
    codec, by_bom = known
    skip = 0
    if by_bom:
        skip, codec = _by_bom(data, codec)
    try:
        return data[skip:].decode(codec)
    except UnicodeDecodeError as e:
        where = skip + e.start
        raise BadValue(f"STRING is not valid {charset}: {e.reason} at byte {where}") from None


def _by_bom(data: bytes, codec: str) -> tuple[int, str]:
    """The byte-order mark's length and the codec it names; big-endian without one."""
    for bom, ordered in _BOMS[codec]:
        if data.startswith(bom):
            return len(bom), ordered
    return 0, codec + "-be"
