"""The masking policy: secret keys anywhere in the dotted path, URL passwords in any value,
override strings and YAML text, user patterns."""

from __future__ import annotations

import pytest
import yaml

from graphssl.tracking.secrets import MASK, Masker


@pytest.mark.parametrize(
    "key",
    [
        "logger.api_key",
        "credentials.pass",
        "db.auth_header",
        "token",
        "x.secret",
        "a.password",
        "s3.access_key",
        "svc.key",
        "credentials.user",
    ],
)
def test_secret_keys_are_masked(key: str) -> None:
    assert Masker().value(key, "hunter2") == MASK


@pytest.mark.parametrize("key", ["trainer.epochs", "monkey", "keyboard", "model.passes"])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert Masker().value(key, "x") == "x"


def test_url_passwords_masked_in_any_value_and_text() -> None:
    m = Masker()
    assert (
        m.value("db.dsn", "mysql+pymysql://u:p%40ss@h:3306/d") == "mysql+pymysql://u:***@h:3306/d"
    )
    assert (
        m.text("see https://a:b@c.org/x and ftp://c.org")
        == "see https://a:***@c.org/x and ftp://c.org"
    )


def test_overrides_and_known_values_masked_in_text() -> None:
    m = Masker.from_config({"db": {"token": "Bearer abc-123"}, "x": 1})
    text = "+db.token='Bearer abc-123' x=1,+api_key=zz9 note: Bearer abc-123"
    out = m.text(text)
    assert "abc-123" not in out and "zz9" not in out and "x=1" in out


def test_user_patterns_and_yaml() -> None:
    m = Masker.from_config({"logger": {"secret_patterns": ["myid$"]}, "svc": {"myid": "ID-77"}})
    out = m.yaml_text(
        yaml.safe_dump({"svc": {"myid": "ID-77"}, "logger": {"secret_patterns": ["myid$"]}})
    )
    assert "ID-77" not in out and yaml.safe_load(out)["logger"]["secret_patterns"] == ["myid$"]
    with pytest.raises(ValueError, match=r"logger\.secret_patterns"):
        Masker(["("])


def test_unchanged_yaml_keeps_its_text() -> None:
    text = "a: 1.0e-05\nb: [1, 2]\n"
    assert Masker().yaml_text(text) == text
