"""``spark-mq dev --acl``'s accounts: fresh secrets that a command line takes as a value, files for the owner only."""

from __future__ import annotations

import argparse
import stat

from spark_mq.acl.dev_accounts import new_secret, write_dev_accounts
from spark_mq.acl.plain_acl import parse_plain_acl


def test_a_secret_never_starts_with_a_dash_so_a_command_line_takes_it():
    """One urlsafe token in 64 starts with '-': 2,000 draws would meet one with near certainty."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--secret-key")
    drawn = {new_secret() for _ in range(2000)}
    assert len(drawn) == 2000
    assert not [s for s in drawn if s.startswith("-")]
    for secret in list(drawn)[:50]:
        assert parser.parse_args(["--secret-key", secret]).secret_key == secret


def test_the_files_hold_the_returned_secrets_for_the_owner_only(tmp_path):
    accounts = write_dev_accounts(tmp_path / "acl")
    for path in (accounts.acl_file, accounts.credentials_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    acl = parse_plain_acl(accounts.acl_file.read_text(), str(accounts.acl_file))
    keys = {a.access_key: a.secret_key for a in acl.accounts.values()}
    assert keys == {accounts.admin_access_key: accounts.admin_secret, accounts.user_access_key: accounts.user_secret}
    assert f"SPARK_MQ_SECRET_KEY={accounts.user_secret}\n" in accounts.credentials_file.read_text()
