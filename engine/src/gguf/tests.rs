use super::write::{TensorData, Writer};
use super::*;

fn sample() -> Vec<u8> {
    Writer::new()
        .kv("general.architecture", Value::String("gemma3".into()))
        .kv("gemma3.block_count", Value::U32(2))
        .kv("gemma3.rope.freq_base", Value::F32(1e6))
        .kv("flag", Value::Bool(true))
        .kv(
            "tokenizer.ggml.tokens",
            Value::Array(Array::String(vec!["<pad>".into(), "a".into(), "▁b".into()])),
        )
        .kv(
            "nested",
            Value::Array(Array::Array(vec![Array::I32(vec![1, -2])])),
        )
        .tensor(TensorData {
            name: "w.f32".into(),
            dims: vec![4, 2],
            ty: GgmlType::F32,
            bytes: (0..32).collect(),
        })
        .tensor(TensorData {
            name: "w.q8".into(),
            dims: vec![32],
            ty: GgmlType::Q8_0,
            bytes: vec![7; 34],
        })
        .to_bytes()
}

#[test]
fn round_trip_metadata_and_tensors() {
    let bytes = sample();
    let g = Gguf::parse_prefix(&bytes, bytes.len() as u64).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.architecture().unwrap(), "gemma3");
    assert_eq!(g.u64("gemma3.block_count").unwrap(), 2);
    assert_eq!(g.f64("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(g.bool_opt("flag").unwrap(), Some(true));
    assert_eq!(g.array("tokenizer.ggml.tokens").unwrap().len(), 3);
    assert_eq!(g.tensors.len(), 2);
    let q8 = g.require_tensor("w.q8").unwrap();
    assert_eq!((q8.size, q8.offset % 32, q8.n_rows()), (34, 0, 1));
    let mut src = SliceSource(&bytes);
    let data = g.read_tensor(&mut src, g.tensor("w.f32").unwrap()).unwrap();
    assert_eq!(data, (0..32).collect::<Vec<u8>>());
    assert!(matches!(
        g.str("gemma3.block_count"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(g.u64("absent"), Err(GgufError::MissingKey(_))));
    assert_eq!(g.u64_opt("absent").unwrap(), None);
}

#[test]
fn every_truncation_is_an_error_never_a_panic() {
    let bytes = sample();
    let whole = Gguf::parse_prefix(&bytes, bytes.len() as u64).unwrap();
    let last = whole.tensors.last().unwrap();
    // Past the last tensor's bytes only alignment padding remains, which is optional.
    let data_end = (last.offset + last.size) as usize;
    assert!(Gguf::parse_prefix(&bytes[..data_end], data_end as u64).is_ok());
    for cut in 0..data_end {
        let prefix = &bytes[..cut];
        let err = Gguf::parse_prefix(prefix, cut as u64).unwrap_err();
        assert!(
            matches!(
                err,
                GgufError::Truncated { .. }
                    | GgufError::AbsurdCount { .. }
                    | GgufError::TensorOutOfRange { .. }
            ),
            "cut at {cut}: unexpected {err}"
        );
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

#[test]
fn sync_and_async_reads_agree_with_a_header_larger_than_the_first_read() {
    // A 3 MiB string forces the reader to grow its prefix twice.
    let big = "x".repeat(3 << 20);
    let bytes = Writer::new()
        .kv("big", Value::String(big.clone()))
        .tensor(TensorData {
            name: "t".into(),
            dims: vec![8],
            ty: GgmlType::F16,
            bytes: vec![1; 16],
        })
        .to_bytes();
    let a = Gguf::read(&mut SliceSource(&bytes)).unwrap();
    let b = block_on(Gguf::read_async(&SliceSource(&bytes))).unwrap();
    assert_eq!(a.str("big").unwrap(), big);
    assert_eq!(a.tensors, b.tensors);
    let t = b.tensor("t").unwrap();
    assert_eq!(
        block_on(b.read_tensor_async(&SliceSource(&bytes), t)).unwrap(),
        vec![1; 16]
    );
}

fn patch(bytes: &mut [u8], at: usize, with: &[u8]) {
    bytes[at..at + with.len()].copy_from_slice(with);
}

fn err_of(bytes: &[u8]) -> String {
    Gguf::parse_prefix(bytes, bytes.len() as u64)
        .unwrap_err()
        .to_string()
}

#[test]
fn header_errors_name_the_field() {
    let good = sample();

    let mut b = good.clone();
    patch(&mut b, 0, b"GGML");
    assert!(err_of(&b).contains("not a GGUF file"));

    let mut b = good.clone();
    patch(&mut b, 4, &9u32.to_le_bytes());
    assert!(err_of(&b).contains("version 9"));

    let mut b = good.clone();
    patch(&mut b, 8, &u64::MAX.to_le_bytes());
    assert!(err_of(&b).contains("tensor count"), "{}", err_of(&b));

    let mut b = good.clone();
    patch(&mut b, 16, &(1u64 << 40).to_le_bytes());
    assert!(err_of(&b).contains("metadata count"));

    // The first key's length.
    let mut b = good.clone();
    patch(&mut b, 24, &u64::MAX.to_le_bytes());
    assert!(err_of(&b).contains("metadata key #0"), "{}", err_of(&b));

    // The first value's type id follows "general.architecture".
    let type_at = 24 + 8 + "general.architecture".len();
    let mut b = good.clone();
    patch(&mut b, type_at, &77u32.to_le_bytes());
    let e = err_of(&b);
    assert!(
        e.contains("metadata general.architecture") && e.contains("type 77"),
        "{e}"
    );
}

fn single_tensor(dims: Vec<u64>, ty: GgmlType, bytes: usize) -> Vec<u8> {
    Writer::new()
        .tensor(TensorData {
            name: "blk.3.attn_q.weight".into(),
            dims,
            ty,
            bytes: vec![0; bytes],
        })
        .to_bytes()
}

#[test]
fn tensor_errors_name_the_tensor() {
    // Block shape: 100 is not a multiple of 256.
    let e = err_of(&single_tensor(vec![100, 2], GgmlType::Q4_K, 0));
    assert!(
        e.contains("blk.3.attn_q.weight") && e.contains("block size 256"),
        "{e}"
    );

    // Out of range: claims 4x more data than written.
    let mut b = single_tensor(vec![64, 4], GgmlType::F32, 256);
    b.truncate(b.len() - 1);
    let e = err_of(&b);
    assert!(
        e.contains("blk.3.attn_q.weight") && e.contains("beyond the end"),
        "{e}"
    );

    // Unknown type id 4.
    let mut b = single_tensor(vec![8], GgmlType::F32, 32);
    let name_end = 24 + 8 + "blk.3.attn_q.weight".len();
    let type_at = name_end + 4 + 8;
    patch(&mut b, type_at, &4u32.to_le_bytes());
    let e = err_of(&b);
    assert!(e.contains("unknown ggml type id 4"), "{e}");

    // Five dimensions.
    let mut b = single_tensor(vec![8], GgmlType::F32, 32);
    patch(&mut b, name_end, &5u32.to_le_bytes());
    assert!(err_of(&b).contains("5 dimensions"));

    // Dimension product overflow.
    let b = single_tensor(vec![u64::MAX / 2, 4], GgmlType::F32, 0);
    assert!(err_of(&b).contains("overflows"));
}

#[test]
fn overlap_misalignment_duplicates_and_alignment_are_rejected() {
    let t = |name: &str| TensorData {
        name: name.into(),
        dims: vec![8],
        ty: GgmlType::F32,
        bytes: vec![0; 32],
    };
    let mut b = Writer::new().tensor(t("a")).tensor(t("b")).to_bytes();
    // Point b's offset (the last 8 bytes of its info) at a's data.
    let info_end = 24 + (8 + 1 + 4 + 8 + 4 + 8) * 2;
    patch(&mut b, info_end - 8, &0u64.to_le_bytes());
    assert!(
        err_of(&b).contains("tensors a and b overlap"),
        "{}",
        err_of(&b)
    );

    let mut b = Writer::new().tensor(t("a")).tensor(t("b")).to_bytes();
    patch(&mut b, info_end - 8, &36u64.to_le_bytes());
    assert!(err_of(&b).contains("not a multiple of the alignment"));

    let b = Writer::new().tensor(t("a")).tensor(t("a")).to_bytes();
    assert!(err_of(&b).contains("tensor a appears twice"));

    let b = Writer::new()
        .kv("k", Value::U8(1))
        .kv("k", Value::U8(2))
        .to_bytes();
    assert!(err_of(&b).contains("metadata key k appears twice"));

    let mut b = Writer::new()
        .kv("general.alignment", Value::U32(64))
        .tensor(t("a"))
        .to_bytes();
    let g = Gguf::parse_prefix(&b, b.len() as u64).unwrap();
    assert_eq!((g.alignment, g.data_offset % 64), (64, 0));
    let at = 24 + 8 + "general.alignment".len() + 4;
    patch(&mut b, at, &48u32.to_le_bytes());
    assert!(err_of(&b).contains("power of two"));
}

#[test]
fn bad_bool_and_invalid_utf8_are_reported() {
    let mut b = Writer::new().kv("flag", Value::Bool(true)).to_bytes();
    let at = 24 + 8 + 4 + 4;
    b[at] = 2;
    assert!(err_of(&b).contains("bool byte is 2"));

    let mut b = Writer::new().kv("s", Value::String("ok".into())).to_bytes();
    let at = 24 + 8 + 1 + 4 + 8;
    b[at] = 0xff;
    assert!(err_of(&b).contains("not valid UTF-8"));
}

#[test]
fn summary_lists_types_and_summarises_arrays() {
    let bytes = sample();
    let g = Gguf::parse_prefix(&bytes, bytes.len() as u64).unwrap();
    let s = g.summary_json();
    assert_eq!(s["architecture"], "gemma3");
    assert_eq!(s["tensor_count"], 2);
    assert_eq!(s["types"]["Q8_0"], 1);
    assert_eq!(s["types"]["F32"], 1);
    let toks = &s["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!(toks["len"], 3);
    assert_eq!(toks["element_type"], "string");
    assert_eq!(toks["head"][2], "▁b");
}
