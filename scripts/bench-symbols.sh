#!/usr/bin/env bash
# Benchmarks ksymwatch-symbols (its `resolve` example) and the CLI's `ksymwatch resolve --vmlinux` on a real
# debug vmlinux (Debian's linux-image-*-cloud-amd64-dbg) against the tools a person would otherwise use:
# `nm vmlinux | grep -w jiffies` and `gdb -batch -ex 'p &init_uts_ns...'`.
# Reports median wall time over $RUNS warm runs, peak RSS (/usr/bin/time -v), checks the answers agree, and
# exits non-zero if a target is missed (>=5x faster than nm|grep and than gdb; peak RSS well under the file).
#
# Needs root (apt-get), network access to Debian's archive, ~1.2 GB free under $SCRATCH. The .deb and the
# extracted vmlinux stay in $SCRATCH (default /var/tmp/ksymwatch-bench) for reruns; nothing goes in the repo.
set -euo pipefail

SCRATCH=${SCRATCH:-/var/tmp/ksymwatch-bench}
RUNS=${RUNS:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}

for tool in apt-get apt-cache dpkg-deb nm gdb cargo /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-symbols: $tool is required" >&2; exit 2; }
done
mkdir -p "$SCRATCH"
cd "$SCRATCH"

# The meta package names the current versioned one; fall back to the newest listed.
if [ -z "${SKIP_APT_UPDATE:-}" ]; then apt-get update -qq; fi
pkg=$(apt-cache depends linux-image-cloud-amd64-dbg 2>/dev/null | awk '/Depends:/ {print $2; exit}')
if [ -z "$pkg" ]; then
    pkg=$(apt-cache search linux-image cloud-amd64-dbg | awk '{print $1}' | grep -E '^linux-image-[0-9].*-cloud-amd64-dbg$' | sort -V | tail -1)
fi
[ -n "$pkg" ] || { echo "bench-symbols: no linux-image-*-cloud-amd64-dbg package found" >&2; exit 2; }
version=$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')
deb=$(ls "${pkg}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
    apt-get download "$pkg"
    deb=$(ls "${pkg}"_*.deb | head -1)
fi

# Only the vmlinux is needed; the package also holds debug info for every module (GBs unpacked).
vmlinux=$(find "$SCRATCH/root" -path '*/usr/lib/debug/boot/vmlinux-*' -type f 2>/dev/null | head -1 || true)
if [ -z "$vmlinux" ]; then
    mkdir -p "$SCRATCH/root"
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$SCRATCH/root" --wildcards './usr/lib/debug/boot/vmlinux-*'
    vmlinux=$(find "$SCRATCH/root" -path '*/usr/lib/debug/boot/vmlinux-*' -type f | head -1)
fi
size_kb=$(( $(stat -c %s "$vmlinux") / 1024 ))

(cd "$REPO" && cargo build -q -p ksymwatch-symbols --release --example resolve)
resolve="$CARGO_TARGET_DIR/release/examples/resolve"
# The CLI too: it adds its own checks around the library (a whole-table build there was issue #37).
(cd "$REPO" && cargo build -q -p ksymwatch --release --bin ksymwatch)
cli="$CARGO_TARGET_DIR/release/ksymwatch"

# Median wall time in ms over $RUNS runs, after one warm-up so every tool reads from the page cache.
median_ms() {
    "$@" >/dev/null 2>&1 || true
    local times=() start end
    for _ in $(seq "$RUNS"); do
        start=$EPOCHREALTIME
        "$@" >/dev/null 2>&1 || true
        end=$EPOCHREALTIME
        times+=("$(awk -v s="$start" -v e="$end" 'BEGIN {print (e - s) * 1000}')")
    done
    printf '%s\n' "${times[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]}'
}
peak_kb() {
    /usr/bin/time -v "$@" 2>&1 >/dev/null | awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}'
}
nm_grep() { nm "$vmlinux" | grep -w jiffies; }
gdb_field() { gdb -nx -batch -ex 'p &init_uts_ns.name.nodename' "$vmlinux"; }
export -f nm_grep gdb_field
export vmlinux

# The answers must agree before the times mean anything.
ours_j=$("$resolve" "$vmlinux" jiffies --json | sed -E 's/.*"link_addr":"0x([0-9a-f]+)".*/\1/')
nm_j=$(nm_grep | awk '{print $1; exit}' | sed 's/^0*//')
ours_f=$("$resolve" "$vmlinux" init_uts_ns.name.nodename --json | sed -E 's/.*"link_addr":"0x([0-9a-f]+)".*/\1/')
gdb_f=$(gdb_field | sed -nE 's/.* 0x([0-9a-f]+) .*/\1/p')
cli_j=$("$cli" resolve jiffies --vmlinux "$vmlinux" --json 2>/dev/null | sed -E 's/.*"link_addr":"0x([0-9a-f]+)".*/\1/')
[ "$ours_j" = "$nm_j" ] || { echo "bench-symbols: jiffies: ours $ours_j, nm $nm_j" >&2; exit 1; }
[ "$cli_j" = "$nm_j" ] || { echo "bench-symbols: jiffies: ksymwatch resolve $cli_j, nm $nm_j" >&2; exit 1; }
[ "$ours_f" = "$gdb_f" ] || { echo "bench-symbols: nodename: ours $ours_f, gdb $gdb_f" >&2; exit 1; }

t_ours_j=$(median_ms "$resolve" "$vmlinux" jiffies)
t_cli_j=$(median_ms "$cli" resolve jiffies --vmlinux "$vmlinux")
t_nm=$(median_ms bash -c nm_grep)
t_ours_f=$(median_ms "$resolve" "$vmlinux" init_uts_ns.name.nodename)
t_gdb=$(median_ms bash -c gdb_field)
m_ours_j=$(peak_kb "$resolve" "$vmlinux" jiffies)
m_cli_j=$(peak_kb "$cli" resolve jiffies --vmlinux "$vmlinux")
m_nm=$(peak_kb nm "$vmlinux")
m_ours_f=$(peak_kb "$resolve" "$vmlinux" init_uts_ns.name.nodename)
m_gdb=$(peak_kb gdb -nx -batch -ex 'p &init_uts_ns.name.nodename' "$vmlinux")

echo "package: $pkg $version"
echo "vmlinux: $vmlinux ($((size_kb / 1024)) MiB)"
echo "runs: $RUNS (median, warm page cache)"
printf '%-34s %10s %12s\n' "" "wall ms" "peak RSS KB"
printf '%-34s %10s %12s\n' "resolve jiffies" "$t_ours_j" "$m_ours_j"
printf '%-34s %10s %12s\n' "CLI: ksymwatch resolve jiffies" "$t_cli_j" "$m_cli_j"
printf '%-34s %10s %12s\n' "nm | grep -w jiffies" "$t_nm" "$m_nm (nm)"
printf '%-34s %10s %12s\n' "resolve init_uts_ns.name.nodename" "$t_ours_f" "$m_ours_f"
printf '%-34s %10s %12s\n' "gdb -batch p &init_uts_ns...." "$t_gdb" "$m_gdb"
speed_j=$(awk -v a="$t_nm" -v b="$t_ours_j" 'BEGIN {print a / b}')
speed_c=$(awk -v a="$t_nm" -v b="$t_cli_j" 'BEGIN {print a / b}')
speed_f=$(awk -v a="$t_gdb" -v b="$t_ours_f" 'BEGIN {print a / b}')
printf 'speedup: jiffies %.1fx (CLI %.1fx) vs nm|grep, field path %.1fx vs gdb\n' "$speed_j" "$speed_c" "$speed_f"

fail=0
awk -v s="$speed_j" 'BEGIN {exit !(s >= 5)}' || { echo "MISSED: jiffies is not 5x faster than nm|grep"; fail=1; }
awk -v s="$speed_c" 'BEGIN {exit !(s >= 5)}' || { echo "MISSED: ksymwatch resolve jiffies is not 5x faster than nm|grep"; fail=1; }
awk -v s="$speed_f" 'BEGIN {exit !(s >= 5)}' || { echo "MISSED: field path is not 5x faster than gdb"; fail=1; }
for m in "$m_ours_j" "$m_cli_j" "$m_ours_f"; do
    (( m * 4 < size_kb )) || { echo "MISSED: peak RSS ${m} KB is not well under the file (${size_kb} KB)"; fail=1; }
done
[ "$fail" = 0 ] && echo "all targets met"
exit "$fail"
