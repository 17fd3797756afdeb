#!/usr/bin/env bash
# Installs the Debian packages aiinfra builds against, if any is missing.
# Why each: PCRE2 (pre-tokenizer regexes with Unicode properties + JIT), cJSON (small,
# well-tested JSON reader/writer), utf8proc (Unicode normalization, NFC), xxHash (fast
# hashing for vocab maps and, later, prefix-cache blocks), cmocka (C unit-test runner),
# clang + its runtime (libFuzzer), python3-venv (the reference-test environment),
# libmicrohttpd (the OpenAI-compatible HTTP server: a small, mature C server library with its own
# thread pool, chunked streaming responses and connection-close callbacks, from GNU),
# libcurl (the load generator's HTTP client: the standard C client, streaming + many connections).
set -euo pipefail
need=()
have_hdr() { [ -e "/usr/include/$1" ] || [ -e "/usr/include/x86_64-linux-gnu/$1" ]; }
have_hdr pcre2.h        || need+=(libpcre2-dev)
have_hdr cjson/cJSON.h  || need+=(libcjson-dev)
have_hdr utf8proc.h     || need+=(libutf8proc-dev)
have_hdr xxhash.h       || need+=(libxxhash-dev)
have_hdr cmocka.h       || need+=(libcmocka-dev)
have_hdr microhttpd.h   || need+=(libmicrohttpd-dev)
have_hdr curl/curl.h    || need+=(libcurl4-openssl-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v gcc >/dev/null        || need+=(gcc)
command -v xz >/dev/null         || need+=(xz-utils)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "${1:-}" = "--fuzz" ]; then   # make fuzz: clang with libFuzzer's runtime
  command -v clang >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-dev)
fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "deps: installing ${need[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
