#!/usr/bin/env bash
# Short fuzz run of every parser that takes outside input: the TARGET grammar, the --if language, kallsyms/System.map text,
# the perf record decoder and user-space ELF symbol loading. Two layers:
#   1. the property tests (tests/suite/properties.rs) with many more cases than CI's default;
#   2. cargo-fuzz (libFuzzer) targets in fuzz/, SECONDS each (default 30), if cargo-fuzz is installed.
# cargo-fuzz needs nightly flags; on a stable-only machine RUSTC_BOOTSTRAP=1 lets stable rustc accept them.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}

PROPTEST_CASES=${PROPTEST_CASES:-20000} cargo test --release --test suite properties::
PROPTEST_CASES=${PROPTEST_CASES:-20000} cargo test --release -p ksymwatch-symbols --test suite user_elf::

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz not installed (cargo install cargo-fuzz): skipping the libFuzzer runs" >&2
    exit 0
fi
for t in target_grammar condition kallsyms record user_elf; do
    echo "== fuzz $t for ${secs}s"
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048
done
