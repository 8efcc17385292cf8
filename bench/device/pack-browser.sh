#!/usr/bin/env bash
# The browser GPU kit, pack side (issue #33): everything the app's Benchmark card needs to run in
# headless Chromium on a GPU machine that has no network, no node and no browser, cut into parts
# that each fit one run-tool call beside the working tree (../shared/GPU-BROWSER.md).
#
#   bench/device/pack-browser.sh             build bench/device/bkit/{1,2,...}/
#   bench/device/pack-browser.sh --dry-run   check the prerequisites and print the plan
#
# One xz stream of one tar, cut into parts: part N goes to the GPU machine in call N
# (bench/device/run-browser.sh stores it; the call that brings the last part unpacks and runs).
# In the tar:
#   chromium/        Debian 12's chromium-headless-shell (the binary and its .pak files) with
#                    chromium-common's V8 snapshots, ICU data, libvulkan/ANGLE/SwiftShader
#                    libraries and locales/en-US.pak
#   lib/             the shared libraries the binary needs (ldd, less glibc) and NSS's modules
#   fonts/           fonts.conf and one DejaVu font: the renderer aborts without a font config
#   node/node        this machine's node binary (needs glibc and libstdc++ only)
#   node_modules/playwright-core
#   dist/            a release build of the app (trunk build --release)
#   manifest.txt     commit, versions and each part's sha256
#
# Environment: BKIT_DIR (default bench/device/bkit), BKIT_FIRST_ROOM_MIB (room in the first call,
# which also carries the native kit; default: 64 - tree - native kit - 1), BKIT_ROOM_MIB (room in
# the later calls; default 64 - tree - 1), BKIT_DIST (use this dist/ instead of building one).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DRY_RUN=0
[ "${1:-}" = --dry-run ] && DRY_RUN=1
BKIT_DIR=${BKIT_DIR:-$ROOT/bench/device/bkit}
KIT_DIR=${KIT_DIR:-$ROOT/bench/device/kit}
export PATH="$HOME/.cargo/bin:$ROOT/node_modules/.bin:$PATH"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'pack-browser.sh: %s\n' "$*" >&2; exit 1; }

missing=()
command -v apt-get >/dev/null || missing+=("apt-get (a Debian 12 machine)")
command -v xz >/dev/null || missing+=("xz (apt install xz-utils)")
command -v node >/dev/null || missing+=("node (scripts/setup.sh)")
[ -d node_modules/playwright-core ] || missing+=("node_modules/playwright-core (npm ci)")
[ -n "${BKIT_DIST:-}" ] || command -v trunk >/dev/null || missing+=("trunk (scripts/setup.sh)")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'pack-browser.sh: missing:\n' >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 2
fi

# The run tool carries at most 64 MiB a call: the working tree (tracked files and untracked ones
# git does not ignore) plus what the call names in carry.
tree=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
kit=0
[ -d "$KIT_DIR" ] && kit=$(du -sb "$KIT_DIR" | cut -f1)
mib=1048576
room=${BKIT_ROOM_MIB:-$(((64 * mib - tree) / mib - 1))}
first=${BKIT_FIRST_ROOM_MIB:-$(((64 * mib - tree - kit) / mib - 1))}
[ "$room" -ge 8 ] || die "the working tree ($((tree / mib)) MiB) leaves no room for the parts"
[ "$first" -ge 1 ] || die "the native kit leaves no room in the first call: carry it alone (BKIT_FIRST_ROOM_MIB)"
if [ "$DRY_RUN" = 1 ]; then
  echo "would fetch: chromium-headless-shell chromium-common fonts-dejavu-core (apt-get download)"
  echo "would build: trunk build --release (or take BKIT_DIST)"
  echo "would write: $BKIT_DIR/N/part.N (first ${first} MiB beside the native kit, then ${room} MiB each)"
  exit 0
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/rexvqa-bpack.XXXXXX")
trap 'rm -rf "$stage"' EXIT
p=$stage/p
mkdir -p "$p/chromium" "$p/lib" "$p/fonts" "$p/node" "$p/node_modules" "$stage/debs"

say "Debian packages (apt-get download)"
(cd "$stage/debs" && apt-get download chromium-headless-shell chromium-common fonts-dejavu-core >&2)
for d in "$stage"/debs/*.deb; do dpkg-deb -x "$d" "$stage/x"; done
x=$stage/x/usr/lib/chromium
cp "$x"/chromium-headless-shell "$x"/headless_*.pak "$p/chromium/"
# What the headless shell reads from chromium-common: V8 snapshots, ICU, the Vulkan loader and
# ANGLE (WebGPU goes through Dawn on Vulkan; the GPU flags name ANGLE's Vulkan backend too).
# SwiftShader too: the check without a GPU runs on it, and a GPU machine whose driver Chromium
# cannot reach shows it as the (fallback) adapter rather than none.
for f in icudtl.dat snapshot_blob.bin v8_context_snapshot.bin libvulkan.so.1 libEGL.so libGLESv2.so \
  libvk_swiftshader.so vk_swiftshader_icd.json; do
  cp "$x/$f" "$p/chromium/"
done
mkdir -p "$p/chromium/locales" && cp "$x/locales/en-US.pak" "$p/chromium/locales/"

say "shared libraries (ldd, less glibc) and NSS's modules"
glibc='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64)\.so'
ldd "$p/chromium/chromium-headless-shell" | awk '$3 ~ /^\// { print $3 }' | while read -r lib; do
  base=$(basename "$lib")
  [[ $base =~ $glibc ]] && continue
  cp -L "$lib" "$p/lib/$base"
done
# NSS opens these by name at run time (certificates, even for 127.0.0.1 pages).
for f in libsoftokn3.so libfreebl3.so libfreeblpriv3.so libnssckbi.so libnssdbm3.so; do
  for d in /usr/lib/x86_64-linux-gnu/nss /usr/lib/x86_64-linux-gnu; do
    [ -e "$d/$f" ] && { cp -L "$d/$f" "$p/lib/$f"; break; }
  done
done
ldd "$p/chromium/chromium-headless-shell" | grep -q 'not found' && die "the headless shell needs libraries this machine lacks"

cp "$stage/x/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf" "$p/fonts/"
# Relative to the folder run-browser.sh unpacks into (it rewrites @ROOT@).
cat >"$p/fonts/fonts.conf" <<'EOF'
<?xml version="1.0"?>
<fontconfig><dir>@ROOT@/fonts</dir><cachedir>@ROOT@/fonts/cache</cachedir></fontconfig>
EOF

say "node and playwright-core"
node_bin=$(command -v node)
cp -L "$node_bin" "$p/node/node"
cp -r node_modules/playwright-core "$p/node_modules/"

if [ -n "${BKIT_DIST:-}" ]; then
  dist=$BKIT_DIST
else
  say "the app: trunk build --release"
  TRUNK_OFFLINE=true TRUNK_SKIP_VERSION_CHECK=true trunk build --release --dist "$stage/dist" >&2
  dist=$stage/dist
fi
[ -f "$dist/index.html" ] || die "no index.html in $dist"
cp -r "$dist" "$p/dist"

say "one xz stream, cut into parts"
# The libraries, fonts, scripts and app first, the two large binaries last: the first part (beside
# the native kit) then holds the small things whole.
(cd "$p" && tar -cf - lib fonts node_modules dist chromium node) | xz -9e -T1 >"$stage/all.tar.xz"
total=$(stat -c %s "$stage/all.tar.xz")
rm -rf "$BKIT_DIR"
mkdir -p "$BKIT_DIR"
off=0 n=0
while [ "$off" -lt "$total" ]; do
  n=$((n + 1))
  size=$((room * mib))
  [ "$n" = 1 ] && size=$((first * mib))
  mkdir -p "$BKIT_DIR/$n"
  dd if="$stage/all.tar.xz" of="$BKIT_DIR/$n/part.$n" bs=1M iflag=skip_bytes,count_bytes skip="$off" count="$size" status=none
  off=$((off + $(stat -c %s "$BKIT_DIR/$n/part.$n")))
done
commit=$(git rev-parse HEAD)
git diff --quiet HEAD -- app engine Cargo.lock || commit+=" (with uncommitted changes)"
{
  echo "rexvqa browser GPU kit (bench/device/pack-browser.sh), made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $commit"
  echo "chromium-headless-shell: $(dpkg-deb -f "$stage"/debs/chromium-headless-shell_*.deb Version)"
  echo "node: $("$node_bin" --version), playwright-core: $(node -p 'require("./node_modules/playwright-core/package.json").version')"
  echo "stream: $total bytes, sha256 $(sha256sum "$stage/all.tar.xz" | cut -d' ' -f1)"
  echo "parts: $n"
  for i in $(seq 1 "$n"); do echo "part.$i $(stat -c %s "$BKIT_DIR/$i/part.$i") $(sha256sum "$BKIT_DIR/$i/part.$i" | cut -d' ' -f1)"; done
} >"$stage/manifest.txt"
for i in $(seq 1 "$n"); do cp "$stage/manifest.txt" "$BKIT_DIR/$i/manifest.txt"; done
cat "$stage/manifest.txt" >&2
echo "$BKIT_DIR: $n parts (first ${first} MiB, then ${room} MiB; the tree is $((tree / mib)) MiB, the native kit $((kit / mib)) MiB)" >&2
