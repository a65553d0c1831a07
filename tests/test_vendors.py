"""gputop/vendors.py: the one home of each vendor's names (issue 36.4).

First NVIDIA's names as every caller uses them; then a throwaway vendor added to a copy
of the package (one ``Vocabulary`` in ``VOCABULARIES``) and seen where its names matter:
``--gpus`` takes its UUIDs, the device scan finds holders of its device files, the
detail view's environment keeps its variable, `gputop run` sets it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gputop import vendors

ROOT = Path(__file__).resolve().parent.parent


def test_nvidia_names() -> None:
    assert vendors.is_card_uuid("GPU-0d2f") and not vendors.is_card_uuid("MIG-0d2f")
    assert vendors.is_partition_uuid("MIG-0d2f") and not vendors.is_partition_uuid("GPU-1")
    assert vendors.is_device_uuid("MIG-GPU-0d2f/1/0")  # old drivers' MIG spelling
    assert not vendors.is_device_uuid("index-0") and not vendors.is_device_uuid("0")
    assert vendors.visible_devices_env("0,2") == {"CUDA_VISIBLE_DEVICES": "0,2",
                                                  "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert vendors.VISIBLE_DEVICES_NAME == "CUDA_VISIBLE_DEVICES"
    assert vendors.DEVICE_NODES == ("/dev/nvidia",)


THROWAWAY = '''
THROWAWAY = Vocabulary(vendor="throwaway", visible_devices=("TW_VISIBLE_DEVICES",),
                       card_prefix="TWC-", partition_prefix="TWP-",
                       device_nodes=("/dev/twgpu",))
VOCABULARIES: tuple[Vocabulary, ...] = (NVIDIA, THROWAWAY)
'''

SEEN = r"""
import json, os, sys
from gputop import vendors
from gputop.commands import reserve
from gputop.sources import procfs
from gputop.sources.devscan import scan_device_holders

root = sys.argv[1]
os.makedirs(f"{root}/77/fd")
os.symlink("/dev/twgpu3", f"{root}/77/fd/0")
open(f"{root}/77/cmdline", "wb").write(b"train\0")
holders, _note = scan_device_holders(root)
print(json.dumps({
    "gpus": reserve._gpu_list("TWC-1,TWP-2,GPU-3"),
    "holders": [h["devices"] for h in holders],
    "environment": "TW_VISIBLE_DEVICES" in procfs.ENVIRONMENT_KEYS,
    "run_env": vendors.visible_devices_env("1"),
    "card": vendors.is_card_uuid("TWC-1"), "partition": vendors.is_partition_uuid("TWP-2")
}))
"""


def test_a_throwaway_vendor_is_seen_where_its_names_matter(tmp_path: Path) -> None:
    copy = tmp_path / "pkg"
    shutil.copytree(ROOT / "gputop", copy / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "gputop" / "vendors.py"
    text = module.read_text()
    line = "VOCABULARIES: tuple[Vocabulary, ...] = (NVIDIA,)\n"
    assert line in text
    module.write_text(text.replace(line, THROWAWAY))
    env = dict(os.environ, PYTHONPATH=str(copy))
    # cwd: the copy, so `python -c` (which puts the cwd first) finds it, not the checkout
    done = subprocess.run([sys.executable, "-c", SEEN, str(tmp_path / "proc")], env=env,
                          cwd=copy, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["gpus"] == ["TWC-1", "TWP-2", "GPU-3"]
    assert seen["holders"] == [["/dev/twgpu3"]]
    assert seen["environment"] is True
    assert seen["run_env"] == {"CUDA_VISIBLE_DEVICES": "1", "TW_VISIBLE_DEVICES": "1",
                               "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert seen["card"] is True and seen["partition"] is True
