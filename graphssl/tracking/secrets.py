"""Secrets never reach the store: one masking policy for params, tags and config artifacts.

A value is masked (``***``) when its dotted key matches a secret pattern
(:data:`DEFAULT_SECRET_PATTERNS`, plus the regular expressions a user lists in
``logger.secret_patterns``), anywhere in the key (``logger.api_key``, ``credentials.pass``,
``db.auth_header``); the password of a URL (``scheme://user:pass@host``) is masked in any
value (``scheme://user:***@host``). The same policy is applied to the override string (tag
``graphssl.overrides``), ``config.yaml`` and Hydra's ``.hydra/*.yaml`` files, so a secret given
on the command line appears nowhere in the run. Nothing is read from the environment.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from graphssl.tracking.run import RunTracker

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "MASK",
    "PATTERNS_KEY",
    "Masker",
    "log_run_config",
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
#: ``scheme://user:password@`` (the password is group 2)
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.\-]*://[^\s:/@]*:)([^\s@/]+)(@)", re.I)
#: ``key=value`` inside an override string (space- or comma-separated)
_OVERRIDE = re.compile(r"(?:(?<=^)|(?<=[\s,]))([+~]*[\w.\-/]+)=([^\s,]*)")
#: secret values shorter than this are masked by key only, never searched in free text
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
        values = {str(v) for v in secret_values if len(str(v)) >= _MIN_SEARCHED}
        self._values = sorted(values, key=len, reverse=True)

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
        """``text`` with URL passwords, secret ``key=value`` overrides and known secret values
        masked."""
        for secret in self._values:  # first: a value with spaces is one secret
            text = text.replace(secret, MASK)
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
        text = _OVERRIDE.sub(
            lambda m: (
                f"{m.group(1)}={MASK}"
                if self.is_secret_key(m.group(1)) and m.group(2)
                else m.group(0)
            ),
            text,
        )
        return text

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
        """YAML ``text`` with secrets masked (structurally; as plain text if it does not
        parse)."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return self.text(text)
        if not isinstance(data, Mapping | list):
            return self.text(text)
        masked = self.tree(data)
        if masked == data and self.text(text) == text:
            return text  # nothing secret: the file as it was written
        return self.text(yaml.safe_dump(masked, sort_keys=False))


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in node.items():
            out += _leaves(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(node, list):
        return [leaf for v in node for leaf in _leaves(v, prefix)]
    return [(prefix, node)]


def log_run_config(
    tracker: RunTracker,
    masker: Masker,
    params: Mapping[str, Any],
    config_yaml: str,
    hydra_dir: Path | None,
) -> None:
    """Log a run's params, ``config.yaml`` and ``.hydra/*`` files, with secrets masked."""
    tracker.log_params(masker.mapping(params))
    tracker.log_text(masker.yaml_text(config_yaml), "config.yaml")
    if hydra_dir is None or not hydra_dir.is_dir():
        return
    with tempfile.TemporaryDirectory(prefix="graphssl-hydra-") as tmp:
        for src in sorted(p for p in hydra_dir.rglob("*") if p.is_file()):
            dest = Path(tmp) / src.relative_to(hydra_dir)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                text = src.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # only Hydra's YAML files are expected here; anything else stays out
            masked = (
                masker.yaml_text(text) if src.suffix in (".yaml", ".yml") else masker.text(text)
            )
            dest.write_text(masked, encoding="utf-8")
        tracker.log_artifacts(tmp, ".hydra")
