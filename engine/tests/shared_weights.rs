//! A layer's small attention weights share one device buffer on a GPU
//! (`Loader::qmatrices_shared`, which the tower's and the decoder's layers load through): in a
//! browser, Dawn places every buffer under 4 MiB in a power-of-two block, and MedGemma 4B's
//! 2.65 MB vision projections would each take 4 MiB. The views must share the buffer (a slice at
//! a misaligned offset would be a copy) and multiply exactly as the matrices loaded apart do; a
//! joined part (q, k and v rows) exactly as its matrices apart. One test in this binary: it reads
//! the process's device pool counts, which a test beside it would move.

mod common;

use burn::tensor::{Distribution, Tensor};
use rexvqa_engine::gguf::{FileSource, Gguf};
use rexvqa_engine::model::load::{Loader, Progress};
use rexvqa_engine::quant::QMatrix;

#[test]
fn attention_weights_share_one_buffer_and_multiply_as_loaded_apart() {
    let golden = common::golden_json_gz("tiny_tiny-q8_0.json.gz");
    let (text, mmproj) = common::tiny_pair(&golden);
    let device = rexvqa_engine::device::wgpu().expect("a wgpu adapter (lavapipe)");

    let src = FileSource::open(&mmproj).unwrap();
    let g = pollster::block_on(Gguf::read_async(&src)).unwrap();
    let mut progress = |_: &Progress| {};
    let mut l = Loader::new(&g, &src, &device, 1 << 20, &mut progress);
    let name = |n: &str| format!("v.blk.0.{n}.weight");
    let (q, k, v, o) = (
        name("attn_q"),
        name("attn_k"),
        name("attn_v"),
        name("attn_out"),
    );
    let h = l.dims(&q).unwrap()[0] as usize;

    let usage = || device.memory_pool_usage().expect("a GPU pool");
    let before = usage();
    let shared = pollster::block_on(
        l.qmatrices_shared(&[(&[(&q, h), (&k, h), (&v, h)], h), (&[(&o, h)], h)]),
    )
    .unwrap()
    .expect("the tiny tower's projections share a buffer on a GPU");
    let after = usage();
    let bytes: usize = shared
        .iter()
        .map(|m| m.rows * rexvqa_engine::quant::pack::row_words(m.ty, m.cols) * 4)
        .sum();
    assert_eq!(shared.len(), 2);
    assert_eq!((shared[0].rows, shared[1].rows), (3 * h, h));
    assert_eq!(
        after.number_allocs - before.number_allocs,
        1,
        "one allocation for both matrices: a view made a copy ({before:?} -> {after:?})"
    );
    assert_eq!(
        after.bytes_in_use - before.bytes_in_use,
        bytes as u64,
        "the allocation holds exactly the two matrices"
    );

    let apart: Vec<_> = [&q, &k, &v, &o]
        .iter()
        .map(|n| pollster::block_on(l.qmatrix(n, h, h)).unwrap())
        .collect();
    let x = Tensor::<2>::random([5, h], Distribution::Normal(0.0, 1.0), &device);
    let joined = shared[0].matmul(x.clone());
    let worst = |a: Tensor<2>, b: Tensor<2>| {
        (a - b)
            .abs()
            .max()
            .into_data()
            .try_into_vec::<f32>()
            .unwrap()[0]
    };
    for (i, m) in apart[..3].iter().enumerate() {
        let part = joined.clone().slice([0..5, i * h..(i + 1) * h]);
        // Each output column is its own row's dot product, whichever rows sit beside it.
        assert_eq!(worst(part, m.matmul(x.clone())), 0.0, "projection {i}");
    }
    assert_eq!(worst(shared[1].matmul(x.clone()), apart[3].matmul(x)), 0.0);

    assert_eq!(shared[0].shared_buffer(), shared[1].shared_buffer());
    assert!(shared[0].shared_buffer().is_some());

    // The model loads its layers' attention weights that way on a GPU: the tower's four
    // projections, and the decoder's q, k, v and output, one buffer per layer.
    let model = common::load_model(&text, Some(mmproj.as_path()), &device);
    let buffers = |v: Vec<(String, &QMatrix)>, of: &[&str]| {
        v.into_iter()
            .filter(|(n, _)| of.iter().any(|o| n.ends_with(o)))
            .map(|(n, m)| (n, m.shared_buffer()))
            .collect::<Vec<_>>()
    };
    for (what, b, n) in [
        (
            "tower",
            buffers(
                model.vision.as_ref().unwrap().matrices(),
                &["attn_q", "attn_k", "attn_v", "attn_out"],
            ),
            4,
        ),
        (
            "decoder",
            buffers(
                model.decoder.matrices(),
                &["attn_qkv", "attn_qk", "attn_v", "attn_output"],
            ),
            2,
        ),
    ] {
        assert_eq!(b.len(), n, "{what}: {b:?}");
        assert!(
            b[0].1.is_some() && b.iter().all(|(_, id)| *id == b[0].1),
            "{what}'s attention weights in one buffer: {b:?}"
        );
    }
}
