#!/usr/bin/env bash
# The GPU evidence kit, pack side (issue #15): builds bench/device/kit/ (git-ignored, at most
# 60 MiB) on this CPU machine, for bench/device/run.sh to run on a GPU machine that has no network
# and takes at most 64 MiB of carried files.
#
#   bench/device/pack.sh             build everything missing, then assemble the kit
#   bench/device/pack.sh --dry-run   check the prerequisites and print the plan; builds nothing
#
# The kit:
#   busybox          Debian's static busybox: tar, unxz, dpkg-deb, gunzip on any x86-64 Linux
#   payload.tar.xz   bin/rexvqa (release, stripped), bin/llama-bench and bin/llama-mtmd-cli (llama.cpp,
#                    Vulkan backend, ggml linked statically, stripped), data/gemma3-tokenizer.gguf
#                    (the Gemma 3 270M GGUF's tokenizer, no tensors: `rexvqa synth-model
#                    --tokenizer-from` needs nothing else). One xz stream with a 64 MiB window, so
#                    the ggml code and Vulkan shaders both llama.cpp binaries carry are stored once.
#   debs/            the Vulkan loader, what NVIDIA's Vulkan driver links against (glvnd, X11 client
#                    libraries) and vulkaninfo, as Debian 12 packages (apt-get download)
#   cxx/, glibc/     Debian 12's C++ runtime and glibc, used there only if a binary cannot start
#   manifest.txt     what is in it: commit, versions, sizes, sha256
#
# Environment: KIT_DIR (default bench/device/kit), REXVQA_CACHE (default ~/.cache/rexvqa-web),
# JOBS (llama.cpp compile jobs, default 2), CARGO_TARGET_DIR as for cargo, KIT_LLAMA=0 (no llama.cpp:
# a kit for rexvqa's own figures and the browser kit's first call; run.sh then skips the llama.cpp
# steps and the comparison takes the anchors already measured on that GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DRY_RUN=0
[ "${1:-}" = --dry-run ] && DRY_RUN=1
KIT_DIR=${KIT_DIR:-$ROOT/bench/device/kit}
CACHE=${REXVQA_CACHE:-$HOME/.cache/rexvqa-web}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LIMIT_MIB=60
GEMMA=$CACHE/gemma-3-270m-q4_k_m.gguf
PY=$CACHE/venv/bin/python
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'pack.sh: %s\n' "$*" >&2; exit 1; }

# Packages fetched with apt-get download (Debian 12). The loader set goes on LD_LIBRARY_PATH
# there; libGLX_nvidia.so.0 (the usual ICD library) needs libGLdispatch (glvnd) and libX11/libXext,
# which images built for CUDA usually lack.
LOADER_DEBS=(libvulkan1 libglvnd0 libegl1 libopengl0 libgl1 libglx0 libgles2 libx11-6 libx11-xcb1 libxext6 libxcb1 libxau6 libxdmcp6
  libbsd0 libmd0 libwayland-client0 libffi8 libxrandr2 libxrender1 vulkan-tools)
CXX_DEBS=(libstdc++6 libgcc-s1 libgomp1)
GLIBC_DEBS=(libc6)

# --- prerequisites ------------------------------------------------------------------------------
missing=()
command -v cargo >/dev/null || missing+=("cargo (rustup)")
command -v strip >/dev/null || missing+=("strip (apt install binutils)")
command -v xz >/dev/null || missing+=("xz (apt install xz-utils)")
command -v apt-get >/dev/null || missing+=("apt-get (a Debian 12 machine)")
[ "${KIT_LLAMA:-1}" = 0 ] || command -v glslc >/dev/null || missing+=("glslc, libvulkan-dev, spirv-headers (apt install glslc libvulkan-dev spirv-headers)")
[ -f "$GEMMA" ] || missing+=("$GEMMA (scripts/setup.sh assembles it)")
"$PY" -c 'import gguf' 2>/dev/null || missing+=("gguf-py in $CACHE/venv (scripts/setup.sh makes the venv)")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'pack.sh: missing:\n' >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 2
fi
if [ "$DRY_RUN" = 1 ]; then
  echo "would build: cargo build --release -p rexvqa-engine --bin rexvqa (into $TARGET)"
  [ "${KIT_LLAMA:-1}" = 0 ] && echo "no llama.cpp (KIT_LLAMA=0)" ||
    echo "would build: LLAMA_PORTABLE=1 JOBS=${JOBS:-2} nice -n 10 bench/build_llamacpp.sh vulkan"
  echo "would write: $KIT_DIR/{busybox,payload.tar.xz,debs/,cxx/,glibc/,manifest.txt} (limit $LIMIT_MIB MiB)"
  echo "would fetch: ${LOADER_DEBS[*]} ${CXX_DEBS[*]} ${GLIBC_DEBS[*]} busybox-static"
  exit 0
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/rexvqa-pack.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/payload/bin" "$stage/payload/data"

# --- rexvqa -------------------------------------------------------------------------------------
say "rexvqa: release build"
nice -n 10 cargo build --release -p rexvqa-engine --bin rexvqa >&2
cp "$TARGET/release/rexvqa" "$stage/payload/bin/rexvqa"
strip "$stage/payload/bin/rexvqa"

# --- llama.cpp (Vulkan) -------------------------------------------------------------------------
llama_files=()
if [ "${KIT_LLAMA:-1}" != 0 ]; then
  say "llama.cpp: Vulkan build, ggml linked statically (the first build takes ~40 min on 2 cores)"
  llama_bin=$(LLAMA_PORTABLE=1 JOBS=${JOBS:-2} nice -n 10 bench/build_llamacpp.sh vulkan)
  llama_files=(bin/llama-bench bin/llama-mtmd-cli)
  for b in llama-bench llama-mtmd-cli; do
    cp "$llama_bin/$b" "$stage/payload/bin/$b"
    strip "$stage/payload/bin/$b"
    # Statically linked ggml/llama: nothing of the build folder may be needed at run time.
    if ldd "$stage/payload/bin/$b" | grep -E 'libggml|libllama|libmtmd|not found'; then
      die "$b needs libraries the kit does not carry (see above)"
    fi
  done
  llama_version=$(sed -n 's/^version=//p' bench/build_llamacpp.sh)
  llama_commit=$(sed -n 's/.*LLAMA_COMMIT = "\([^"]*\)".*/\1/p' "$llama_bin/../common/build-info.cpp" 2>/dev/null | head -n 1 || true)
fi

# --- tokenizer-only Gemma 3 GGUF ----------------------------------------------------------------
say "tokenizer-only Gemma 3 GGUF"
"$PY" bench/device/tokenizer_gguf.py "$GEMMA" "$stage/payload/data/gemma3-tokenizer.gguf"
# What run.sh will do with it there: synth-model reads only the tokenizer (checked on a tiny write:
# the metadata is read and copied before any tensor is written).
"$stage/payload/bin/rexvqa" inspect "$stage/payload/data/gemma3-tokenizer.gguf" >/dev/null

# --- packages -----------------------------------------------------------------------------------
say "Debian packages (apt-get download)"
for d in debs cxx glibc bb; do mkdir -p "$stage/$d"; done
(cd "$stage/debs" && apt-get download "${LOADER_DEBS[@]}" >&2)
(cd "$stage/cxx" && apt-get download "${CXX_DEBS[@]}" >&2)
(cd "$stage/glibc" && apt-get download "${GLIBC_DEBS[@]}" >&2)
(cd "$stage/bb" && apt-get download busybox-static >&2 && dpkg-deb -x busybox-static_*.deb x)

# --- assemble -----------------------------------------------------------------------------------
say "assembling $KIT_DIR"
rm -rf "$KIT_DIR"
mkdir -p "$KIT_DIR"
cp "$stage/bb/x/bin/busybox" "$KIT_DIR/busybox"
for d in debs cxx glibc; do
  mkdir -p "$KIT_DIR/$d"
  # apt-get names files with the epoch's colon escaped (%3a): plain names travel anywhere.
  for f in "$stage/$d"/*.deb; do cp "$f" "$KIT_DIR/$d/$(basename "$f" | sed 's/%3a/_/g')"; done
done
# The two llama.cpp binaries side by side in the tar, so xz finds the second's copy of ggml in its
# window; one thread, because xz's threaded mode cuts the stream into independent blocks.
tar -C "$stage/payload" -cf - "${llama_files[@]}" bin/rexvqa data/gemma3-tokenizer.gguf |
  xz -9e -T1 >"$KIT_DIR/payload.tar.xz"
# The busybox unxz that run.sh falls back to must read it.
"$KIT_DIR/busybox" unxz -c "$KIT_DIR/payload.tar.xz" | "$KIT_DIR/busybox" tar -t >/dev/null ||
  die "busybox cannot read payload.tar.xz"

commit=$(git rev-parse HEAD)
git diff --quiet HEAD -- engine Cargo.lock Cargo.toml || commit+=" (engine with uncommitted changes)"
{
  echo "rexvqa GPU evidence kit (bench/device/pack.sh), made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $commit"
  echo "rexvqa: $("$stage/payload/bin/rexvqa" --version)"
  [ "${KIT_LLAMA:-1}" = 0 ] && echo "llama.cpp: none (KIT_LLAMA=0)" ||
    echo "llama.cpp: ${llama_commit:-?} from the llama-cpp-python $llama_version sdist (bench/build_llamacpp.sh vulkan, LLAMA_PORTABLE=1)"
  echo "built on: $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
  echo "payload (uncompressed):"
  (cd "$stage/payload" && find . -type f -printf '  %p %s bytes\n' | sort)
  echo "files:"
  (cd "$KIT_DIR" && find . -type f ! -name manifest.txt -print0 | sort -z | xargs -0 sha256sum | sed 's/^/  /')
} >"$KIT_DIR/manifest.txt"

size=$(du -sb "$KIT_DIR" | cut -f1)
mib=$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "kit: $KIT_DIR, $mib MiB in $(find "$KIT_DIR" -type f | wc -l) files" | tee -a "$KIT_DIR/manifest.txt" >&2
[ "$size" -le $((LIMIT_MIB * 1048576)) ] || die "the kit is $mib MiB, over the $LIMIT_MIB MiB limit"
# The run tool's 64 MiB covers the whole working tree that travels (tracked and untracked files
# git does not ignore) plus the carried kit, so the kit's real room is what the tree leaves.
tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
total_mib=$(awk -v a="$tree" -v b="$size" 'BEGIN { printf "%.1f", (a + b) / 1048576 }')
echo "with this checkout's working tree ($(awk -v a="$tree" 'BEGIN { printf "%.1f", a / 1048576 }') MiB) the run tool carries $total_mib MiB of its 64" |
  tee -a "$KIT_DIR/manifest.txt" >&2
[ $((tree + size)) -le $((64 * 1048576)) ] || die "working tree + kit = $total_mib MiB, over the run tool's 64 MiB"
echo "$KIT_DIR"
