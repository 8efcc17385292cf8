#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-mtmd-cli from the llama.cpp that the PyPI
# llama-cpp-python sdist vendors (PyPI is reachable where GitHub is not).
#   bench/build_llamacpp.sh [cpu|vulkan|cuda] [DIR]   (default: cpu, ~/.cache/rexvqa-web/llama.cpp)
# Prints the bin/ folder to pass to bench/compare.py --llama-bin.
# Environment:
#   LLAMA_PORTABLE=1  binaries to carry to another machine (bench/device/pack.sh): ggml and llama
#                     linked statically (two files, no .so beside them), no -march=native (the
#                     other machine's CPU may lack this one's extensions; AVX2/FMA stay on) and no
#                     OpenSSL (only model downloads use it); built in build-BACKEND-portable.
#   JOBS=N            parallel compile jobs (default: all cores).
set -euo pipefail
backend="${1:-cpu}"
dir="${2:-$HOME/.cache/rexvqa-web/llama.cpp}"
version=0.3.36
mkdir -p "$dir"
cd "$dir"
if [ ! -d "llama_cpp_python-$version" ]; then
  # The sdist straight from PyPI's simple index, checked against its sha256: `pip download
  # --no-binary :all:` would prepare its metadata, building cmake from source on the way (~10 min).
  python3 - "$version" >&2 <<'PY'
import hashlib, re, sys, urllib.request as u
version = sys.argv[1]
name = f"llama_cpp_python-{version}.tar.gz"
index = u.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
url, sha = re.search(r'href="([^"#]*/' + re.escape(name) + r')#sha256=([0-9a-f]{64})"', index).groups()
data = u.urlopen(url).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit(f"{name}: sha256 mismatch")
open(name, "wb").write(data)
PY
  tar xzf "llama_cpp_python-$version.tar.gz"
fi
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
case "$backend" in
  cpu) flags=() ;;
  vulkan)
    # Debian: apt install glslc libvulkan-dev spirv-headers (the shader compiler and the loader's headers).
    command -v glslc >/dev/null || { echo "the Vulkan build needs glslc (apt install glslc libvulkan-dev spirv-headers)" >&2; exit 2; }
    flags=(-DGGML_VULKAN=ON) ;;
  cuda) flags=(-DGGML_CUDA=ON) ;;
  *) echo "backend must be cpu, vulkan or cuda" >&2; exit 2 ;;
esac
build="$dir/build-$backend"
if [ "${LLAMA_PORTABLE:-0}" = 1 ]; then
  flags+=(-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF)
  build="$dir/build-$backend-portable"
fi
if [ "$backend" = vulkan ] && ! grep -q VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h; then
  # Debian 12's Vulkan headers (1.3.239) predate VK_EXT_layer_settings, which llama.cpp uses only
  # to turn on best-practice checks in the validation layer: pass no settings (behaviour without
  # the validation layer is unchanged). Idempotent.
  python3 - "$src/ggml/src/ggml-vulkan/ggml-vulkan.cpp" >&2 <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
a = s.find("    std::vector<vk::LayerSettingEXT> settings = {")
if a >= 0:
    b = s.index("vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);\n", a)
    s = s[:a] + s[b + len("vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);\n"):]
    s = s.replace("layers, extensions, &layer_setting_info);", "layers, extensions);")
    open(p, "w").write(s)
PY
fi
if ! command -v cmake >/dev/null; then
  # CMake's PyPI wheel, in a venv of its own (Debian's python refuses user installs).
  python3 -m venv "$dir/cmake-venv" >&2 && "$dir/cmake-venv/bin/pip" install -q cmake >&2
  export PATH="$dir/cmake-venv/bin:$PATH"
fi
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF "${flags[@]}" >&2
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target llama-bench llama-mtmd-cli >&2
echo "$build/bin"
