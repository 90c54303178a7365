"""Secrets never reach the store: one masking policy for params, tags and config artifacts.

A value is masked (``***``) when its dotted key matches a secret pattern
(:data:`DEFAULT_SECRET_PATTERNS`, plus the regular expressions a user lists in
``logger.secret_patterns``), anywhere in the key (``logger.api_key``, ``credentials.pass``,
``db.auth_header``), or when the whole value equals a secret value of the config. In any value
only the secret part is masked: the password of a URL (``scheme://user:***@host``, any
character but ``@`` and whitespace), secret query parameters (``?access_token=***``,
``&key=***``), the credential of an ``Authorization:`` header or a ``Bearer`` token, and the
value of a secret ``key=value`` override. A secret is never searched for as a substring, so a
short one (``db.password=data``) leaves ``/shared/data`` and the key ``dataset`` intact, and a
masked YAML file parses to the same keys.

The same policy is applied to the override string (tag ``graphssl.overrides``), ``config.yaml``
and the run folder's Hydra files: ``.hydra/*.yaml`` are rewritten masked in place and
``.hydra/config.pickle`` is rebuilt from them (:func:`mask_hydra_dir`), so a secret given on the
command line appears nowhere in the run. Nothing is read from the environment.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "HYDRA_PICKLE",
    "MASK",
    "PATTERNS_KEY",
    "Masker",
    "mask_hydra_dir",
    "mask_yaml_file",
    "write_config_pickle",
]

MASK = "***"
#: the config key listing a user's extra secret-key patterns
PATTERNS_KEY = "logger.secret_patterns"
#: regular expressions (case-insensitive) searched in a dotted key, e.g. ``logger.api_key``
DEFAULT_SECRET_PATTERNS: tuple[str, ...] = (
    r"pass(word|wd|phrase)?([._-]|$)",
    r"pwd",
    r"secret",
    r"token",
    r"api[_-]?key",
    r"access[_-]?key",
    r"private[_-]?key",
    r"auth",
    r"credential",
    r"cookie",
    r"(^|[._/-])key$",
)
#: ``scheme://user:password@``: the password (group 3) may hold any character but whitespace
#: and ``@`` (``postgresql://u:pear/71@db/x``), and never runs into a next URL; the colons may
#: be escaped, as Hydra writes a multirun job's overrides (``postgresql\://u\:pw@db``)
_URL_PASSWORD = re.compile(
    r"([a-z][a-z0-9+.\-]*\\?://([^\s:/@?#\\]*)\\?:)((?:(?!\\?://)[^\s@])+)(@)", re.I
)
#: ``host:port/...`` of a URL without a password whose path or query holds an ``@``
#: (``http://example.org:8080/p?to=a@b``): the "user" is a host name and a port follows
_HOST_PORT = re.compile(r"\d{1,5}[/?#]")
#: ``?name=value`` / ``&name=value`` in a URL (the value, group 3, is masked for secret names)
_QUERY = re.compile(r"([?&;]([\w.~%-]+)=)([^&#\s'\",]+)")
#: query parameter names that carry a credential without a secret-looking name
_QUERY_SECRETS = frozenset({"sig", "signature", "x-amz-signature"})
#: the credential of an ``Authorization:`` header value (any scheme) and of ``Bearer <token>``
_AUTH_HEADER = re.compile(
    r"((?:proxy-)?authorization\s*[:=]\s*(?:(?:bearer|basic|digest|token|negotiate)\s+)?)"
    r"([^\s'\",]+)",
    re.I,
)
_BEARER = re.compile(r"(\bbearer\s+)([A-Za-z0-9\-._~+/]+=*)", re.I)
#: ``key=value`` inside an override string (space- or comma-separated; value quoted or not)
_OVERRIDE = re.compile(r"(?:(?<=^)|(?<=[\s,\[]))([+~]*[\w.\-/@]+)=('[^']*'|\"[^\"]*\"|[^\s,\]]*)")
#: secret values shorter than this are masked by key only: a copy of a short secret under
#: another key (``data``, ``true``) is more likely a coincidence than a leak
_MIN_SEARCHED = 4


class Masker:
    """Masks secrets in params, tags and text, by key pattern and by URL password.

    Args:
        patterns: extra regular expressions for secret keys (``logger.secret_patterns``).
        secret_values: values known to be secret (collected from a config by
            :meth:`from_config`); each is also replaced wherever it appears in text.
    """

    def __init__(self, patterns: Iterable[str] = (), secret_values: Iterable[str] = ()) -> None:
        all_patterns = [*DEFAULT_SECRET_PATTERNS, *(str(p) for p in patterns)]
        try:
            self._key = re.compile("|".join(f"(?:{p})" for p in all_patterns), re.I)
        except re.error as err:
            raise ValueError(
                f"logger.secret_patterns={list(patterns)!r} holds an invalid regular "
                f"expression ({err}); expected Python regular expressions matched against "
                f"dotted config keys, e.g. ['my_service\\.id']"
            ) from err
        self._values = frozenset(
            str(v) for v in secret_values if len(str(v)) >= _MIN_SEARCHED and str(v) != MASK
        )

    @classmethod
    def from_config(cls, cfg: Any) -> Masker:
        """A masker with the config's ``logger.secret_patterns`` that knows its secret values."""
        from omegaconf import DictConfig, OmegaConf

        container = (
            OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
        )
        logger = container.get("logger") if isinstance(container, Mapping) else None
        patterns = (logger or {}).get(PATTERNS_KEY.split(".")[-1]) or []
        if isinstance(patterns, str):
            patterns = [patterns]
        probe = cls(patterns)
        found: list[str] = []
        for key, value in _leaves(container):
            if value is None or value == "":
                continue
            if probe.is_secret_key(key):
                found.append(str(value))
            elif isinstance(value, str):
                found += [m.group(2) for m in _URL_PASSWORD.finditer(value)]
        return cls(patterns, found)

    def is_secret_key(self, key: str) -> bool:
        """``True`` when dotted ``key`` names a secret."""
        key = key.lstrip("+~")
        if key.rsplit(".", 1)[-1] == PATTERNS_KEY.rsplit(".", 1)[-1]:
            return False  # the patterns themselves are not secrets
        return bool(self._key.search(key))

    def value(self, key: str, value: Any) -> Any:
        """``value`` masked when ``key`` is secret; URL passwords masked in strings."""
        if value is None or value == "":
            return value
        if self.is_secret_key(key):
            return MASK
        return self.text(value) if isinstance(value, str) else value

    def text(self, text: str) -> str:
        """``text`` with the secret parts masked: values of secret ``key=value`` overrides, URL
        passwords, secret query parameters, ``Authorization``/``Bearer`` credentials, and the
        whole text when it is a known secret value.

        Only those parts are replaced: a secret that happens to occur inside another value
        (``data`` in ``/shared/data``) or inside a key is left alone.
        """
        if text in self._values:
            return MASK
        text = _OVERRIDE.sub(
            lambda m: (
                f"{m.group(1)}={MASK}"
                if m.group(2) and self.is_secret_key(m.group(1))
                else m.group(0)
            ),
            text,
        )
        text = _URL_PASSWORD.sub(self._url_password, text)
        text = _QUERY.sub(
            lambda m: (
                f"{m.group(1)}{MASK}"
                if self.is_secret_key(m.group(2)) or m.group(2).lower() in _QUERY_SECRETS
                else m.group(0)
            ),
            text,
        )
        text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{MASK}", text)
        return _BEARER.sub(lambda m: f"{m.group(1)}{MASK}", text)

    @staticmethod
    def _url_password(m: re.Match[str]) -> str:
        user, password = m.group(2), m.group(3)
        host_like = "." in user or user.lower() == "localhost"
        if password == MASK or (host_like and _HOST_PORT.match(password)):
            return m.group(0)
        return f"{m.group(1)}{MASK}{m.group(4)}"

    def mapping(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of flat ``data`` (params, tags) with secret values masked."""
        return {k: self.value(k, v) for k, v in data.items()}

    def tree(self, node: Any, prefix: str = "") -> Any:
        """A copy of a nested YAML/config tree with secrets masked by key path and in text."""
        if isinstance(node, Mapping):
            return {k: self.tree(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.tree(v, prefix) for v in node]
        return self.value(prefix, node)

    def yaml_text(self, text: str) -> str:
        """YAML ``text`` with secrets masked value by value (the result parses to the same
        keys); text that does not parse as YAML is masked as plain text."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return self.text(text)
        if not isinstance(data, Mapping | list):
            return self.text(text) if isinstance(data, str) else text
        masked = self.tree(data)
        if masked == data:
            return text  # nothing secret: the file as it was written
        return str(yaml.safe_dump(masked, sort_keys=False, allow_unicode=True))


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in node.items():
            out += _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(node, list):
        return [leaf for v in node for leaf in _leaves(v, prefix)]
    return [(prefix, node)]


#: the pickled job config (``--experimental-rerun``), rebuilt from the masked YAML files
HYDRA_PICKLE = "config.pickle"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_config_pickle(folder: Path) -> Path:
    """Write ``folder/config.pickle`` (the whole job config, ``hydra`` node included, as Hydra's
    ``--experimental-rerun`` reads it) from ``folder``'s ``config.yaml`` and ``hydra.yaml``."""
    from hydra.conf import HydraConf
    from omegaconf import OmegaConf, open_dict, read_write

    task = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
    hydra = yaml.safe_load((folder / "hydra.yaml").read_text(encoding="utf-8")) or {}
    # Hydra reads the hydra node back as its typed HydraConf (with keys its schema leaves open,
    # such as hydra.env, as Hydra composes it)
    node = OmegaConf.structured(HydraConf)
    OmegaConf.set_struct(node, False)
    node = OmegaConf.merge(node, hydra.get("hydra") or {})
    config = OmegaConf.create({k: v for k, v in task.items() if k != "hydra"})
    with open_dict(config):
        config.hydra = node
    # the job's folders stored as they resolve now, in the job: --experimental-rerun has no
    # ${now:...} resolver, and a sweep job's task reads hydra.sweep.dir
    with contextlib.suppress(Exception), read_write(config.hydra):
        OmegaConf.resolve(config.hydra)
    path = folder / HYDRA_PICKLE
    _write_atomic(path, pickle.dumps(config, protocol=4))
    return path


def mask_yaml_file(path: Path, masker: Masker) -> bool:
    """Rewrite YAML file ``path`` in place with secrets masked; whether it held any."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    masked = masker.yaml_text(text)
    if masked == text:
        return False
    _write_atomic(path, masked.encode("utf-8"))
    return True


def mask_hydra_dir(folder: Path, masker: Masker) -> bool:
    """Rewrite a run's ``.hydra/`` files in place with secrets masked.

    ``config.yaml``, ``hydra.yaml``, ``overrides.yaml`` (and any other YAML file there) are
    rewritten when masking changes them; ``config.pickle``, when present, is then rebuilt from
    the masked YAML files (its bytes are never unpickled here).

    Returns:
        Whether any file held a secret.
    """
    changed = False
    for path in sorted(folder.glob("*.y*ml")):
        changed = mask_yaml_file(path, masker) or changed
    if changed and (folder / HYDRA_PICKLE).is_file():
        if all((folder / name).is_file() for name in ("config.yaml", "hydra.yaml")):
            write_config_pickle(folder)
        else:
            (folder / HYDRA_PICKLE).unlink()  # cannot be rebuilt masked: never left with secrets
    return changed
