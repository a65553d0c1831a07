"""The process table as a tree (v / F5): workers under the launcher that started them.

Pure; no Textual.  Only GPU processes are in a snapshot, so a parent that holds no GPU
memory itself (torchrun, a notebook server, a data-loader's trainer when it is idle on
the CPU) becomes a group row, made from what its children know of it (pid, command,
user), when at least two shown processes share it.  A row with children shows the GPU
memory of its whole subtree.  Siblings keep the table's sort order; a subtree sits
where its first row would have been.
"""

from __future__ import annotations

import dataclasses

from gputop.model import GpuProcess
from gputop.ui.table_model import Row

GROUP_GPU = -1  # a group row's key: no GPU, so no action can find a process behind it


def tree_rows(rows: list[Row]) -> list[Row]:
    """``rows`` (filtered and sorted) in tree order, with branches and subtree memory."""
    if not rows:
        return []
    by_pid: dict[int, list[Row]] = {}
    for row in rows:
        by_pid.setdefault(row.proc.pid, []).append(row)
    parents: dict[int, int] = {}  # pid -> parent pid, for parents that are shown
    siblings: dict[int, list[int]] = {}
    for pid, own in by_pid.items():
        ppid = own[0].proc.ppid
        if ppid is None or ppid <= 1 or ppid == pid:
            continue
        siblings.setdefault(ppid, []).append(pid)
    groups: dict[int, Row] = {}
    for ppid, kids in siblings.items():
        if ppid in by_pid or len(kids) >= 2:
            for kid in kids:
                parents[kid] = ppid
            if ppid not in by_pid:
                groups[ppid] = _group_row(ppid, by_pid[kids[0]][0])
    # A cycle (pid reuse races) would loop forever: cut it at the first repeat.
    for pid in list(parents):
        seen = {pid}
        up = parents.get(pid)
        while up is not None:
            if up in seen:
                del parents[pid]
                break
            seen.add(up)
            up = parents.get(up)

    children: dict[int, list[int]] = {}
    order: list[int] = []  # roots, in the order their subtree first appears
    for row in rows:
        pid = row.proc.pid
        top = pid
        while top in parents:
            top = parents[top]
        if top not in order:
            order.append(top)
        parent = parents.get(pid)
        if parent is not None and pid not in children.setdefault(parent, []):
            children[parent].append(pid)

    out: list[Row] = []

    def subtree_mem(pid: int) -> int | None:
        mems = [r.proc.gpu_mem for r in by_pid.get(pid, ()) if r.proc.gpu_mem is not None]
        for kid in children.get(pid, ()):
            kid_mem = subtree_mem(kid)
            if kid_mem is not None:
                mems.append(kid_mem)
        return sum(mems) if mems else None

    def walk(pid: int, prefix: str, branch: str) -> None:
        kids = children.get(pid, [])
        total = subtree_mem(pid) if kids else None
        own = by_pid.get(pid) or [groups[pid]]
        for i, row in enumerate(own):
            # A process on several GPUs: its other rows line up under the first.
            mark = branch if i == 0 else prefix + ("│ " if kids else "  ")
            out.append(dataclasses.replace(row, branch=mark,
                                           subtree_mem=total if i == 0 else None))
        for n, kid in enumerate(kids):
            last = n == len(kids) - 1
            walk(kid, prefix + ("  " if last else "│ "), prefix + ("└ " if last else "├ "))

    for root in order:
        walk(root, "", "")
    return out


def _group_row(ppid: int, child: Row) -> Row:
    proc = GpuProcess(pid=ppid, gpu=GROUP_GPU, type="", visible=True,
                      user=child.proc.parent_user, command=child.proc.parent_command,
                      simulated=child.proc.simulated)
    host = child.key[0]
    return Row((host, ppid, None, GROUP_GPU), proc, (), tree_parent=True)
