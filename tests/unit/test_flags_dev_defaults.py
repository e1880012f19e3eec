"""`make run`'s example flag tokens: used only when none are configured and the server binds
to loopback (the example's tokens are public), and the example itself parses."""

from __future__ import annotations

import pytest

from headwater.dev.server import EXAMPLE_FLAG_TOKENS, default_flag_tokens
from headwater.flags.principals import Kind, Permission
from headwater.flags.tokens import load_tokens
from headwater.settings import Settings


def test_the_example_tokens_parse_into_the_documented_principals() -> None:
    store = load_tokens(str(EXAMPLE_FLAG_TOKENS))
    rw = store.authenticate("dev-acme-flags-rw-0000000000000000")
    ro = store.authenticate("dev-acme-flags-read-000000000000000")
    admin = store.authenticate("dev-flags-superadmin-00000000000000")
    assert rw is not None and rw.may(Permission.WRITE, "acme", "billing")
    assert ro is not None and not ro.may(Permission.WRITE, "acme", "billing")
    assert ro.may(Permission.READ, "acme", "billing") and not ro.may(Permission.READ, "x", "b")
    assert admin is not None and admin.kind is Kind.SUPERADMIN
    assert admin.may(Permission.WRITE, "other", "ns")


def test_loopback_dev_server_uses_the_example_unless_tokens_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setenv first, so the variable's original state is what the teardown restores
    # (default_flag_tokens writes os.environ itself)
    monkeypatch.setenv("HEADWATER_FLAG_TOKENS", "")
    monkeypatch.delenv("HEADWATER_FLAG_TOKENS")
    assert default_flag_tokens(Settings(host="127.0.0.1")) == str(EXAMPLE_FLAG_TOKENS)
    assert Settings.from_env().flags.tokens_raw == str(EXAMPLE_FLAG_TOKENS)
    for explicit in ("", '[{"token": "x"}]'):  # set, even empty: left alone
        monkeypatch.setenv("HEADWATER_FLAG_TOKENS", explicit)
        assert default_flag_tokens(Settings(host="127.0.0.1")) is None
        assert Settings.from_env().flags.tokens_raw == explicit


def test_a_non_loopback_bind_never_gets_the_public_example_tokens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # setenv first, so the variable's original state is what the teardown restores
    # (default_flag_tokens writes os.environ itself)
    monkeypatch.setenv("HEADWATER_FLAG_TOKENS", "")
    monkeypatch.delenv("HEADWATER_FLAG_TOKENS")
    assert default_flag_tokens(Settings(host="0.0.0.0")) is None
    assert Settings.from_env().flags.tokens_raw == ""
