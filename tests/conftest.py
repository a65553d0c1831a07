"""Shared fixtures: the real-sshd loopback hosts live in tests/sshd.py."""

from sshd import sshd_factory, sshd_hosts

__all__ = ["sshd_factory", "sshd_hosts"]
