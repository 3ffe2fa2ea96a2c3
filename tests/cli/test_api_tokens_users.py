"""`gpuslo api-tokens` (and its old name `gpuslo tokens`) and `gpuslo users` against a real SQLite database:
tokens shown once, hashes stored, audited."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import text

from gpuslo.cli.main import main
from gpuslo.engine.access import check_password
from gpuslo.engine.store import audit, credentials
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.engine.store.db import Database


def _run(url: str, *args: str, input: str | None = None):
    result = CliRunner().invoke(main, list(args), env={"GPUSLO_DATABASE_URL": url}, input=input)
    return result


def test_api_tokens_create_list_revoke(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'gpuslo.db'}"
    made = _run(url, "api-tokens", "create", "--name", "probes", "--scope", "ingest", "--scope", "read")
    assert made.exit_code == 0, made.output
    clear = made.stdout.strip().splitlines()[-1]
    assert clear.startswith("gps_") and len(clear) > 40
    listed = _run(url, "api-tokens", "list")
    assert "probes" in listed.stdout and "ingest,read" in listed.stdout and clear not in listed.stdout
    assert _run(url, "api-tokens", "revoke", "1").exit_code == 0
    again = _run(url, "api-tokens", "revoke", "1")
    assert again.exit_code == 2 and "already revoked" in again.output
    database = Database(url)
    try:
        with database.engine.connect() as connection:
            stored = [str(cell) for table in ("api_tokens", "audit_log")
                      for row in connection.execute(text(f"SELECT * FROM {table}")) for cell in row]
        assert hashlib.sha256(clear.encode()).hexdigest() in stored and not any(clear in c for c in stored)
        with database.session(readonly=True) as session:
            assert credentials.find_token(session, clear) is None  # revoked
            rows = list(audit.iter_audit(session, AuditFilter(target="token:1")))
        assert [r.action for r in rows] == ["token.create", "token.revoke"]
        assert rows[0].actor.startswith("cli") and rows[1].after["revoked_at"]
    finally:
        database.dispose()


def test_the_old_name_tokens_still_works_hidden_with_a_deprecation_note(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'gpuslo.db'}"
    made = _run(url, "tokens", "create", "--name", "old-script", "--scope", "ingest")
    assert made.exit_code == 0, made.output
    note = "warning: `gpuslo tokens` is deprecated and will be removed in the next release; use `gpuslo api-tokens`"
    assert made.stderr.startswith(note) and note not in made.stdout
    assert made.stdout.strip().startswith("gps_")  # the token alone on stdout, as before: scripts keep working
    listed = _run(url, "tokens", "list")
    assert "old-script" in listed.stdout and listed.stderr.startswith(note)
    assert "old-script" in _run(url, "api-tokens", "list").stdout
    help_text = _run(url, "--help").stdout
    assert "api-tokens" in help_text and not re.search(r"^\s+tokens\s", help_text, re.MULTILINE)


def test_users_create_from_prompt_and_file_then_change(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'gpuslo.db'}"
    prompted = _run(url, "users", "create", "alice", "--role", "admin", input="long password 1\nlong password 1\n")
    assert prompted.exit_code == 0, prompted.output
    secret = tmp_path / "pw"
    secret.write_text("short\n")
    refused = _run(url, "users", "create", "bob", "--role", "viewer", "--password-file", str(secret))
    assert refused.exit_code == 2 and "at least 10 characters" in refused.output
    secret.write_text("another long one\n")
    assert _run(url, "users", "create", "bob", "--role", "viewer", "--password-file", str(secret)).exit_code == 0
    assert _run(url, "users", "set-role", "bob", "operator").exit_code == 0
    assert _run(url, "users", "disable", "bob").exit_code == 0
    listed = _run(url, "users", "list").stdout
    assert "alice\tadmin" in listed and "bob\toperator" in listed and "disabled" in listed
    database = Database(url)
    try:
        with database.session(readonly=True) as session:
            bob = credentials.get_user(session, "bob")
            rows = list(audit.iter_audit(session, AuditFilter(target="user:bob")))
        assert check_password(bob.password_hash, "another long one") and "another long one" not in bob.password_hash
        assert [r.action for r in rows] == ["user.create", "user.set_role", "user.disable"]
        assert (rows[1].before["role"], rows[1].after["role"]) == ("viewer", "operator")
        assert all("password_hash" not in (r.after or {}) for r in rows)
    finally:
        database.dispose()
