#!/usr/bin/env bash
# The live busy-rate QoS experiment end to end (docs/qos.md, "Live"):
# the paper's RAID 5 of six 7200 rpm disks emulated by `tierlab emulate`
# (a FUSE file, sparse backing) behind a loop device, two guaranteed
# file-share tenants (A1, A2: 30 IOPS each, capped at their target as in
# the paper) and two backup tenants (B1, B2) running fio in their own
# cgroups, and `tierlab qos run` throttling the B's so the A's get their
# IOPS. Everything it sets up is undone on exit, also on Ctrl-C or an
# error, in reverse order: fio, cgroups, queue settings, loop device,
# emulator (and its mount).
#
#   sudo scripts/qos-live.sh [--duration-s 100] [--baseline-s 8] [--out DIR]
#
# Needs root, fio, losetup, /dev/fuse and cgroup IO throttling (v2 `io`
# or v1 blkio); scripts/setup.sh installs the packages. Writes into DIR
# (default: a new /var/tmp/tierlab-qos-live.XXXXXX): qos.csv (the
# controller's log, columns in docs/qos.md), fio-*.out and fio IOPS logs,
# emulate.json (the emulator's summary).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

duration_s=100
baseline_s=8
out=""
usage() { sed -n '13p' "${BASH_SOURCE[0]}" | sed 's/^#   /usage: /' >&2; exit 2; }
while (($#)); do
    case $1 in
        --duration-s) duration_s=${2:?--duration-s needs a value}; shift 2 ;;
        --baseline-s) baseline_s=${2:?--baseline-s needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        -h | --help) usage ;;
        *) echo "qos-live: unknown option '$1'" >&2; usage ;;
    esac
done
[[ $duration_s =~ ^[0-9]+$ && $duration_s -ge 10 ]] || { echo "qos-live: --duration-s must be a whole number of seconds >= 10, not '$duration_s'" >&2; exit 2; }
[[ $baseline_s =~ ^[0-9]+$ ]] || { echo "qos-live: --baseline-s must be a whole number of seconds, not '$baseline_s'" >&2; exit 2; }

die() { echo "qos-live: $*" >&2; exit 1; }
((EUID == 0)) || die "needs root (cgroup limits, a FUSE mount and a loop device); run it with sudo"
for cmd in fio losetup; do
    command -v "$cmd" >/dev/null || die "$cmd is not installed (./scripts/setup.sh installs it)"
done
[[ -e /dev/fuse ]] || die "no /dev/fuse (the emulator serves its disk through FUSE)"
[[ -e /dev/loop-control ]] || die "no loop devices (/dev/loop-control is missing)"
tierlab=$ROOT/target/release/tierlab
[[ -x $tierlab ]] || tierlab=$(command -v tierlab || true)
[[ -n $tierlab && -x $tierlab ]] || die "no tierlab binary: run ./scripts/setup.sh (it builds target/release/tierlab)"

# The cgroup interface, as `tierlab qos run` finds it.
cg_root=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
if [[ -n $cg_root && -e $cg_root/cgroup.controllers ]] && grep -qw io "$cg_root/cgroup.controllers"; then
    iface=v2
    grep -qw io "$cg_root/cgroup.subtree_control" || echo +io >"$cg_root/cgroup.subtree_control" ||
        die "cannot enable the io controller in $cg_root/cgroup.subtree_control"
else
    cg_root=$(awk '$3 == "cgroup" && $4 ~ /(^|,)blkio(,|$)/ {print $2; exit}' /proc/self/mounts)
    [[ -n $cg_root ]] || die "no cgroup IO throttling (neither cgroup v2 with io nor cgroup v1 blkio)"
    iface=v1
fi

if [[ -z $out ]]; then
    out=$(mktemp -d /var/tmp/tierlab-qos-live.XXXXXX)
else
    mkdir -p "$out"
fi
out=$(cd "$out" && pwd)
mnt=$out/mnt
mkdir -p "$mnt"
names=(a1 a2 b1 b2)
tag=tierlab-qos-live-$$

emu_pid="" qos_pid="" loop_dev="" queue_restore=() cgroups=() fio_pids=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # The controller removes the limits it wrote when it gets SIGTERM.
    if [[ -n $qos_pid ]]; then
        kill -TERM "$qos_pid" 2>/dev/null || true
        wait "$qos_pid" 2>/dev/null || true
    fi
    for pid in "${fio_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # fio forks its jobs: end what is left in our cgroups, then remove them.
    for cg in "${cgroups[@]}"; do
        for _ in $(seq 50); do
            procs=$(cat "$cg/cgroup.procs" 2>/dev/null || true)
            [[ -z $procs ]] && break
            kill $procs 2>/dev/null || true
            sleep 0.1
        done
        rmdir "$cg" 2>/dev/null || echo "qos-live: could not remove cgroup $cg" >&2
    done
    for entry in "${queue_restore[@]}"; do echo "${entry#*=}" >"${entry%%=*}" 2>/dev/null || true; done
    [[ -n $loop_dev ]] && { losetup -d "$loop_dev" || echo "qos-live: could not detach $loop_dev" >&2; }
    if [[ -n $emu_pid ]]; then
        kill -TERM "$emu_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$emu_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$emu_pid" 2>/dev/null || true
    fi
    mountpoint -q "$mnt" 2>/dev/null && { fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" || true; }
    ((rc == 0)) || echo "qos-live: stopped (exit $rc); everything set up was undone; files in $out" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "qos-live: files in $out ($iface cgroups under $cg_root)"
realtime=()
# Real-time threads keep the model's completions on time on a loaded
# machine (docs/emulate.md); use them where allowed.
if chrt -f 1 true 2>/dev/null; then realtime=(--realtime); fi
"$tierlab" emulate --config "$ROOT/configs/qos-eval1.toml" --device raid5 --backing "$out/backing" \
    --mount "$mnt" --summary "$out/emulate.json" "${realtime[@]}" >"$out/emulate.out" 2>"$out/emulate.err" &
emu_pid=$!
for _ in $(seq 200); do
    [[ -e $mnt/disk.img ]] && break
    kill -0 "$emu_pid" 2>/dev/null || die "tierlab emulate stopped: $(cat "$out/emulate.err")"
    sleep 0.1
done
[[ -e $mnt/disk.img ]] || die "the emulator did not mount in 20 s"
loop_dev=$(losetup --direct-io=on -f --show "$mnt/disk.img")
udevadm settle 2>/dev/null || true
majmin=$(lsblk -dno MAJ:MIN "$loop_dev" | tr -d ' ')
# No IO scheduler in front of the model and room for every tenant's IOs.
queue=/sys/block/${loop_dev#/dev/}/queue
old_sched=$(sed 's/.*\[\(.*\)\].*/\1/' "$queue/scheduler")
queue_restore+=("$queue/scheduler=$old_sched" "$queue/nr_requests=$(cat "$queue/nr_requests")")
echo none >"$queue/scheduler"
echo 128 >"$queue/nr_requests"
echo "qos-live: emulated RAID 5 at $loop_dev ($majmin)"

limit() { # cgroup riops wiops
    if [[ $iface == v2 ]]; then
        echo "$majmin riops=$2 wiops=$3" >"$1/io.max"
    else
        echo "$majmin $2" >"$1/blkio.throttle.read_iops_device"
        echo "$majmin $3" >"$1/blkio.throttle.write_iops_device"
    fi
}
for n in "${names[@]}"; do
    mkdir "$cg_root/$tag-$n"
    cgroups+=("$cg_root/$tag-$n")
done
# Each A is capped at its target (20 reads/s + 10 writes/s), as the paper's.
limit "$cg_root/$tag-a1" 20 10
limit "$cg_root/$tag-a2" 20 10

runtime=$((baseline_s + duration_s + 2))
common=(--filename="$loop_dev" --direct=1 --ioengine=libaio --time_based --runtime="$runtime" --log_avg_msec=1000)
fio_in() { # cgroup name fio-args...
    local cg=$1 name=$2
    shift 2
    sh -c 'echo $$ >"$1/cgroup.procs" && shift 2 && exec fio "$@"' sh "$cg" "$name" "${common[@]}" "$@" \
        >"$out/fio-$name.out" 2>&1 &
    fio_pids+=($!)
}
gib=$((1 << 30))
for i in 1 2; do
    fio_in "$cg_root/$tag-b$i" "b$i" --name="b$i" --offset=$(((i - 1) * 300 * gib)) --size=30G \
        --write_iops_log="$out/b$i" --rw=randrw --rwmixread=50 --bs=128k --iodepth=48
done
# file-share's sizes (docs/generators.md), in the array's last 500 GiB
# (configs/qos-eval1.toml's tenant A region).
for i in 1 2; do
    offset=$((1463128883200 + (i - 1) * 250 * gib))
    fio_in "$cg_root/$tag-a$i" "a$i" \
        --name="a${i}r" --offset=$offset --size=250G --write_iops_log="$out/a${i}r" --rw=randread \
        --bssplit=4k/50:8k/25:16k/12:32k/7:64k/6 --blockalign=4k --iodepth=4 \
        --name="a${i}w" --offset=$offset --size=250G --write_iops_log="$out/a${i}w" --rw=randwrite \
        --bssplit=4k/50:8k/25:16k/12:32k/7:64k/6 --blockalign=4k --iodepth=4
done
echo "qos-live: fio tenants running; ${baseline_s} s without the controller, then ${duration_s} s with it"
sleep "$baseline_s" &
wait $!
# In the background and waited for, so that a signal to this script is
# handled at once (bash runs traps only between foreground commands).
"$tierlab" qos run --device "$loop_dev" --guarantee="$tag-a1=30" --guarantee="$tag-a2=30" \
    --throttle="$tag-b1" --throttle="$tag-b2" --interval-s 2 --duration-s "$duration_s" \
    --saturated-util-pct 99.8 --log "$out/qos.csv" &
qos_pid=$!
wait "$qos_pid" || die "tierlab qos run failed (exit $?)"
qos_pid=""
for pid in "${fio_pids[@]}"; do wait "$pid" || true; done
fio_pids=()
# What the log says: A's IOPS over the second half, X's path.
awk -F, -v dur="$duration_s" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { t = $col["elapsed_s"]; n++; x = $col["target_busy_pct"]
      if ($col["event"] == "lowered") lowered = lowered sprintf(" %.1f%%", x)
      if (n > (dur / 2) / 2) { a += $col["a_iops"]; k++ } }
    END { printf "qos-live: A1 + A2 %.1f IOPS over the second half (guarantee 60); X lowered to%s\n",
          (k ? a / k : 0), (lowered == "" ? " - (never)" : lowered) }' "$out/qos.csv"
echo "qos-live: done; the controller log is $out/qos.csv (columns: docs/qos.md)"
