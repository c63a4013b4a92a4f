"""Where an imported media file comes from (no Django): a path relative to a media directory or
an uploaded zip archive, or an https URL on the installation's allow-list. Each is copied to a
local file for `evalstudy.media_probe` to check.

Names come from files that researchers (and whoever sent them the files) wrote, so every way
out is closed before anything is read:
- a reference is a relative path of plain parts: no absolute path, drive, backslash, `..`,
  scheme other than https, or control character (`ref_problem`, also used by the spec reader
  to point at the line);
- in a directory, the path is resolved (symbolic links followed) and must stay inside the
  directory's own resolved path: a link pointing out of it is refused like `..`;
- in an archive, only a regular member of exactly that name is read (never a symbolic link),
  and never more bytes than the limit, whatever the member's header claims (zip bombs);
- a URL must be https, its host must be on the allow-list, and every address the host resolves
  to must be public (loopback, private, link-local and other special addresses are refused,
  as is an IPv6 address standing for one); the connection goes to the address that was
  checked, redirects are not followed, and the body is cut off at the size and time limits.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
import stat
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO
from urllib.parse import urlsplit

MAX_REF_CHARS = 1000
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 16


class MediaSourceError(ValueError):
    """A reference cannot be read from where it points; the message says why."""


def is_url(ref: str) -> bool:
    return "://" in ref


def ref_problem(ref: str) -> str | None:
    """Why `ref` (a media path or URL as written in a file) cannot be one; None when it can."""
    if len(ref) > MAX_REF_CHARS:
        return f"longer than {MAX_REF_CHARS} characters"
    if _CONTROL.search(ref):
        return "holds a control character"
    if is_url(ref) or ref.lower().startswith(("data:", "file:", "javascript:")):
        scheme = ref.split(":", 1)[0].lower()
        if scheme == "http":
            return "plain http is refused: use an https URL (or a path in the media archive)"
        if scheme != "https":
            return f"{scheme!r} URLs are refused: use an https URL or a relative path"
        parts = urlsplit(ref)
        if not parts.hostname:
            return "the URL has no host"
        if parts.username is not None or parts.password is not None:
            return "a URL with a user name or password is refused"
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            return "the URL's port is not a number"
        return None
    if ref.startswith(("/", "~")) or _DRIVE.match(ref):
        return "an absolute path is refused: write the path relative to the media directory"
    if "\\" in ref:
        return "write paths with / (a backslash is refused)"
    names = PurePosixPath(ref).parts
    if not names:
        return "empty path"
    if ".." in names:
        return "'..' is refused: the path must stay inside the media directory or archive"
    return None


def _relative(ref: str) -> PurePosixPath:
    problem = ref_problem(ref)
    if problem is not None or is_url(ref):
        raise MediaSourceError(problem or "not a path")
    return PurePosixPath(*[part for part in PurePosixPath(ref).parts if part != "."])


def _copy(stream: IO[bytes], destination: IO[bytes], limit: int, what: str) -> int:
    written = 0
    for block in iter(lambda: stream.read(_CHUNK), b""):
        written += len(block)
        if written > limit:
            raise MediaSourceError(f"{what} is over the limit of {limit:,} bytes "
                                   "(EVALSTUDY_MEDIA_MAX_BYTES)")
        destination.write(block)
    return written


# --- a media directory --------------------------------------------------------------------------
def copy_from_directory(root: str | Path, ref: str, destination: Path, limit: int) -> None:
    """Copy the file `ref` (relative to `root`) to `destination`; MediaSourceError when the
    path leaves `root` (through `..` or a link), is not a regular file, or is over `limit`."""
    relative = _relative(ref)
    try:
        base = Path(root).resolve(strict=True)
    except OSError:
        raise MediaSourceError("the media directory does not exist "
                               "(EVALSTUDY_MEDIA_IMPORT_ROOT)") from None
    target = (base / relative).resolve(strict=False)
    if not target.is_relative_to(base):
        raise MediaSourceError("the path leads out of the media directory (a link?)")
    try:
        info = target.stat()
    except OSError:
        raise MediaSourceError("no such file in the media directory") from None
    if not stat.S_ISREG(info.st_mode):
        raise MediaSourceError("not a file")
    if info.st_size > limit:
        raise MediaSourceError(f"the file is {info.st_size:,} bytes, over the limit of "
                               f"{limit:,} bytes (EVALSTUDY_MEDIA_MAX_BYTES)")
    with open(target, "rb") as stream, open(destination, "wb") as out:
        _copy(stream, out, limit, "the file")


# --- a zip archive ------------------------------------------------------------------------------
class ZipSource:
    """The regular files of a zip archive, by their normalised names."""

    def __init__(self, archive: str | Path | IO[bytes]):
        try:
            self.zip = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
            raise MediaSourceError(f"the media archive is not a readable zip file ({error})"
                                   ) from None
        self.members: dict[PurePosixPath, zipfile.ZipInfo] = {}
        for info in self.zip.infolist():
            mode = info.external_attr >> 16
            if info.is_dir() or stat.S_ISLNK(mode):
                continue  # a link in an archive could point anywhere once extracted
            name = PurePosixPath(*[p for p in PurePosixPath(info.filename).parts if p != "."])
            self.members.setdefault(name, info)

    def copy(self, ref: str, destination: Path, limit: int) -> None:
        info = self.members.get(_relative(ref))
        if info is None:
            raise MediaSourceError("no such file in the media archive")
        if info.file_size > limit:
            raise MediaSourceError(f"the file is {info.file_size:,} bytes, over the limit of "
                                   f"{limit:,} bytes (EVALSTUDY_MEDIA_MAX_BYTES)")
        try:
            with self.zip.open(info) as stream, open(destination, "wb") as out:
                _copy(stream, out, limit, "the file")
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as error:
            raise MediaSourceError(f"the archive member cannot be read ({error})") from None

    def close(self) -> None:
        self.zip.close()


# --- https URLs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class UrlPolicy:
    """Which URLs media may be fetched from (settings EVALSTUDY_MEDIA_URL_HOSTS, _FETCH_TIMEOUT,
    _MAX_BYTES, _URL_CA_FILE for a private certificate authority; `allow_loopback`
    (EVALSTUDY_MEDIA_URL_ALLOW_LOOPBACK) is for tests, which serve files from 127.0.0.1)."""

    allowed_hosts: frozenset[str] = frozenset()
    max_bytes: int = 200 * 1024 * 1024
    timeout_s: float = 60.0
    allow_loopback: bool = False
    ca_file: str | None = None


def address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address is not public (None when it is). An IPv6 address standing for an IPv4
    one (mapped, 6to4, NAT64) is judged by the IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in ipaddress.ip_network("64:ff9b::/96"):
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return address_problem(inner)
    if address.is_loopback:
        return "a loopback address"
    if address.is_private:
        return "a private address"
    if address.is_link_local or address.is_multicast or address.is_unspecified:
        return "a special-purpose address"
    if not address.is_global:
        return "an address that is not publicly routable"
    return None


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """Connects to the address that was checked, whatever the host name resolves to by then
    (DNS rebinding), and checks the certificate against the host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float,
                 context: ssl.SSLContext):
        super().__init__(host, port, timeout=timeout, context=context)
        self.address, self.tls = address, context

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)


def fetch_url(url: str, destination: Path, policy: UrlPolicy) -> None:
    """Download `url` to `destination` under `policy` (see the module's docstring);
    MediaSourceError saying why not."""
    problem = ref_problem(url)
    if problem is not None or not is_url(url):
        raise MediaSourceError(problem or "not a URL")
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host not in policy.allowed_hosts:
        raise MediaSourceError(f"host {host!r} is not on the media hosts allow-list "
                               "(EVALSTUDY_MEDIA_URL_HOSTS)")
    port = parts.port or 443
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise MediaSourceError(f"host {host!r} does not resolve") from None
    addresses = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        refusal = address_problem(address)
        if refusal is not None and not (policy.allow_loopback and address.is_loopback):
            # A name with one forbidden address is refused whole: no fallback order reaches it.
            raise MediaSourceError(f"host {host!r} resolves to {refusal}, which media imports "
                                   "may not reach")
        addresses.append(str(address))
    deadline = time.monotonic() + policy.timeout_s
    context = ssl.create_default_context(cafile=policy.ca_file)
    connection = _PinnedHTTPSConnection(host, port, addresses[0], policy.timeout_s, context)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", target, headers={
            "User-Agent": "evalstudy-media-import", "Accept": "audio/*, video/*",
            "Accept-Encoding": "identity"})
        response = connection.getresponse()
        if 300 <= response.status < 400:
            raise MediaSourceError(f"the server answered a redirect ({response.status}); "
                                   "redirects are not followed: give the file's own URL")
        if response.status != 200:
            raise MediaSourceError(f"the server answered HTTP {response.status} "
                                   f"{response.reason}")
        declared = response.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > policy.max_bytes:
            raise MediaSourceError(f"the file is {int(declared):,} bytes, over the limit of "
                                   f"{policy.max_bytes:,} bytes (EVALSTUDY_MEDIA_MAX_BYTES)")
        written = 0
        with open(destination, "wb") as out:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise MediaSourceError(f"the download took longer than "
                                           f"{policy.timeout_s:g} s "
                                           "(EVALSTUDY_MEDIA_FETCH_TIMEOUT)")
                if connection.sock is not None:
                    connection.sock.settimeout(min(remaining, policy.timeout_s))
                block = response.read(_CHUNK)
                if not block:
                    break
                written += len(block)
                if written > policy.max_bytes:
                    raise MediaSourceError(f"the file is over the limit of "
                                           f"{policy.max_bytes:,} bytes "
                                           "(EVALSTUDY_MEDIA_MAX_BYTES)")
                out.write(block)
    except (OSError, http.client.HTTPException) as error:
        reason = "timed out" if isinstance(error, TimeoutError) else type(error).__name__
        raise MediaSourceError(f"the download failed ({reason})") from None
    finally:
        connection.close()


# --- every source an import may use -------------------------------------------------------------
@dataclass
class MediaSource:
    """Where the media references of one import are read from: an uploaded archive (first), a
    media directory, and URLs under `urls`. A source without a directory or archive takes no
    paths; one without allowed hosts takes no URLs."""

    directory: Path | None = None
    archive: ZipSource | None = None
    urls: UrlPolicy = field(default_factory=UrlPolicy)
    max_bytes: int = 200 * 1024 * 1024

    def copy(self, ref: str, destination: Path) -> None:
        """Copy what `ref` names to `destination`; MediaSourceError saying why not."""
        if is_url(ref):
            fetch_url(ref, destination, self.urls)
        elif self.archive is not None:
            self.archive.copy(ref, destination, self.max_bytes)
        elif self.directory is not None:
            copy_from_directory(self.directory, ref, destination, self.max_bytes)
        else:
            raise MediaSourceError("no media archive was uploaded and no media directory is "
                                   "configured (EVALSTUDY_MEDIA_IMPORT_ROOT): upload the files "
                                   "as a zip archive with the item file")

    def close(self) -> None:
        if self.archive is not None:
            self.archive.close()


def copy_stream(stream: IO[bytes], destination: Path, limit: int) -> None:
    """An uploaded file (admin, API) to `destination`, at most `limit` bytes."""
    with open(destination, "wb") as out:
        _copy(stream, out, limit, "the file")
