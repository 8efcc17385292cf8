//! Static constructors run once per instance, not once per call into WebAssembly.
//!
//! Why: CubeCL's IR (through `pliron`) registers its dialects, ops and attributes with the
//! `inventory` crate, whose registrations are static constructors. A wasm module that never
//! calls `__wasm_call_ctors` itself is "command-style" to the linker, which then runs every
//! constructor at the start of *every exported function*, and wasm-bindgen's glue calls an
//! export each time a JavaScript object enters wasm (`__externref_table_alloc`): each WebGPU
//! bind group, each descriptor. In a browser that made the worker's host time per kernel
//! dispatch many times native's, most of it in `__wasm_call_ctors` and `inventory` submissions
//! (`bench/results/ci-vm-2core-wasm-constructors.json`). Calling the constructors from an
//! exported function (each binary's `main`) makes the linker treat the module as a reactor and
//! leave the other exports alone (see the `inventory` crate's docs, "WebAssembly and
//! constructors").

#[cfg(target_family = "wasm")]
unsafe extern "C" {
    fn __wasm_call_ctors();
}

/// Runs the module's static constructors. Call it once, first thing in `main`.
pub fn run_once() {
    // SAFETY: the linker-made constructor list; `inventory`'s registrations, the only
    // constructors in this module, are idempotent, and this runs before anything reads them.
    #[cfg(target_family = "wasm")]
    unsafe {
        __wasm_call_ctors();
    }
}
