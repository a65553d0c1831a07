"""What each GPU vendor calls its things: the one home of the names gputop recognises.

A backend (sources/backends.py) reads a vendor's cards; the words below are that vendor's,
needed also where no backend is loaded: the reservation store tells a card's file from a
MIG device's by its UUID prefix (actions/), ``--gpus`` parses UUIDs and ``gputop run``
exports the visible-devices variable (commands/), the device scan looks for the device
nodes (sources/devscan.py).  So they live here, below every layer that needs them, and
each of those calls the functions here instead of spelling the literals.

A backend of a new vendor adds its ``Vocabulary`` to ``VOCABULARIES``; a backend of a
vendor already here (nvidia-smi's text, the simulator) names the existing one.

Stdlib-only: shipped to remote hosts inside the SSH probe.
"""

from __future__ import annotations

from gputop.records import Record, record


@record(frozen=True, slots=True)
class Vocabulary(Record):
    """One vendor's names for its cards, their partitions and their device files."""

    vendor: str
    # The variable a process reads to know which cards it may use (its first entry is the
    # one gputop sets), and the others of the same meaning the detail view shows.
    visible_devices: tuple[str, ...]
    card_prefix: str  # a whole card's UUID starts so
    partition_prefix: str | None  # a partition's (MIG device's) UUID; None: none
    device_nodes: tuple[str, ...]  # path prefixes of the device files a GPU process holds
    # Variables set beside visible_devices so that indexes mean what the snapshot says.
    device_order: tuple[tuple[str, str], ...] = ()


NVIDIA = Vocabulary(
    vendor="nvidia",
    visible_devices=("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
    card_prefix="GPU-",
    partition_prefix="MIG-",
    device_nodes=("/dev/nvidia",),
    device_order=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
)

VOCABULARIES: tuple[Vocabulary, ...] = (NVIDIA,)

# Where one name must be chosen (gputop run's environment, the messages that name it):
# the first vendor's.  A host has one vendor's cards; gputop sets every vendor's variable.
PRIMARY = VOCABULARIES[0]
VISIBLE_DEVICES_NAME = PRIMARY.visible_devices[0]  # what help, output and messages name

CARD_PREFIXES = tuple(v.card_prefix for v in VOCABULARIES)
PARTITION_PREFIXES = tuple(v.partition_prefix for v in VOCABULARIES if v.partition_prefix)
UUID_PREFIXES = CARD_PREFIXES + PARTITION_PREFIXES
DEVICE_NODES = tuple(dict.fromkeys(p for v in VOCABULARIES for p in v.device_nodes))
VISIBLE_DEVICES = tuple(dict.fromkeys(n for v in VOCABULARIES for n in v.visible_devices))
ORDER_VARIABLES = tuple(dict.fromkeys(n for v in VOCABULARIES for n, _ in v.device_order))


def is_card_uuid(text: str) -> bool:
    """Whether ``text`` is spelled as a whole card's UUID (of any vendor here)."""
    return text.startswith(CARD_PREFIXES)


def is_partition_uuid(text: str) -> bool:
    """Whether ``text`` is spelled as a partition's (MIG device's) UUID."""
    return text.startswith(PARTITION_PREFIXES)


def is_device_uuid(text: str) -> bool:
    """A card's or a partition's UUID."""
    return text.startswith(UUID_PREFIXES)


def visible_devices_env(devices: str) -> dict[str, str]:
    """The environment that gives a process ``devices`` (indexes or UUIDs, comma-joined):
    each vendor's first variable, and the order variables that make indexes the
    snapshot's."""
    env = {v.visible_devices[0]: devices for v in VOCABULARIES}
    for v in VOCABULARIES:
        env.update(v.device_order)
    return env
