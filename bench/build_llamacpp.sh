#!/usr/bin/env bash
# Builds llama.cpp's llama-bench and llama-mtmd-cli from the llama.cpp that the PyPI
# llama-cpp-python sdist vendors (PyPI is reachable where GitHub is not).
#   bench/build_llamacpp.sh [cpu|vulkan|cuda] [DIR]   (default: cpu, ~/.cache/rexvqa-web/llama.cpp)
# Prints the bin/ folder to pass to bench/compare.py --llama-bin.
set -euo pipefail
backend="${1:-cpu}"
dir="${2:-$HOME/.cache/rexvqa-web/llama.cpp}"
version=0.3.36
mkdir -p "$dir"
cd "$dir"
if [ ! -d "llama_cpp_python-$version" ]; then
  python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$version" -d . >&2
  tar xzf "llama_cpp_python-$version.tar.gz"
fi
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
case "$backend" in
  cpu) flags=() ;;
  vulkan) flags=(-DGGML_VULKAN=ON) ;;
  cuda) flags=(-DGGML_CUDA=ON) ;;
  *) echo "backend must be cpu, vulkan or cuda" >&2; exit 2 ;;
esac
build="$dir/build-$backend"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF "${flags[@]}" >&2
cmake --build "$build" -j"$(nproc)" --target llama-bench llama-mtmd-cli >&2
echo "$build/bin"
