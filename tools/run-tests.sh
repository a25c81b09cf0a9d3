#!/usr/bin/env bash
# Runs every droce test: unit, golden-capture and end-to-end suites in a
# normal build, the unit and golden suites again under ASan+UBSan, the verbs
# provider's API test under ASan+UBSan, and a short fuzz run per parser.
# Prints one closing line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
passed=0
failed=0
failures=()

count() {  # count NAME STATUS
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

meson_suite_counts() {  # adds meson's per-test results from a testlog
  local log=$1 label=$2
  [ -f "$log" ] || { count "$label: no test log" 1; return; }
  local p f
  p=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(1 for x in r if x["result"] in ("OK","EXPECTEDFAIL","SKIP")))' "$log")
  passed=$((passed + p))
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    failed=$((failed + 1)); failures+=("$label: $name")
  done < <(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print("\n".join(x["name"] for x in r if x["result"] not in ("OK","EXPECTEDFAIL","SKIP")))' "$log")
}

echo "== build"
if ! { [ -f build/build.ninja ] || meson setup build; } || ! ninja -C build; then
  echo "0 passed, 1 failed"
  exit 1
fi

echo "== tests (all suites)"
meson test -C build --print-errorlogs --num-processes 2
meson_suite_counts build/meson-logs/testlog.json build

echo "== unit and golden tests under ASan+UBSan"
if { [ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
       -Db_lundef=false -Dbuildtype=debug -Ddpdk=disabled -Dverbs=disabled >/dev/null; } &&
   ninja -C build-asan >/dev/null; then
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    meson test -C build-asan --suite unit --suite golden --print-errorlogs --num-processes 2
  meson_suite_counts build-asan/meson-logs/testlog.json asan
else
  count "asan build" 1
fi

echo "== the verbs provider under ASan+UBSan (verbs_api)"
# The provider and its DPDK dataplane instrumented, through an unmodified
# libibverbs, which loads it: the ASan runtime is preloaded so it comes first.
asan_lib=$(gcc -print-file-name=libasan.so)
if { [ -f build-asan-verbs/build.ninja ] || meson setup build-asan-verbs -Db_sanitize=address,undefined \
       -Db_lundef=false -Dbuildtype=debug >/dev/null; } &&
   ninja -C build-asan-verbs tests/verbs/verbs_api_test drivers/verbs/libdroce-rdmav34.so \
     drivers/verbs/libdroce-preload.so >/dev/null; then
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    DROCE_PROVIDER_DIR="$PWD/build-asan-verbs/drivers/verbs" \
    LD_PRELOAD="$asan_lib $PWD/build-asan-verbs/drivers/verbs/libdroce-preload.so" \
    timeout 900 build-asan-verbs/tests/verbs/verbs_api_test --gtest_brief=1
  count "asan: verbs_api" $?
else
  count "asan verbs build" 1
fi

if [ -x tests/fuzz/run_fuzz.sh ] && [ "$FUZZ_SECONDS" -gt 0 ]; then
  echo "== fuzzing (${FUZZ_SECONDS}s per target)"
  tests/fuzz/run_fuzz.sh "$FUZZ_SECONDS"
  count "fuzz" $?
fi

if [ ${#failures[@]} -gt 0 ]; then
  echo "failures:"
  printf '  %s\n' "${failures[@]}"
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
