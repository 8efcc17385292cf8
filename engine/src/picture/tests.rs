//! The decoder against pydicom and Pillow on the fixtures of
//! `tests/reference/picture_golden.py` (golden: `tests/reference/golden/pictures.json`).

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::*;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pictures")
}

fn open(name: &str) -> Result<Picture, PictureError> {
    let bytes = std::fs::read(fixtures().join(name)).unwrap();
    decode_named(name, &bytes)
}

fn golden() -> serde_json::Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/golden/pictures.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The grey values after the modality rescale, as the golden hashes them (int32 LE).
fn rescaled(p: &Picture) -> Vec<i32> {
    let scale = p.dicom.as_ref().map_or(SampleScale::IDENTITY, |d| d.scale);
    p.pixels
        .samples
        .iter()
        .map(|&s| scale.value(s) as i32)
        .collect()
}

#[test]
fn every_fixture_decodes_to_what_pydicom_and_pillow_decode() {
    let g = golden();
    let files = g["files"].as_object().unwrap();
    assert_eq!(files.len(), 11, "fixtures in the golden");
    for (name, want) in files {
        let p = open(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let info = serde_json::to_value(p.info()).unwrap();
        let lossy = want.get("lossy_pixels");
        let exact: &[&str] = &[
            "format",
            "width",
            "height",
            "channels",
            "bits_stored",
            "photometric",
            "frames",
            "transfer_syntax",
        ];
        for key in exact.iter().chain(if lossy.is_some() {
            &[][..]
        } else {
            &["min", "max"][..]
        }) {
            assert_eq!(info[key], want[key], "{name}: {key}");
        }
        let values = rescaled(&p);
        if let Some(lossy) = lossy {
            // Lossy JPEG: jpeg-decoder (DICOM) and zune-jpeg (`image`) against libjpeg
            // (pydicom through pylibjpeg-libjpeg; Pillow): measured at most 1 level apart on
            // these files, mean difference 0.03 (bounds: 2 levels, mean 0.3).
            let want: Vec<i32> = serde_json::from_value(lossy.clone()).unwrap();
            assert_eq!(values.len(), want.len(), "{name}");
            let worst = values
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .max()
                .unwrap();
            let mean_diff = values
                .iter()
                .zip(&want)
                .map(|(a, b)| f64::from(a - b))
                .sum::<f64>()
                / want.len() as f64;
            eprintln!("{name}: worst {worst} level(s), mean difference {mean_diff:.4}");
            assert!(
                worst <= 2 && mean_diff.abs() < 0.3,
                "{name}: worst {worst}, mean {mean_diff}"
            );
            continue;
        }
        let mean = want["mean"].as_f64().unwrap();
        assert!(
            (p.stats.mean - mean).abs() < 1e-9,
            "{name}: mean {} vs {mean}",
            p.stats.mean
        );
        let first_row: Vec<i64> = serde_json::from_value(want["first_row"].clone()).unwrap();
        let row = p.pixels.width as usize * usize::from(p.pixels.channels);
        let got_row: Vec<i64> = values[..row].iter().map(|&v| i64::from(v)).collect();
        assert_eq!(got_row, first_row, "{name}: first row");
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let sha = format!("{:x}", Sha256::digest(&bytes));
        assert_eq!(sha, want["sha256"].as_str().unwrap(), "{name}: pixels");
    }
}

fn d_window(p: &Picture) -> Option<Window> {
    p.dicom.as_ref().and_then(|d| d.window)
}

#[test]
fn dicom_facts_window_and_identity_are_read() {
    let p = open("explicit_le_12bit.dcm").unwrap();
    let d = p.dicom.as_ref().unwrap();
    assert_eq!(d.transfer_syntax_name, "Explicit VR Little Endian");
    assert_eq!(
        d.window,
        Some(Window {
            center: 2048.0,
            width: 3000.0
        })
    );
    let names: Vec<&str> = p.identifying.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "PatientName",
            "PatientID",
            "PatientBirthDate",
            "AccessionNumber",
            "InstitutionName"
        ]
    );
    assert_eq!(p.identifying[0].value, "DOE^JANE");
    // image-info carries none of them.
    let info = serde_json::to_string(&p.info()).unwrap();
    assert!(
        !info.contains("DOE") && !info.contains("FAKE-0001"),
        "{info}"
    );
    let r = open("rle_signed_rescale.dcm").unwrap();
    let d = r.dicom.as_ref().unwrap();
    assert_eq!((d.rescale_slope, d.rescale_intercept), (2.0, -100.0));
    assert_eq!(
        d.scale,
        SampleScale {
            offset: -1826.0,
            step: 1.0
        }
    );
    // The viewer windows samples: the window maps back through the sample scale.
    assert_eq!(p.sample_window(), d_window(&p));
    let sw = r.sample_window().unwrap();
    let rw = r.window().unwrap();
    assert_eq!(d.scale.value(0) + sw.center * d.scale.step, rw.center);
    assert_eq!(sw.width * d.scale.step, rw.width);
    assert_eq!(open("gray16.png").unwrap().sample_window(), None);
    assert_eq!(open("multiframe_16bit.dcm").unwrap().info().frames, 3);
}

#[test]
fn the_window_policy_follows_the_dicom_linear_function_and_monochrome1_is_inverted() {
    let w = Window {
        center: 2048.0,
        width: 3000.0,
    };
    // Edges of PS3.3 C.11.2.1.2.1: c-0.5-(w-1)/2 = 548 maps to 0, above 3547 to 255.
    assert_eq!(
        (
            w.apply(548.0),
            w.apply(548.5),
            w.apply(3547.0),
            w.apply(3547.5)
        ),
        (0, 0, 255, 255)
    );
    assert_eq!(w.apply(2047.5), 128);
    let p = open("explicit_le_12bit.dcm").unwrap();
    let img = p.to_8bit(Policy::Window);
    for (s, o) in p.pixels.samples.iter().zip(&img.data) {
        assert_eq!(*o, w.apply(f64::from(*s)));
    }
    assert_eq!(
        p.describe_policy(Policy::Window),
        "window (center 2048, width 3000)"
    );
    assert_eq!(p.describe_policy(Policy::Scale), "scale");
    // MONOCHROME1 without a window: min-max, then inverted.
    let m1 = open("implicit_le_16bit_mono1.dcm").unwrap();
    assert_eq!(m1.applied_policy(Policy::Window), Some(Policy::Minmax));
    assert_eq!(
        m1.describe_policy(Policy::Window),
        "minmax (the file has no window), inverted (MONOCHROME1)"
    );
    let plain = m1.pixels.to_8bit(Policy::Minmax);
    let shown = m1.to_8bit(Policy::Window);
    assert!(
        plain
            .data
            .iter()
            .zip(&shown.data)
            .all(|(a, b)| *a == 255 - *b)
    );
    // 8-bit images pass through whatever the policy.
    let j = open("gray8.jpg").unwrap();
    assert_eq!(j.applied_policy(Policy::Window), None);
    assert_eq!(j.describe_policy(Policy::Minmax), "8-bit, as stored");
}

#[test]
fn malformed_files_give_clear_errors() {
    let msg = |name: &str| open(name).unwrap_err().to_string();
    assert_eq!(msg("bad_empty.dcm"), "the file is empty (0 bytes)");
    assert!(
        msg("bad_png_renamed.dcm").contains("its bytes are a PNG image: rename it to .png"),
        "{}",
        msg("bad_png_renamed.dcm")
    );
    assert!(
        msg("bad_marker.dcm").contains("no \"DICM\" marker"),
        "{}",
        msg("bad_marker.dcm")
    );
    assert!(
        msg("bad_truncated.dcm").starts_with("cannot read the DICOM file (truncated"),
        "{}",
        msg("bad_truncated.dcm")
    );
    let j2k = msg("jpeg2000.dcm");
    assert!(
        j2k.contains("1.2.840.10008.1.2.4.90") && j2k.contains("JPEG 2000") && j2k.contains("PNG"),
        "{j2k}"
    );
    // Without a .dcm name a wrong marker is just not an image we know.
    let bytes = std::fs::read(fixtures().join("bad_marker.dcm")).unwrap();
    assert!(matches!(decode(&bytes), Err(PictureError::Unknown)));
}

#[test]
fn damaged_dicom_never_panics() {
    // Every truncation of a few files, and single-byte corruptions of the header: errors or
    // pictures, never a panic (a panic aborts the wasm worker).
    for name in [
        "explicit_le_12bit.dcm",
        "rle_signed_rescale.dcm",
        "jpeg_lossless_12bit.dcm",
    ] {
        let good = std::fs::read(fixtures().join(name)).unwrap();
        for cut in (0..good.len()).step_by(41) {
            let _ = decode(&good[..cut]);
        }
        for at in (132..good.len().min(900)).step_by(13) {
            let mut bad = good.clone();
            bad[at] ^= 0xA5;
            let _ = decode(&bad);
        }
    }
}
