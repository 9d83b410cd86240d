"""EDGE: where files live -> a pyarrow filesystem and the path inside it.

Input: a location: a plain path, `file://PATH`, `s3://BUCKET/KEY`, `gs://BUCKET/KEY`,
`hdfs://HOST:PORT/PATH` (and any other URI pyarrow's `FileSystem.from_uri` knows).
Output: `filesystem_for(location) -> (FileSystem, path)`, what the capture readers, the
expansion of globs and directories (dissector.capture.listing) and the fleet job's output use;
`open_input` (a seekable binary stream read in chunks, never downloaded whole) and
`input_error` (one line for a storage failure).
Rules:
- Plain paths and `file://` are the local disk; everything else goes through pyarrow.
- S3 endpoint other than AWS: the explicit `s3_endpoint` (the CLI's `--s3-endpoint`, the
  Spark source's `s3_endpoint` option), else `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`,
  as the AWS CLI and SDKs read them (pyarrow's S3 filesystem does not read them itself).
- Credentials come from each filesystem's own chain (environment, config files, instance
  roles); this module never reads, prints or forwards them. Error messages name the
  location and the reason; a library message that would carry a secret's value is redacted.
- One filesystem object per (scheme, bucket or host, endpoint) per process.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dissector.errors import InputError

if TYPE_CHECKING:  # imported where a filesystem is made: a local read never needs pyarrow
    import pyarrow.fs as pafs

#: Environment variables, in order, that name an S3 endpoint other than AWS.
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
#: Environment variables whose values must never appear in a message (botocore's names,
#: which the AWS SDK under pyarrow reads too, and Google's).
SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "GOOGLE_APPLICATION_CREDENTIALS",
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]+)")
#: AWS SDK error codes (as pyarrow's messages carry them) -> what a user reads.
_AWS_REASONS = {
    "NO_SUCH_BUCKET": "no such bucket",
    "NO_SUCH_KEY": "no such object",
    "RESOURCE_NOT_FOUND": "no such object",
    "ACCESS_DENIED": "access denied (check the credentials: AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials)",
    "INVALID_ACCESS_KEY_ID": "access key not recognised by the endpoint (check the credentials)",
    "SIGNATURE_DOES_NOT_MATCH": "the secret key does not match the access key "
    "(check the credentials)",
    "MISSING_AUTHENTICATION_TOKEN": "no credentials (set AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials)",
    "NETWORK_CONNECTION": "cannot reach the endpoint",
}
#: HTTP statuses of errors the SDK has no code for (AWS Error UNKNOWN).
_HTTP_REASONS = {403: _AWS_REASONS["ACCESS_DENIED"], 404: "no such file"}
_HTTP_STATUS = re.compile(r"HTTP status (\d+)")

_cache: dict[tuple[str, str, str | None], pafs.FileSystem] = {}


def scheme_of(location: str) -> str:
    """'s3', 'gs', 'hdfs', ... for a URI; 'file' for `file://` and plain paths."""
    found = _SCHEME.match(location)
    return found.group(1).lower() if found else "file"


def is_local(location: str) -> bool:
    """True for plain paths and `file://` URIs: the local disk."""
    return scheme_of(location) == "file"


def local_path(location: str) -> str:
    """The local path of a plain path or `file://` URI (unchanged for a plain path)."""
    return urlsplit(location).path if _SCHEME.match(location) else location


def s3_endpoint_from(explicit: str | None = None) -> str | None:
    """The S3 endpoint URL to use: the explicit one, else the standard environment
    variables (AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL); None for AWS itself."""
    if explicit:
        return explicit
    for name in ENDPOINT_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def filesystem_for(location: str, s3_endpoint: str | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding `location` and the path inside it (a local path stays as it
    is; `s3://b/k` gives `b/k`; `hdfs://nn:8020/p` gives `/p`). s3_endpoint: an S3 endpoint
    URL (`http://127.0.0.1:9000`) overriding the environment's. InputError (one line naming
    the location) when the URI or its filesystem cannot be used."""
    import pyarrow.fs as pafs

    scheme = scheme_of(location)
    if scheme == "file":
        return pafs.LocalFileSystem(), local_path(location)
    parts = urlsplit(location)
    if scheme in ("s3", "s3a"):
        endpoint = s3_endpoint_from(s3_endpoint)
        path = (parts.netloc + parts.path).rstrip("/")
        key = (scheme, "" if endpoint else parts.netloc, endpoint)
        if key not in _cache:
            _cache[key] = _s3(location, parts.netloc, endpoint)
        return _cache[key], path
    key = (scheme, parts.netloc, None)
    if key not in _cache:
        try:
            _cache[key] = pafs.FileSystem.from_uri(location)[0]
        except (OSError, ValueError, ImportError) as exc:
            raise input_error(location, exc) from None
    # hdfs://HOST:PORT/PATH: the path; gs://BUCKET/KEY and the like: BUCKET/KEY, as for S3
    path = parts.path if scheme in ("hdfs", "viewfs") else parts.netloc + parts.path
    return _cache[key], path.rstrip("/") or "/"


def _s3(location: str, bucket: str, endpoint: str | None) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    if endpoint is None:  # AWS: pyarrow finds the bucket's region
        try:
            return pafs.FileSystem.from_uri(f"s3://{bucket}")[0]
        except (OSError, ValueError) as exc:
            raise input_error(location, exc) from None
    url = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InputError(f"S3 endpoint must be an http:// or https:// URL, not {_host(url)!r}")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    return pafs.S3FileSystem(
        endpoint_override=_host(url),
        scheme=url.scheme,
        region=region,
    )


def _host(url: object) -> str:
    """host:port of a parsed URL, without any user:password@ part."""
    hostname = getattr(url, "hostname", None) or ""
    port = getattr(url, "port", None)
    host = f"[{hostname}]" if ":" in hostname else hostname
    return f"{host}:{port}" if port else host


def open_input(location: str, s3_endpoint: str | None = None) -> pafs.NativeFile:
    """A seekable binary stream of the file at `location`, read in ranged requests as it is
    consumed (never downloaded whole); InputError naming the location when it cannot be."""
    fs, path = filesystem_for(location, s3_endpoint)
    try:
        return fs.open_input_file(path)
    except (OSError, ValueError) as exc:
        raise input_error(location, exc, fs, path, s3_endpoint) from None


def rereadable(location: str) -> bool:
    """True when the file at `location` can be read twice: a local regular file, or any
    remote object (not a pipe or a device)."""
    return os.path.isfile(local_path(location)) if is_local(location) else True


def size_of(location: str, s3_endpoint: str | None = None) -> int:
    """The size in bytes of the file at `location` (0 when unknown)."""
    if is_local(location):
        try:
            return os.path.getsize(local_path(location))
        except OSError:
            return 0
    try:
        fs, path = filesystem_for(location, s3_endpoint)
        info = fs.get_file_info(path)
    except (OSError, ValueError, InputError):
        return 0
    return int(info.size or 0)


def input_error(
    location: str,
    exc: BaseException,
    fs: pafs.FileSystem | None = None,
    path: str | None = None,
    s3_endpoint: str | None = None,
) -> InputError:
    """One line for a failure to use `location`: the location, then the reason in words
    (no such bucket, no such file, access denied, cannot reach the endpoint)."""
    text = redact(str(exc))
    code = _AWS_ERROR.search(text)
    if isinstance(exc, FileNotFoundError) or (code and code.group(1) == "NO_SUCH_KEY"):
        reason = "no such file"
        if fs is not None and _is_s3(fs) and path and not _bucket_exists(fs, path):
            reason = f"no such bucket {path.split('/', 1)[0]!r}"
    elif code and code.group(1) in _AWS_REASONS:
        reason = _AWS_REASONS[code.group(1)]
        s3 = scheme_of(location) in ("s3", "s3a")
        endpoint = s3_endpoint_from(s3_endpoint) if s3 else None
        if code.group(1) == "NETWORK_CONNECTION" and s3:
            reason += f" {_host(urlsplit(endpoint))}" if endpoint else " (AWS S3; another "
            reason += "" if endpoint else "endpoint: --s3-endpoint URL or AWS_ENDPOINT_URL)"
    elif code and (status := _HTTP_STATUS.search(text)):
        number = int(status.group(1))
        reason = _HTTP_REASONS.get(number, f"request failed (HTTP status {number})")
    elif isinstance(exc, IsADirectoryError):
        reason = "is a directory, not a capture file"
    else:
        reason = _first_line(text)
    return InputError(f"{location}: {reason}")


def _is_s3(fs: pafs.FileSystem) -> bool:
    import pyarrow.fs as pafs  # a filesystem exists, so pyarrow is imported already

    return isinstance(fs, pafs.S3FileSystem)


def _bucket_exists(fs: pafs.FileSystem, path: str) -> bool:
    import pyarrow.fs as pafs

    try:
        return bool(fs.get_file_info(path.split("/", 1)[0]).type != pafs.FileType.NotFound)
    except OSError:
        return True  # cannot tell: do not claim it is missing


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "failed"
    return line[:300]


def redact(text: str) -> str:
    """`text` with the value of every credential variable in the environment replaced."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name, "")
        if len(value) >= 4 and value in text:
            text = text.replace(value, "<redacted>")
    return text
