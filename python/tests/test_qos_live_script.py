"""scripts/qos-live.sh, the live busy-rate QoS recipe: it runs end to end
(emulated RAID 5, loop device, cgroups, fio tenants, `tierlab qos run`)
and undoes everything it set up, also when stopped with Ctrl-C."""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "qos-live.sh"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "not root (cgroup limits, FUSE mounts and loop devices need root)"
    for cmd in ("fio", "losetup"):
        if shutil.which(cmd) is None:
            return f"{cmd} is not installed (scripts/setup.sh installs it)"
    if not Path("/dev/fuse").exists() or not Path("/dev/loop-control").exists():
        return "no /dev/fuse or no loop devices"
    if not (REPO / "target" / "release" / "tierlab").is_file():
        return "target/release/tierlab is not built (scripts/setup.sh builds it)"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=f"the live QoS recipe cannot run here: {_why_not()}")


def leftovers(out: Path) -> list[str]:
    """What the script could have left behind: its cgroups, a loop device
    over its file, its FUSE mount."""
    found = []
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/blkio")):
        if root.is_dir():
            found += [str(p) for p in root.glob("tierlab-qos-live-*")]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    found += [line for line in loops.splitlines() if str(out) in line]
    mounts = Path("/proc/self/mounts").read_text()
    found += [line for line in mounts.splitlines() if str(out / "mnt") in line]
    return found


def test_the_recipe_runs_and_cleans_up(tmp_path: Path) -> None:
    out = Path("/var/tmp") / f"tierlab-qos-live-test-{os.getpid()}"
    try:
        p = subprocess.run([str(SCRIPT), "--duration-s", "12", "--baseline-s", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=180)  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
        assert "qos-live: A1 + A2 " in p.stdout and "done;" in p.stdout, p.stdout
        with open(out / "qos.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        # 2 s samples for 12 s; A's guarantee is the sum of the two.
        assert len(rows) >= 5 and all(float(r["a_target_iops"]) == 60.0 for r in rows)
        assert {"a1_iops", "a2_iops", "b1_cap_iops", "b2_cap_iops"} <= set(rows[0])
        assert leftovers(out) == []
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_ctrl_c_undoes_everything(tmp_path: Path) -> None:
    out = Path("/var/tmp") / f"tierlab-qos-live-int-{os.getpid()}"
    proc = None
    try:
        proc = subprocess.Popen([str(SCRIPT), "--duration-s", "60", "--baseline-s", "2", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        # Interrupt once the controller runs (its log has a sample).
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            log = out / "qos.csv"
            if log.is_file() and len(log.read_text().splitlines()) >= 2:
                break
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the controller never logged a sample")
        # To the script alone (a terminal would signal its whole group):
        # it must stop the controller itself, at once.
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-3000:]
        assert time.monotonic() - stopped_at < 30, "the script waited for the controller's whole run"
        assert "everything set up was undone" in err
        assert leftovers(out) == []
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        shutil.rmtree(out, ignore_errors=True)
