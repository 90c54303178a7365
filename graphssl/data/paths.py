"""Where datasets live, how their raw files become a PyG root, and downloads.

The data folder is only read: nothing is written or created in it. A DataModule names the raw
files it needs. When they are all there, they are copied into graphssl's cache
(:func:`graphssl.data.cache.processed_root`), where PyG writes its ``processed/`` files. When
some are missing and downloads are allowed (``paths.download``, the ``download`` argument), PyG
or OGB fetches them from the dataset's URL into ``<cache_dir>/downloads/`` under a connection
timeout, so an offline machine fails within seconds naming the dataset, the folder and the URL.
With downloads off, a missing file fails at once with the dataset, the folder searched and the
files expected.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from graphssl.data.cache import processed_root

DATA_ENV = "GRAPHSSL_DATA_DIR"

#: exceptions that mean "the network failed" while a loader downloads
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    urllib.error.URLError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    socket.gaierror,
)


class DatasetNotFoundError(FileNotFoundError):
    """Raw files of a dataset are missing and cannot be downloaded here."""


class DatasetDownloadError(DatasetNotFoundError):
    """Raw files of a dataset are missing and downloading them failed (offline, unreachable)."""


class DatasetCorruptError(ValueError):
    """Raw files exist but cannot be read."""


class GraphFileError(ValueError):
    """A user's graph file cannot be used; the message names the file, the array, the
    offending value and what was expected."""


class UnsafePathError(ValueError):
    """A configured name that becomes a path would leave the folder it belongs in."""


def inside_root(root: Path, name: str, key: str) -> Path:
    """``root / name``, refused when it resolves outside ``root``.

    Checked before anything is created: a name with ``..`` parts, an absolute path or a
    symbolic link that leads out of ``root`` raises :class:`UnsafePathError` naming the config
    key, the value and the folder.

    Args:
        root: the folder the name belongs in (it need not exist yet).
        name: the configured name (a dataset name, a file name).
        key: the config key that set ``name``, for the message.
    """
    base = Path(os.path.abspath(root)).resolve()
    target = (base / name).resolve()
    if target != base and base not in target.parents:
        raise UnsafePathError(
            f"{key}={name!r} would leave its folder {root} (it resolves to {target}); expected "
            f"a name inside that folder: no '..' parts, no absolute path, no link out of it"
        )
    return target


def default_data_dir() -> Path:
    """``$GRAPHSSL_DATA_DIR`` if set, else ``data/`` in the current working directory."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path.cwd() / "data"


def missing_files(folder: Path, files: Sequence[str]) -> list[str]:
    """The entries of ``files`` (relative to ``folder``) that are not regular files there."""
    return [f for f in files if not (folder / f).is_file()]


def _shown(missing: Sequence[str], total: int) -> str:
    if not total:
        return "its raw files"
    listed = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
    return f"missing {len(missing)} of {total}: {listed}"


def require_raw_files(dataset: str, folder: Path, files: Sequence[str]) -> None:
    """Raise :class:`DatasetNotFoundError` unless every file in ``files`` exists in ``folder``."""
    missing = missing_files(folder, files)
    if missing:
        raise DatasetNotFoundError(
            f"dataset {dataset!r}: raw files not found in {folder} ({_shown(missing, len(files))})."
            f" graphssl does not download data when downloads are off (paths.download=false) or "
            f"the dataset has no download source: put the files there, or point {DATA_ENV} "
            f"(config key paths.data_dir) at a folder that has them (see README, 'Data')."
        )


def download_dir(source: Path, cache_dir: Path) -> Path:
    """The folder that receives the downloaded raw files of data folder ``source``:
    ``<cache_dir>/downloads/<source name>``. Downloads never go into the data folder, which
    graphssl only reads (it may be shared or read-only); later runs find the files here."""
    return cache_dir / "downloads" / source.name


def _endpoint(url: str) -> tuple[str, int]:
    """The host and port a request for ``url`` connects to (its proxy's, when one applies)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxy = (
        None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(parts.scheme)
    )
    if proxy:
        proxied = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return proxied.hostname or "", proxied.port or 80
    return host, parts.port or (443 if parts.scheme == "https" else 80)


def check_reachable(url: str, timeout: float) -> None:
    """Resolve and connect to ``url``'s host (or its proxy) within ``timeout`` seconds each.

    Raises :class:`TimeoutError` or :class:`OSError` otherwise. The name lookup runs in a
    daemon thread so a hung resolver cannot block longer than ``timeout``.
    """
    host, port = _endpoint(url)
    found: dict[str, object] = {}

    def resolve() -> None:
        try:
            found["addr"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as err:
            found["error"] = err

    thread = threading.Thread(target=resolve, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"looking up {host!r} took longer than {timeout:g} s")
    if "error" in found:
        raise found["error"]  # type: ignore[misc]
    with socket.create_connection((host, port), timeout=timeout):
        pass


def _fsspec_http_config(seconds: float) -> dict[str, object] | None:
    """fsspec's HTTP filesystem settings with aiohttp timeouts (PyG's ``fs.cp`` downloads
    through fsspec, whose default is a 5-minute total timeout), or ``None`` without aiohttp."""
    try:
        import aiohttp
    except ImportError:
        return None
    timeout = aiohttp.ClientTimeout(
        total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
    )
    return {"client_kwargs": {"timeout": timeout}}


def _network_errors() -> tuple[type[BaseException], ...]:
    try:
        import aiohttp
    except ImportError:
        return NETWORK_ERRORS
    return (*NETWORK_ERRORS, aiohttp.ClientError)


@contextmanager
def socket_timeout(seconds: float) -> Iterator[None]:
    """Give every request of a download ``seconds`` for each connect and read: sockets opened
    without an explicit timeout (urllib's, used by PyG's ``download_url`` and OGB) and fsspec's
    HTTP filesystem (PyG's ``fs.cp``). The previous settings are restored afterwards."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    http_conf = _fsspec_http_config(seconds)
    saved: dict[str, object] = {}
    conf: dict[str, object] | None = None
    if http_conf is not None:
        from fsspec.config import conf as fsspec_conf

        conf = fsspec_conf
        for protocol in ("http", "https"):
            saved[protocol] = conf.get(protocol)
            conf[protocol] = {**(conf.get(protocol) or {}), **http_conf}  # type: ignore[dict-item]
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)
        if conf is not None:
            for protocol, value in saved.items():
                if value is None:
                    conf.pop(protocol, None)
                else:
                    conf[protocol] = value


def download_failed(
    dataset: str, folder: Path, missing: Sequence[str], total: int, url: str, err: BaseException
) -> DatasetDownloadError:
    """The error raised when the raw files of ``dataset`` could not be downloaded."""
    return DatasetDownloadError(
        f"dataset {dataset!r}: raw files not found in {folder} ({_shown(missing, total)}) and "
        f"downloading them from {url} failed ({type(err).__name__}: {err}). This machine may be "
        f"offline: put the files there, point {DATA_ENV} (config key paths.data_dir) at a "
        f"folder that has them, raise paths.download_timeout on a slow network, or set "
        f"paths.download=false to never try (see README, 'Data')."
    )


class Downloads:
    """The download policy of one DataModule: where missing raw files go and how long to wait.

    :meth:`root` returns the PyG root for a dataset folder: a cached copy of its files when all
    are there (in the data folder or downloaded by an earlier run); with downloads on and a
    ``url``, a folder of the cache PyG or OGB downloads into, after checking within ``timeout``
    that ``url`` can be reached; otherwise a :class:`DatasetNotFoundError`. Wrap the loader in
    :meth:`guard` so its own requests time out after ``timeout`` seconds and a network failure
    names the dataset, the folder and the URL.

    Args:
        dataset: dataset name for messages.
        enabled: allow downloads (config ``paths.download``).
        timeout: seconds for each connect and read (config ``paths.download_timeout``).
        cache_dir: writable folder for the copies PyG processes and for downloads
            (``<cache_dir>/downloads/``).
    """

    def __init__(self, dataset: str, enabled: bool, timeout: float, cache_dir: Path) -> None:
        if not timeout > 0:
            raise ValueError(f"download_timeout must be > 0 seconds, got {timeout}")
        self.dataset = dataset
        self.enabled = bool(enabled)
        self.timeout = float(timeout)
        self.cache_dir = cache_dir
        self._pending: tuple[Path, list[str], list[str], str] | None = None

    def root(self, source: Path, files: Sequence[str], url: str | None = None) -> Path:
        """A PyG root for ``source`` holding (or about to download) ``files``."""
        missing = missing_files(source, files)
        if not missing:
            return processed_root(source, self.cache_dir)
        fetched = download_dir(source, self.cache_dir)
        if fetched.is_dir() and not missing_files(fetched, files):
            return processed_root(fetched, self.cache_dir)  # downloaded by an earlier run
        if not self.enabled or url is None:
            require_raw_files(self.dataset, source, files)
        assert url is not None
        self._pending = (source, list(missing), list(files), url)
        try:
            check_reachable(url, self.timeout)
        except OSError as err:
            raise download_failed(self.dataset, source, missing, len(files), url, err) from err
        fetched.mkdir(parents=True, exist_ok=True)
        return fetched

    def expect(self, source: Path, url: str) -> None:
        """Report network failures under :meth:`guard` as downloads of ``source`` from
        ``url`` (for loaders that do not list their raw files)."""
        self._pending = (source, [], [], url)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run a loader with the socket timeout; network failures become
        :class:`DatasetDownloadError` (when :meth:`root` arranged a download)."""
        try:
            with socket_timeout(self.timeout) if self.enabled else _nothing():
                yield
        except _network_errors() as err:
            if self._pending is None:
                raise
            source, missing, files, url = self._pending
            raise download_failed(self.dataset, source, missing, len(files), url, err) from err


@contextmanager
def _nothing() -> Iterator[None]:
    yield
