"""tierlab.serve: a stack served over NBD from Python, checked with real
NBD clients (qemu-io, nbdinfo) where they are installed."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import tierlab

needs = pytest.mark.skipif(
    shutil.which("qemu-io") is None or shutil.which("nbdinfo") is None,
    reason="qemu-io or nbdinfo not installed (apt-get install qemu-utils libnbd-bin)",
)


def _cache_stack(tmp_path):
    return {
        "devices": [
            {"name": "cache", "path": "ram", "capacity_bytes": "8MiB"},
            {
                "name": "disk",
                "path": str(tmp_path / "disk.img"),
                "capacity_bytes": "64MiB",
                "create": True,
            },
        ],
        "policy": {"kind": "cache", "capacity_bytes": "8MiB", "write_mode": "write-back"},
    }


@needs
def test_a_served_cache_takes_writes_and_writes_them_back_on_stop(tmp_path):
    sock = tmp_path / "s.sock"
    with tierlab.serve(_cache_stack(tmp_path), unix=sock, out=tmp_path / "out") as s:
        assert s.uri == f"nbd+unix:///tierlab?socket={sock}"
        assert s.size_bytes == 64 << 20 and s.block_min_bytes == 4096
        assert s.tiers == ["cache", "backing"]
        io = subprocess.run(
            ["qemu-io", "-f", "raw", "-c", "write -P 0x5a 1M 256k", "-c", "read -P 0x5a 1M 256k", s.uri],
            capture_output=True,
            text=True,
        )
        assert io.returncode == 0 and "Pattern verification failed" not in io.stdout, io
        info = json.loads(
            subprocess.run(["nbdinfo", "--json", s.uri], capture_output=True, text=True, check=True).stdout
        )
        assert info["exports"][0]["export-size"] == 64 << 20
        tier_map = subprocess.run(
            ["nbdinfo", "--map=tierlab:tier", s.uri], capture_output=True, text=True, check=True
        ).stdout.split("\n")
        # The 256 KiB just written are in the cache (tier 0), the rest on disk.
        # (qemu-io also reads the first blocks when it opens the export: a
        # read miss that fills the cache too.)
        rows = [[int(x) for x in r.split()[:3]] for r in tier_map if r.strip()]
        assert [1 << 20, 256 << 10, 0] in rows, rows
        assert sum(r[1] for r in rows) == 64 << 20
    # Leaving the block drained the cache: the backing file alone holds the data.
    assert s.report["requests"]["write"] >= 1
    with open(tmp_path / "disk.img", "rb") as f:
        f.seek(1 << 20)
        assert f.read(256 << 10) == b"\x5a" * (256 << 10)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["serve"]["requests"]["write"] == s.report["requests"]["write"]
    assert summary["run"]["policy"] == "cache"


def test_bad_arguments_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="exactly one of unix"):
        with tierlab.serve(_cache_stack(tmp_path)):
            pass
    bad = _cache_stack(tmp_path)
    bad["policy"]["kind"] = "cahce"
    with pytest.raises(tierlab.ConfigError, match="did you mean `cache`"):
        with tierlab.serve(bad, unix=tmp_path / "s.sock"):
            pass
    # A backing file that cannot be opened is the OSError of its kind,
    # naming the device's key and the file.
    missing = _cache_stack(tmp_path)
    missing["devices"][1]["path"] = str(tmp_path / "nowhere" / "disk.img")
    with pytest.raises(FileNotFoundError, match=r"key `devices\[1\]`: .*nowhere"):
        with tierlab.serve(missing, unix=tmp_path / "s.sock"):
            pass
    # A backing store's bad value is a ParamError with its key path.
    small = _cache_stack(tmp_path)
    small["devices"][1]["create"] = "yes"
    with pytest.raises(tierlab.ParamError) as e:
        with tierlab.serve(small, unix=tmp_path / "s.sock"):
            pass
    assert e.value.key == "devices[1].create"
    assert e.value.expected == "true or false"
    # Options are ParamErrors naming the flag or argument.
    with pytest.raises(tierlab.ParamError) as e:
        with tierlab.serve(_cache_stack(tmp_path), tcp="localhost:x"):
            pass
    assert e.value.key == "--tcp"
    with pytest.raises(tierlab.ParamError, match="did you mean `uring`") as e:
        with tierlab.serve(_cache_stack(tmp_path), unix=tmp_path / "s.sock", io_engine="iouring"):
            pass
    assert e.value.key == "io_engine"
    # The poll before sleeping: µs from 0 to 10000.
    for bad, key in [(-1, "wait_poll_us"), (20_000, "--wait-poll-us")]:
        with pytest.raises(tierlab.ParamError, match="10000") as e:
            with tierlab.serve(_cache_stack(tmp_path), unix=tmp_path / "s.sock", wait_poll_us=bad):
                pass
        assert e.value.key == key



def test_two_devices_on_one_file_raise_a_config_error_naming_both(tmp_path):
    """One file for the cache and the backing device (issue 35) — the same
    path, ``./`` of it, a symlink, a hard link — is refused before anything
    is opened or created."""
    disk = tmp_path / "c.img"

    def stack(cache_path, disk_path):
        return {
            "devices": [
                {"name": "cache", "path": cache_path, "capacity_bytes": "4MiB", "create": True},
                {"name": "disk", "path": disk_path, "capacity_bytes": "64MiB", "create": True},
            ],
            "policy": {"kind": "cache", "capacity_bytes": "4MiB", "write_mode": "write-back"},
        }

    def refused(cache_path, disk_path, match):
        with pytest.raises(tierlab.ConfigError, match=match) as e:
            with tierlab.serve(stack(cache_path, disk_path), unix=tmp_path / "s.sock", base_dir=tmp_path):
                pass
        assert e.value.key == "devices[1].path"
        assert "Give each device its own file" in str(e.value)

    both = r"devices\[1\] \(disk\) and devices\[0\] \(cache\) are the same file"
    refused("c.img", "c.img", both)
    refused("c.img", "./c.img", both)
    refused(str(disk), "c.img", both)
    assert not disk.exists(), "nothing was created"
    disk.write_bytes(b"\0" * (4 << 20))
    (tmp_path / "link.img").symlink_to("c.img")
    refused("c.img", "link.img", 'given as "c.img" and "link.img"')
    (tmp_path / "hard.img").hardlink_to(disk)
    refused("c.img", "hard.img", "are hard links to inode")


@needs
def test_a_server_that_sleeps_at_once_serves_the_same_bytes(tmp_path):
    # wait_poll_us=0: epoll sleeps at once (the default polls 50 µs first;
    # the other tests here run with it).
    sock = tmp_path / "s.sock"
    with tierlab.serve(_cache_stack(tmp_path), unix=sock, wait_poll_us=0) as s:
        io = subprocess.run(
            ["qemu-io", "-f", "raw", "-c", "write -P 0x33 2M 64k", "-c", "read -P 0x33 2M 64k", s.uri],
            capture_output=True,
            text=True,
        )
        assert io.returncode == 0 and "Pattern verification failed" not in io.stdout, io
    assert s.report["requests"]["write"] >= 1


def _hswd_stack(tmp_path):
    return {
        "devices": [
            {"name": "pcache", "path": str(tmp_path / "p.img"), "capacity_bytes": "8MiB", "create": True},
            {"name": "smr", "path": str(tmp_path / "n.img"), "capacity_bytes": "32MiB", "create": True},
        ],
        "policy": {"kind": "hswd", "pcache_bytes": "4MiB", "band_bytes": "1MiB"},
    }


@needs
@pytest.mark.parametrize("write_back_on_stop", [False, True])
def test_hswd_stops_warm_unless_asked_to_write_back(tmp_path, write_back_on_stop):
    sock = tmp_path / "s.sock"
    with tierlab.serve(_hswd_stack(tmp_path), unix=sock, write_back_on_stop=write_back_on_stop) as s:
        io = subprocess.run(
            ["qemu-io", "-f", "raw", "-c", "write -P 0x3c 2M 64k", s.uri], capture_output=True, text=True
        )
        assert io.returncode == 0, io
    assert s.report["warm_stop"] is (not write_back_on_stop), s.report
    with open(tmp_path / "n.img", "rb") as f:
        f.seek(2 << 20)
        on_smr = f.read(64 << 10) == b"\x3c" * (64 << 10)
    # Warm: the data stays in the PCache (recovered at the next start);
    # written back: the SMR disk holds it.
    assert on_smr is write_back_on_stop
    with tierlab.serve(_hswd_stack(tmp_path), unix=sock) as s:
        io = subprocess.run(
            ["qemu-io", "-f", "raw", "-c", "read -P 0x3c 2M 64k", s.uri], capture_output=True, text=True
        )
        assert io.returncode == 0 and "Pattern verification failed" not in io.stdout, io
