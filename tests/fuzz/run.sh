#!/bin/sh
# Builds every fuzz target with clang's libFuzzer straight from lib/ (no meson
# needed) and runs each for SECONDS (default 60). Prints one line per target:
# name, inputs executed, crashing inputs kept (under $WORK/<target>/artifacts/).
# Exits non-zero when any target crashed.
#
#   tests/fuzz/run.sh [SECONDS]
#   CC=clang-14 WORK=/tmp/fuzz TARGETS="stat maps_file" tests/fuzz/run.sh 10
set -eu

secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cc=${CC:-clang}
work=${WORK:-$root/build-fuzz}
targets=${TARGETS:-"stat sanitize status maps maps_file environ parse_long cgroup txncli devmap manifest halt config memcg inventory ckptmeta archive history park gpubook park_request"}

case $secs in
''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

mkdir -p "$work/obj"
jsonc_cflags=$(pkg-config --cflags json-c)
jsonc_libs=$(pkg-config --libs json-c)
libinc=""
for d in "$root"/lib/*/; do libinc="$libinc -I$d"; done
cflags="-std=gnu11 -D_GNU_SOURCE -DCUDASNAP_VERSION=\"fuzz\" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I$root/include $libinc -I$root/src -I$here"

# The library once, instrumented; each target links what it uses from it.
for src in "$root"/lib/*/*.c; do
	"$cc" $cflags $jsonc_cflags -c -o "$work/obj/$(basename "$src" .c).o" "$src"
done
for t in $targets; do
	extra=""
	# The option parser lives in src/; a stub stands in for src/main.c.
	[ "$t" = txncli ] && extra="$root/src/txncli.c $here/cli_stub.c"
	# The interposer's request parser (park/request.c) needs nothing else.
	[ "$t" = park_request ] && extra="$root/park/request.c"
	"$cc" $cflags -o "$work/fuzz_$t" "$here/fuzz_$t.c" $extra "$work"/obj/*.o $jsonc_libs -ldl -lpthread
done

status=0
printf '%-12s %12s %8s\n' target runs crashes
for t in $targets; do
	out="$work/$t"
	rm -rf "$out"
	mkdir -p "$out/corpus" "$out/artifacts"
	dict=""
	[ -f "$here/$t.dict" ] && dict="-dict=$here/$t.dict"
	# One child process at a time that libFuzzer restarts after a crash, so
	# that a known bug does not end the run; new inputs go to the scratch
	# corpus, the committed seeds are only read.
	"$work/fuzz_$t" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
		-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 $dict \
		-artifact_prefix="$out/artifacts/" \
		"$out/corpus" "$here/corpus/$t" >"$out/log" 2>&1 || true
	runs=$(sed -n 's/^#\([0-9][0-9]*\): .*/\1/p' "$out/log" | tail -n 1)
	crashes=$(find "$out/artifacts" -type f | wc -l)
	[ "$crashes" -eq 0 ] || status=1
	printf '%-12s %12s %8s\n' "$t" "${runs:-?}" "$crashes"
done
exit $status
