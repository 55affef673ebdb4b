"""Keychains for tests: keyring backends that keep passwords in memory, one of them refusing writes
(a locked keychain). Installed with `use_keychain`, so no test reaches the real system keychain."""

import contextlib

import keyring
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError, PasswordSetError


class MemoryKeychain(KeyringBackend):
    priority = 1  # type: ignore[assignment]  # a real backend, as keyring ranks them

    def __init__(self):
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.passwords.get((service, username))

    def set_password(self, service, username, password):
        self.passwords[(service, username)] = password

    def delete_password(self, service, username):
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


class LockedKeychain(MemoryKeychain):
    """Reads work, writes are refused: what a locked login keychain does."""

    def set_password(self, service, username, password):
        raise PasswordSetError("the keychain is locked")


@contextlib.contextmanager
def use_keychain(monkeypatch, backend):
    monkeypatch.delenv("CHINWAG_KEYRING", raising=False)
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)
