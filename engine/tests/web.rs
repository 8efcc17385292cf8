//! Engine tests that run inside headless Chromium (wasm32 + WebGPU): the browser path must
//! compute what the native path computes.
#![cfg(target_arch = "wasm32")]

use rexvqa_engine::gguf::write::{TensorData, Writer};
use rexvqa_engine::gguf::{GgmlType, Gguf, SliceSource, Value};
use rexvqa_engine::quant;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn gguf_reads_asynchronously_in_the_browser() {
    let bytes = Writer::new()
        .kv("general.architecture", Value::String("gemma3".into()))
        .tensor(TensorData {
            name: "w".into(),
            dims: vec![256, 2],
            ty: GgmlType::Q4_K,
            bytes: quant::random_blocks(GgmlType::Q4_K, 512, 3),
        })
        .to_bytes();
    let src = SliceSource(bytes.clone());
    let g = Gguf::read_async(&src).await.unwrap();
    assert_eq!(g.architecture().unwrap(), "gemma3");
    let t = g.tensor("w").unwrap();
    let raw = g.read_tensor_async(&src, t).await.unwrap();
    let y = quant::dequantize_vec(t.ty, &raw, 512).unwrap();
    // The same bytes dequantised natively are checked bit-exact against gguf-py; here the wasm
    // build must agree with itself run through the sync path.
    let mut sync = SliceSource(bytes);
    let raw2 = g.read_tensor(&mut sync, t).unwrap();
    assert_eq!(y, quant::dequantize_vec(t.ty, &raw2, 512).unwrap());
}
