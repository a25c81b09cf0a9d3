#!/usr/bin/env bash
# Runs every droce test, in stages, each timed:
#   build        the normal tree (./build)
#   tests        every suite there: unit, golden, e2e, verbs, fabric, conformance
#   package      (only when asked for: a second full build, ~15 min on a loaded
#                2-core host) the Debian packages (tools/build-deb.sh, nocheck:
#                the tests stage ran the unit tests) into ./build-deb, lintian on
#                them, and tests/install/package.sh (dpkg -x, login shell,
#                dpkg -i/--purge)
#   sanitizers   one clang tree with ASan+UBSan (./build-san): the unit and golden
#                suites, the verbs provider's API test through libibverbs, and the
#                libFuzzer targets, a short run each from the committed corpus
#   tsan         the provider and the other multi-threaded code under
#                ThreadSanitizer (./build-tsan)
#   bench        the engine's instructions per 64 B WRITE (callgrind, a release
#                tree ./build-rel: tools/bench/engine/check_instructions.sh), and
#                per two-frame SEND in ./build (-O2): a benchmark check that warns
#                when a count rises more than 3 % above instructions.ref and never
#                fails the run
# Prints each stage's duration, the benchmark numbers and one closing line
# "N passed, N failed".
#
# DROCE_TEST_STAGES picks stages (default "build tests sanitizers tsan bench"; add
# package for the Debian packages, e.g. DROCE_TEST_STAGES="build package");
# FUZZ_SECONDS sets the fuzz run per target (default 30, 0 skips fuzzing).
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
STAGES=${DROCE_TEST_STAGES:-build tests sanitizers tsan bench}
passed=0
failed=0
failures=()
durations=()
benchmarks=()  # lines for the summary: measured, never counted as passed or failed
run_start=$(date +%s)

count() {  # count NAME STATUS
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}

meson_suite_counts() {  # adds meson's per-test results from a testlog
  local log=$1 label=$2
  [ -f "$log" ] || { count "$label: no test log" 1; return; }
  local p
  p=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(1 for x in r if x["result"] in ("OK","EXPECTEDFAIL","SKIP")))' "$log")
  passed=$((passed + p))
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    failed=$((failed + 1)); failures+=("$label: $name")
  done < <(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print("\n".join(x["name"] for x in r if x["result"] not in ("OK","EXPECTEDFAIL","SKIP")))' "$log")
}

stage_begin() {  # stage_begin NAME: prints the header, starts its clock
  stage_name=$1
  stage_t0=$(date +%s)
  echo "== $1 ($(date -u +%H:%M:%S))"
}

stage_end() {
  local d=$(( $(date +%s) - stage_t0 ))
  durations+=("$(printf '%-12s %3d:%02d' "$stage_name" $((d / 60)) $((d % 60)))")
  echo "== $stage_name took $((d / 60)) min $((d % 60)) s"
}

wants() { [[ " $STAGES " == *" $1 "* ]]; }

finish() {
  local total=$(( $(date +%s) - run_start ))
  echo "stage durations (min:s):"
  printf '  %s\n' "${durations[@]}"
  printf '  %-12s %3d:%02d\n' total $((total / 60)) $((total % 60))
  if [ ${#benchmarks[@]} -gt 0 ]; then
    echo "benchmarks (warnings only):"
    printf '  %s\n' "${benchmarks[@]}"
  fi
  if [ ${#failures[@]} -gt 0 ]; then
    echo "failures:"
    printf '  %s\n' "${failures[@]}"
  fi
  echo "${passed} passed, ${failed} failed"
  [ "$failed" -eq 0 ]
  exit
}

# ninja's own output only when it fails (it is long).
quiet_ninja() {  # quiet_ninja DIR [TARGETS...]
  local out
  if ! out=$(nice -n 2 ninja -C "$@" 2>&1); then
    grep -E 'error|FAILED' -A3 <<<"$out" | head -60
    return 1
  fi
}

if wants build; then
  stage_begin build
  if ! { [ -f build/build.ninja ] || meson setup build >/dev/null; } || ! quiet_ninja build; then
    count "build" 1
    stage_end
    finish
  fi
  stage_end
fi

if wants tests; then
  stage_begin tests
  meson test -C build --print-errorlogs --num-processes 2 --timeout-multiplier 2
  meson_suite_counts build/meson-logs/testlog.json build
  stage_end
fi

if wants package; then
  stage_begin package
  rm -rf build-deb && mkdir build-deb
  if DEB_BUILD_OPTIONS=nocheck nice -n 2 bash tools/build-deb.sh build-deb >build-deb/build.log 2>&1; then
    count "package: build" 0
    # Errors fail the stage (debian/droce.lintian-overrides says why the BPF objects' are
    # overridden); warnings are printed: no manual pages yet.
    lintian --fail-on error build-deb/*.changes
    count "package: lintian" $?
    DEBS=$PWD/build-deb bash tests/install/package.sh
    count "package: tests/install/package.sh" $?
  else
    tail -40 build-deb/build.log
    count "package: build" 1
  fi
  stage_end
fi

if wants sanitizers; then
  stage_begin sanitizers
  # One tree for every sanitizer run: clang (libFuzzer needs it), ASan+UBSan,
  # the provider and its DPDK dataplane included.
  # Meson puts ccache in front of the compilers it finds itself, not of those
  # CC and CXX name: so here, where there is one.
  cache=""; command -v ccache >/dev/null && cache="ccache "
  if { [ -f build-san/build.ninja ] || CC="${cache}clang" CXX="${cache}clang++" meson setup build-san -Dbuildtype=debugoptimized \
         -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true >/dev/null; } &&
     quiet_ninja build-san; then
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
      meson test -C build-san --no-rebuild --suite unit --suite golden --print-errorlogs --num-processes 2 \
        --timeout-multiplier 3
    meson_suite_counts build-san/meson-logs/testlog.json asan

    # The provider through an unmodified libibverbs, which loads it; the
    # sanitizers' runtime is the test executable's (clang links it there).
    echo "-- verbs_api under ASan+UBSan"
    ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      DROCE_PROVIDER_DIR="$PWD/build-san/drivers/verbs" timeout 900 \
      env LD_PRELOAD="$PWD/build-san/drivers/verbs/libdroce-preload.so" build-san/tests/verbs/verbs_api_test --gtest_brief=1
    count "asan: verbs_api" $?

    if [ "$FUZZ_SECONDS" -gt 0 ]; then
      echo "-- fuzzing (${FUZZ_SECONDS}s per target)"
      tests/fuzz/run_fuzz.sh "$FUZZ_SECONDS" build-san
      count "fuzz" $?
    fi
  else
    count "sanitizer build" 1
  fi
  stage_end
fi

if wants tsan; then
  stage_begin tsan
  # The code that runs on several threads under ThreadSanitizer: the
  # provider (posts from several threads, ibv_wr_* batches, the progress
  # thread's hand-over, event channels) through libibverbs, the device
  # mutex, the TSC clock and the shared frame rings. DPDK itself is not
  # instrumented (tests/verbs/tsan.supp says what that hides).
  tsan_tests="sim/sim_test drivers/verbs/device_mutex_test drivers/verbs/tsc_clock_test"
  if { [ -f build-tsan/build.ninja ] || meson setup build-tsan -Dbuildtype=debugoptimized \
         -Db_sanitize=thread -Db_lundef=false >/dev/null; } &&
     quiet_ninja build-tsan tests/verbs/verbs_api_test drivers/verbs/libdroce-rdmav34.so \
       drivers/verbs/libdroce-preload.so $tsan_tests; then
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/verbs/tsan.supp"
    for t in $tsan_tests; do
      echo "-- $t under TSan"
      timeout 600 build-tsan/$t --gtest_brief=1
      count "tsan: $t" $?
    done
    echo "-- verbs_api under TSan"
    tsan_lib=$(gcc -print-file-name=libtsan.so)
    DROCE_PROVIDER_DIR="$PWD/build-tsan/drivers/verbs" timeout 900 \
      env LD_PRELOAD="$tsan_lib $PWD/build-tsan/drivers/verbs/libdroce-preload.so" \
      build-tsan/tests/verbs/verbs_api_test --gtest_brief=1
    count "tsan: verbs_api" $?
    unset TSAN_OPTIONS
  else
    count "tsan build" 1
  fi
  stage_end
fi

if wants bench; then
  stage_begin bench
  # Instructions are the stable measure on a shared host (wall clock is not):
  # the check prints the count and a WARNING line above +3 %, exit 0 either
  # way; 2 when it cannot run (no valgrind): noted, not a failure.
  out=$(bash tools/bench/engine/check_instructions.sh 2>&1)
  rc=$?
  echo "$out"
  if [ "$rc" -eq 0 ]; then
    line=$(grep -E '^(ok|WARNING):' <<<"$out" | paste -sd ';' -)
    benchmarks+=("engine instructions per 64 B WRITE: ${line:-$(tr '\n' ' ' <<<"$out")}")
  else
    benchmarks+=("engine instructions per 64 B WRITE: not measured (check_instructions.sh exit $rc)")
  fi
  stage_end
fi

finish
