//! Image decoding and Gemma 3 preprocessing against Pillow and transformers
//! (golden data from tests/reference/image_golden.py).

use crate::common;

use rexvqa_engine::image::{Policy, decode, preprocess, resize_bilinear};
use sha2::{Digest, Sha256};

fn sha_u8(v: &[u8]) -> String {
    format!("{:x}", Sha256::digest(v))
}

fn sha_f32(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

#[test]
fn preprocessing_matches_pillow_exactly_and_torchvision_within_one_level() {
    let root = common::repo_root();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/reference/golden/image_preprocess.json"))
            .unwrap(),
    )
    .unwrap();
    let images = golden["images"].as_object().unwrap();
    assert_eq!(images.len(), 4);
    for (name, entry) in images {
        let bytes = std::fs::read(root.join("tests/fixtures/images").join(name)).unwrap();
        let d = decode(&bytes).unwrap();
        assert_eq!(
            (d.width as u64, d.height as u64, d.bits),
            (
                entry["width"].as_u64().unwrap(),
                entry["height"].as_u64().unwrap(),
                16
            )
        );
        assert_eq!(
            sha_u8(&d.to_8bit(Policy::PillowClamp).data),
            entry["pillow_convert_rgb_sha256"],
            "{name}: pillow-clamp differs from Pillow's convert(\"RGB\")"
        );
        for (policy, want) in entry["policies"].as_object().unwrap() {
            let img8 = d.to_8bit(Policy::parse(policy).unwrap());
            let resized = resize_bilinear(&img8, 896, 896);
            assert_eq!(
                sha_u8(&resized.data),
                want["pil_resized_sha256"],
                "{name} {policy}: resize differs from Pillow"
            );
            let pv = preprocess(&img8, 896);
            assert_eq!(pv.len(), 3 * 896 * 896);
            assert_eq!(
                sha_f32(&pv),
                want["pil_pixel_values_sha256"],
                "{name} {policy}: pixel_values differ from transformers (PIL backend)"
            );
            let tv_png = std::fs::read(
                root.join("tests/reference/golden/images")
                    .join(want["torchvision_png"].as_str().unwrap()),
            )
            .unwrap();
            let tv = decode(&tv_png).unwrap();
            let max = tv
                .samples
                .iter()
                .zip(&resized.data)
                .map(|(&a, &b)| (a as i32 - b as i32).abs())
                .max()
                .unwrap();
            assert!(
                max <= 1,
                "{name} {policy}: {max}/255 from transformers (torchvision backend)"
            );
        }
    }
}
