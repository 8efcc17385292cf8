//! Any byte string: the parser returns a value or an error (never panics, never allocates
//! beyond the input), and every tensor a parsed file lists can be read and dequantised.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rexvqa_engine::gguf::{Gguf, SliceSource};
use rexvqa_engine::quant::dequantize;

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse_prefix(data, data.len() as u64) else {
        return;
    };
    let _ = g.summary_json();
    let mut src = SliceSource(data);
    for t in &g.tensors {
        let Ok(bytes) = g.read_tensor(&mut src, t) else {
            continue;
        };
        // Bounded: the parser guarantees the tensor fits in the input.
        let mut out = vec![0f32; t.n_elements() as usize];
        let _ = dequantize(t.ty, &bytes, &mut out);
    }
});
