"""Who acts: the user that kills and reservations on a host run as.

One answer per source, declared by its feed (``Feed.identity``): this machine's
effective user, the simulated scenario's user in --demo, the SSH login on a remote host.
What it decides is only what gputop offers; the kernel (or the remote probe) decides
what actually happens.
"""

from __future__ import annotations

import os
import pwd

from gputop.records import Record, record


@record(frozen=True, slots=True)
class Identity(Record):
    user: str | None  # login name; None while not known (an SSH host not yet connected)
    uid: int | None = None  # known for this machine only
    is_root: bool = False
    # --demo: the simulated processes belong to the scenario's user, but the private
    # reservation store is real files, which the real user owns.
    reserves_as: str | None = None

    @property
    def reservation_owner(self) -> str | None:
        """The name the reservation store records as the owner of what this user reserves."""
        return self.reserves_as or self.user

    @property
    def me(self) -> str | int | None:
        """What ownership is matched on: the uid where known (names can be reused), else
        the name."""
        return self.uid if self.uid is not None else self.user


def local_identity() -> Identity:
    """This process's effective user."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (containers)
        name = f"uid {uid}"
    return Identity(user=name, uid=uid, is_root=uid == 0)


def named_identity(user: str | None) -> Identity:
    """A user known only by name (the SSH login, the simulated user)."""
    return Identity(user=user, is_root=user == "root")
