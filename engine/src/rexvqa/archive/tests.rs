use std::io::{BufReader, Cursor, Read};

use super::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/archive");

/// The fixture's parts (made by GNU tar + the zstd CLI), concatenated.
fn fixture_stream() -> Vec<u8> {
    let mut names: Vec<String> = std::fs::read_dir(FIXTURE)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("deid_png.part"))
        .collect();
    names.sort_by(|a, b| b.cmp(a));
    let order = order_parts(&names).unwrap();
    let mut out = Vec::new();
    for i in order {
        out.extend(std::fs::read(format!("{FIXTURE}/{}", names[i])).unwrap());
    }
    out
}

fn members(stream: &[u8]) -> Result<Vec<PngMember>, ArchiveError> {
    let mut ar = ImageArchive::new(BufReader::new(Cursor::new(stream.to_vec())));
    let mut out = Vec::new();
    ar.for_each_png(
        |_| true,
        |m| {
            out.push(m);
            true
        },
    )?;
    Ok(out)
}

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn reads_the_png_members_of_a_zstd_cli_archive_split_in_parts() {
    let manifest: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURE}/manifest.json")).unwrap())
            .unwrap();
    let got = members(&fixture_stream()).unwrap();
    assert_eq!(
        got.len(),
        manifest.len(),
        "only PNG members, no folders or README"
    );
    for (m, want) in got.iter().zip(&manifest) {
        assert_eq!(m.path, want["path"].as_str().unwrap());
        assert_eq!(
            sha256(&m.bytes),
            want["sha256"].as_str().unwrap(),
            "{}",
            m.path
        );
    }
    // The long-path member (GNU long name record) decodes as a PNG.
    let long = got
        .iter()
        .find(|m| m.path.len() > 100)
        .expect("a path over 100 bytes");
    assert!(crate::image::decode(&long.bytes).is_ok());
}

#[test]
fn want_filters_and_visit_can_stop() {
    let s = fixture_stream();
    let mut ar = ImageArchive::new(BufReader::new(Cursor::new(s.clone())));
    let mut seen = Vec::new();
    ar.for_each_png(
        |p| p.contains("/pB/"),
        |m| {
            seen.push(m.path);
            true
        },
    )
    .unwrap();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].starts_with("deid_png/pB/"));
    let mut ar = ImageArchive::new(BufReader::new(Cursor::new(s)));
    let mut n = 0;
    ar.for_each_png(
        |_| true,
        |_| {
            n += 1;
            false
        },
    )
    .unwrap();
    assert_eq!(n, 1);
}

/// A tar built in memory with the tar crate's writer, compressed as several frames.
fn built_tar(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, d) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(d.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, p, &d[..]).unwrap();
    }
    b.into_inner().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
}

#[test]
fn several_frames_and_skippable_frames_read_as_one_stream() {
    let files: Vec<(String, Vec<u8>)> = (0..6)
        .map(|i| {
            (
                format!("deid_png/p{i}/a/studies/s/series/r/instances/x{i}.png"),
                (0..3000 + i * 517).map(|k| (k * 31 + i) as u8).collect(),
            )
        })
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    let raw = built_tar(&refs);
    // Three frames cut at arbitrary bytes, with a skippable frame (magic 0x184D2A50) between.
    let (a, rest) = raw.split_at(raw.len() / 3 + 7);
    let (b, c) = rest.split_at(rest.len() / 2 - 11);
    let mut stream = zstd(a);
    stream.extend([0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 9, 9, 9, 9]);
    stream.extend(zstd(b));
    stream.extend(zstd(c));
    let got = members(&stream).unwrap();
    assert_eq!(got.len(), files.len());
    for (m, (p, d)) in got.iter().zip(&files) {
        assert_eq!(&m.path, p);
        assert_eq!(&m.bytes, d);
    }
    // The frame reader alone returns exactly the tar bytes.
    let mut out = Vec::new();
    let mut z = ZstdFrames::new(BufReader::new(Cursor::new(stream)));
    z.read_to_end(&mut out).unwrap();
    assert_eq!(out, raw);
    assert_eq!(z.frames(), 3);
}

#[test]
fn a_cut_archive_is_an_error_never_a_short_success() {
    let full = fixture_stream();
    // Every cut inside the compressed stream (the last 11 bytes are the final part).
    for cut in (1..full.len() - 4).step_by(97) {
        match members(&full[..cut]) {
            Err(ArchiveError::Truncated { .. } | ArchiveError::Tar(_)) => {}
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    let e = members(&full[..full.len() / 2]).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn other_bytes_are_named_errors() {
    // An uncompressed tar, and random bytes.
    let raw = built_tar(&[("deid_png/a.png", vec![1, 2, 3])]);
    let e = members(&raw).unwrap_err();
    assert!(matches!(e, ArchiveError::Zstd { .. }), "{e:?}");
    assert!(e.to_string().contains("deid_png.part"), "{e}");
    // zstd of something that is not a tar.
    let e = members(&zstd(&[7u8; 5000])).unwrap_err();
    assert!(matches!(e, ArchiveError::Tar(_)), "{e:?}");
    // An empty file is named as such.
    let e = members(&[]).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn parts_are_ordered_by_number_and_gaps_named() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        order_parts(&names(&[
            "deid_png.part10",
            "deid_png.part09",
            "deid_png.part00",
            "deid_png.part01",
            "deid_png.part02",
            "deid_png.part03",
            "deid_png.part04",
            "deid_png.part05",
            "deid_png.part06",
            "deid_png.part07",
            "deid_png.part08"
        ]))
        .unwrap(),
        vec![2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 0]
    );
    assert_eq!(order_parts(&names(&["test.tar.zst"])).unwrap(), vec![0]);
    assert_eq!(
        order_parts(&names(&["x.part1", "x.part2"])).unwrap(),
        vec![0, 1]
    );
    let e = order_parts(&names(&["deid_png.part00", "deid_png.part02"])).unwrap_err();
    assert!(e.to_string().contains("part 1 is missing"), "{e}");
    let e = order_parts(&names(&["deid_png.part03", "deid_png.part04"])).unwrap_err();
    assert!(e.to_string().contains("before part 3"), "{e}");
    let e = order_parts(&names(&["a.part00", "b.part01"])).unwrap_err();
    assert!(e.to_string().contains("different archives"), "{e}");
    assert!(order_parts(&names(&["a.part00", "a.part00"])).is_err());
    assert!(order_parts(&names(&["a.partX"])).is_err());
    assert!(order_parts(&names(&["a.tar.zst", "b.tar.zst"])).is_err());
    assert!(order_parts(&[]).is_err());
}

#[test]
fn pax_format_archive_gives_the_same_members() {
    let pax = std::fs::read(format!("{FIXTURE}/pax.tar.zst")).unwrap();
    let gnu = members(&fixture_stream()).unwrap();
    assert_eq!(members(&pax).unwrap(), gnu);
}
