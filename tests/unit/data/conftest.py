"""Fixtures of the data tests."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail any name lookup or connection the test makes; returns the hosts that were tried."""
    tried: list[str] = []

    def refuse(host: object, *args: object, **kwargs: object) -> None:
        tried.append(str(host))
        raise AssertionError(f"the test tried to reach {host!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried
