//! Every value length a DICOM file declares, checked against the bytes that follow it before
//! dicom-rs reads the file. dicom-parser 0.10 reserves a value's declared length before reading
//! it (`read_value_ob`'s `try_reserve_exact`), so a 4 kB file declaring a 500 MB element makes a
//! 500 MB allocation; in the browser that grows the worker's memory for good. A declared length
//! beyond the end of the data set is a damaged file either way: refusing it here costs nothing.
//!
//! The walk follows Part 5's encoding: the file meta group in explicit VR little endian, then
//! the data set in the transfer syntax's VR and byte order (inflated first for deflate, with the
//! inflated size capped by deflate's largest ratio). It descends into sequences and items,
//! whose contents are elements too, and skips every other value.

use std::io::Read;

/// Explicit VR little endian, deflated.
const DEFLATED: &str = "1.2.840.10008.1.2.1.99";
/// Implicit VR little endian.
const IMPLICIT: &str = "1.2.840.10008.1.2";
/// Explicit VR big endian (retired, still read).
const BIG_ENDIAN: &str = "1.2.840.10008.1.2.2";
/// Deflate expands at most ~1032× (RFC 1951's longest match from one bit); more is not deflate.
const MAX_INFLATE_RATIO: usize = 1032;
/// An undefined length: a sequence, an item or encapsulated pixel data closed by a delimiter.
const UNDEFINED: u32 = 0xFFFF_FFFF;

#[derive(Clone, Copy)]
struct Encoding {
    explicit: bool,
    big_endian: bool,
}

/// Checks `body` (the file from its `DICM` marker on).
pub fn check(body: &[u8]) -> Result<(), String> {
    let meta = body.strip_prefix(b"DICM").ok_or("no DICM marker")?;
    let le = Encoding {
        explicit: true,
        big_endian: false,
    };
    let mut at = 0;
    let mut ts = String::new();
    // dicom-rs reads the meta group up to the length its first element gives (the group ends
    // there even if more group-2 elements follow, which are then read in the data set's VR).
    let mut group_end = usize::MAX;
    while at + 4 <= meta.len()
        && at < group_end
        && u16::from_le_bytes([meta[at], meta[at + 1]]) == 0x0002
    {
        let (tag, len, header) = header(&meta[at..], le)?;
        let start = at + header;
        let end = value_end(meta, start, len, tag)?;
        if at == 0 && tag == (0x0002, 0x0000) && len == 4 {
            let v = [
                meta[start],
                meta[start + 1],
                meta[start + 2],
                meta[start + 3],
            ];
            group_end = end.saturating_add(u32::from_le_bytes(v) as usize);
        }
        if tag == (0x0002, 0x0010) {
            ts = String::from_utf8_lossy(&meta[start..end])
                .trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string();
        }
        at = end;
    }
    let rest = &meta[at..];
    let enc = Encoding {
        explicit: ts != IMPLICIT,
        big_endian: ts == BIG_ENDIAN,
    };
    if ts == DEFLATED {
        let cap = rest.len().saturating_mul(MAX_INFLATE_RATIO) + 1024;
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(rest)
            .take(cap as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("the deflated data set does not inflate: {e}"))?;
        if out.len() > cap {
            return Err(format!(
                "the deflated data set inflates past {cap} bytes, more than deflate can give from {} bytes",
                rest.len()
            ));
        }
        return walk(&out, enc);
    }
    walk(rest, enc)
}

/// An element's (or item's) tag, declared length and header size at the start of `b`.
fn header(b: &[u8], enc: Encoding) -> Result<((u16, u16), u32, usize), String> {
    let u16_at = |i: usize| -> Result<u16, String> {
        let x = b.get(i..i + 2).ok_or("a header cut short")?;
        Ok(if enc.big_endian {
            u16::from_be_bytes([x[0], x[1]])
        } else {
            u16::from_le_bytes([x[0], x[1]])
        })
    };
    let u32_at = |i: usize| -> Result<u32, String> {
        let x = b.get(i..i + 4).ok_or("a header cut short")?;
        let x = [x[0], x[1], x[2], x[3]];
        Ok(if enc.big_endian {
            u32::from_be_bytes(x)
        } else {
            u32::from_le_bytes(x)
        })
    };
    let tag = (u16_at(0)?, u16_at(2)?);
    // Items and delimiters carry no VR, in any encoding.
    if tag.0 == 0xFFFE || !enc.explicit {
        return Ok((tag, u32_at(4)?, 8));
    }
    let vr = b.get(4..6).ok_or("a header cut short")?;
    // PS3.5 7.1.2 lists the VRs with a 16-bit length; dicom-rs reads any other two bytes,
    // unknown ones included, as UN, whose length takes 32 bits after two reserved bytes.
    let short = matches!(
        vr,
        b"AE"
            | b"AS"
            | b"AT"
            | b"CS"
            | b"DA"
            | b"DS"
            | b"DT"
            | b"FL"
            | b"FD"
            | b"IS"
            | b"LO"
            | b"LT"
            | b"PN"
            | b"SH"
            | b"SL"
            | b"SS"
            | b"ST"
            | b"TM"
            | b"UI"
            | b"UL"
            | b"US"
    );
    if !short {
        Ok((tag, u32_at(8)?, 12))
    } else {
        Ok((tag, u32::from(u16_at(6)?), 8))
    }
}

/// Where a value of declared length `len` starting at `start` ends, if `b` holds it.
fn value_end(b: &[u8], start: usize, len: u32, tag: (u16, u16)) -> Result<usize, String> {
    let end = start.saturating_add(len as usize);
    if end > b.len() {
        return Err(format!(
            "element ({:04X},{:04X}) declares {len} bytes, and only {} follow it",
            tag.0,
            tag.1,
            b.len().saturating_sub(start)
        ));
    }
    Ok(end)
}

/// Walks a data set: each defined length must fit in what follows; sequences and their items
/// are entered (their contents are elements), encapsulated pixel data's fragments and every
/// other value skipped.
fn walk(b: &[u8], enc: Encoding) -> Result<(), String> {
    let mut at = 0;
    // Inside encapsulated pixel data (undefined-length Pixel Data), whose items are fragments.
    let mut fragments = false;
    while at < b.len() {
        // Trailing padding shorter than a header is left to the parser.
        if b.len() - at < 8 {
            return Ok(());
        }
        let (tag, len, size) = header(&b[at..], enc)?;
        let start = at + size;
        if tag == (0xFFFE, 0xE0DD) {
            fragments = false;
        }
        if len == UNDEFINED {
            fragments |= tag == (0x7FE0, 0x0010);
            at = start;
            continue;
        }
        let end = value_end(b, start, len, tag)?;
        let item = tag == (0xFFFE, 0xE000);
        let vr_sq = enc.explicit && tag.0 != 0xFFFE && b.get(at + 4..at + 6) == Some(b"SQ");
        let holds_items = !item
            && len >= 8
            && header(&b[start..], enc).is_ok_and(|(t, _, _)| t == (0xFFFE, 0xE000));
        let enter = (item && !fragments) || vr_sq || holds_items;
        at = if enter { start } else { end };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An explicit VR little endian file: meta with the transfer syntax, then `data`.
    fn file(ts: &str, data: &[u8]) -> Vec<u8> {
        let mut uid = ts.as_bytes().to_vec();
        if uid.len() % 2 == 1 {
            uid.push(0);
        }
        let mut b = b"DICM".to_vec();
        b.extend_from_slice(&[0x02, 0x00, 0x10, 0x00, b'U', b'I']);
        b.extend_from_slice(&(uid.len() as u16).to_le_bytes());
        b.extend_from_slice(&uid);
        b.extend_from_slice(data);
        b
    }

    fn ob(len: u32, have: usize) -> Vec<u8> {
        let mut e = vec![0xE0, 0x7F, 0x10, 0x00, b'O', b'B', 0, 0];
        e.extend_from_slice(&len.to_le_bytes());
        e.extend(std::iter::repeat_n(7u8, have));
        e
    }

    #[test]
    fn a_length_past_the_end_is_refused_and_one_that_fits_passes() {
        let ts = "1.2.840.10008.1.2.1";
        assert_eq!(check(&file(ts, &ob(16, 16))), Ok(()));
        let e = check(&file(ts, &ob(500_000_000, 16))).unwrap_err();
        assert_eq!(
            e,
            "element (7FE0,0010) declares 500000000 bytes, and only 16 follow it"
        );
        // Implicit VR: the length is the 4 bytes after the tag.
        let mut imp = vec![0xE0, 0x7F, 0x10, 0x00];
        imp.extend_from_slice(&600_000u32.to_le_bytes());
        imp.extend_from_slice(&[1, 2, 3, 4]);
        assert!(
            check(&file(IMPLICIT, &imp))
                .unwrap_err()
                .contains("600000 bytes")
        );
    }

    #[test]
    fn sequences_and_items_are_entered() {
        let ts = "1.2.840.10008.1.2.1";
        // A defined-length sequence holding an item holding an element that lies about its size.
        let inner = ob(1 << 30, 4);
        let mut item = vec![0xFE, 0xFF, 0x00, 0xE0];
        item.extend_from_slice(&(inner.len() as u32).to_le_bytes());
        item.extend_from_slice(&inner);
        let mut sq = vec![0x08, 0x00, 0x15, 0x11, b'S', b'Q', 0, 0];
        sq.extend_from_slice(&(item.len() as u32).to_le_bytes());
        sq.extend_from_slice(&item);
        assert!(
            check(&file(ts, &sq))
                .unwrap_err()
                .contains("1073741824 bytes")
        );
        // The same in an undefined-length sequence.
        sq[8..12].copy_from_slice(&UNDEFINED.to_le_bytes());
        assert!(
            check(&file(ts, &sq))
                .unwrap_err()
                .contains("1073741824 bytes")
        );
        // Encapsulated pixel data: its fragments are bytes, not elements, and are skipped.
        let mut px = vec![0xE0, 0x7F, 0x10, 0x00, b'O', b'B', 0, 0];
        px.extend_from_slice(&UNDEFINED.to_le_bytes());
        for fragment in [
            &[][..],
            &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF][..],
        ] {
            px.extend_from_slice(&[0xFE, 0xFF, 0x00, 0xE0]);
            px.extend_from_slice(&(fragment.len() as u32).to_le_bytes());
            px.extend_from_slice(fragment);
        }
        px.extend_from_slice(&[0xFE, 0xFF, 0xDD, 0xE0, 0, 0, 0, 0]);
        assert_eq!(check(&file(ts, &px)), Ok(()));
        // A fragment longer than the file: the 10 bytes and the 8-byte delimiter follow it.
        let n = px.len();
        px[n - 22..n - 18].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            check(&file(ts, &px)),
            Err("element (FFFE,E000) declares 1000 bytes, and only 18 follow it".into())
        );
    }

    #[test]
    fn an_unknown_vr_is_read_as_un_with_a_32_bit_length() {
        // (0010,0010) with VR "NN": dicom-rs reads the two bytes after it as reserved and the
        // next four ("DOE^") as a 1,581,600,580-byte length (the image fuzzer's second finding).
        let ts = "1.2.840.10008.1.2.1";
        let e = [0x10, 0x00, 0x10, 0x00, b'N', b'N', 0x08, 0x00];
        let e = [&e[..], b"DOE^JANE"].concat();
        assert_eq!(
            check(&file(ts, &e)),
            Err("element (0010,0010) declares 1581600580 bytes, and only 4 follow it".into())
        );
    }

    #[test]
    fn the_meta_group_ends_at_its_declared_length() {
        // The group length covers only the transfer syntax (implicit VR): dicom-rs reads the
        // (0002,0013) after it as data in implicit VR, its "SH" and 16-bit length as one 32-bit
        // length.
        let mut b = b"DICM".to_vec();
        b.extend_from_slice(&[0x02, 0x00, 0x00, 0x00, b'U', b'L', 4, 0, 26, 0, 0, 0]);
        b.extend_from_slice(&[0x02, 0x00, 0x10, 0x00, b'U', b'I', 18, 0]);
        b.extend_from_slice(b"1.2.840.10008.1.2\0");
        b.extend_from_slice(&[0x02, 0x00, 0x13, 0x00, b'S', b'H', 14, 0]);
        b.extend_from_slice(b"PYDICOM 3.0.2 ");
        assert_eq!(
            check(&b),
            Err("element (0002,0013) declares 936019 bytes, and only 14 follow it".into())
        );
    }

    #[test]
    fn a_deflated_data_set_is_walked_inflated() {
        use std::io::Write;
        let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&ob(1 << 29, 8)).unwrap();
        let e = check(&file(DEFLATED, &z.finish().unwrap())).unwrap_err();
        assert!(e.contains("536870912 bytes"), "{e}");
        assert!(check(&file(DEFLATED, b"not deflate at all")).is_err());
    }
}
