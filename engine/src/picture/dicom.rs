//! DICOM Part 10 files through dicom-rs (pure Rust, also in wasm): the file is parsed with
//! `dicom-object`, the first frame decoded with `dicom-pixeldata` (native little endian,
//! deflated explicit VR, RLE lossless, JPEG baseline/extended/lossless through `jpeg-decoder`),
//! and the modality rescale applied. Transfer syntaxes that would need C code (JPEG 2000,
//! JPEG-LS) are refused by name.
//!
//! dicom-rs slices buffers from header values in places; every size is checked here first, so a
//! malformed file is an error, never a panic (a panic aborts the whole wasm worker).

use dicom_dictionary_std::tags;
use dicom_encoding::TransferSyntaxIndex;
use dicom_object::{InMemDicomObject, OpenFileOptions, Tag, file::ReadPreamble};
use dicom_pixeldata::{ConvertOptions, ModalityLutOption, PixelDecoder, VoiLutOption};
use dicom_transfer_syntax_registry::TransferSyntaxRegistry;

use super::dicom_lengths;
use super::{DicomInfo, Format, Identifying, Picture, SampleScale, Stats, Window};
use crate::image::{Decoded, MAX_SIDE};

/// Errors decoding a DICOM file.
#[derive(Debug, thiserror::Error)]
pub enum DicomError {
    /// The file does not parse (truncated, or not DICOM after its marker).
    #[error("cannot read the DICOM file (truncated or damaged?): {0}")]
    Parse(String),
    /// No Pixel Data element.
    #[error(
        "the DICOM file has no pixel data (is it an image? structured reports and presentation states are not)"
    )]
    NoPixels,
    /// A transfer syntax this build cannot decode.
    #[error(
        "transfer syntax {uid} ({name}) cannot be decoded here (no pure-Rust decoder); export the image as PNG from your viewer and open the PNG"
    )]
    UnsupportedTransferSyntax {
        /// Its UID.
        uid: String,
        /// Its name, or "unknown".
        name: String,
    },
    /// Pixel attributes this decoder does not handle.
    #[error("unsupported pixel layout: {0}; export the image as PNG and open the PNG")]
    Unsupported(String),
    /// The pixel data does not decode.
    #[error("cannot decode the pixel data: {0}")]
    Pixels(String),
}

/// Bytes of the preamble before the `DICM` marker.
const PREAMBLE: usize = 128;

/// Whether `bytes` start with a 128-byte preamble and the `DICM` marker.
pub fn has_preamble(bytes: &[u8]) -> bool {
    bytes.get(PREAMBLE..PREAMBLE + 4) == Some(b"DICM")
}

/// The identifying attributes shown on this machine only: (tag, name).
const IDENTIFYING: [(Tag, &str); 5] = [
    (tags::PATIENT_NAME, "PatientName"),
    (tags::PATIENT_ID, "PatientID"),
    (tags::PATIENT_BIRTH_DATE, "PatientBirthDate"),
    (tags::ACCESSION_NUMBER, "AccessionNumber"),
    (tags::INSTITUTION_NAME, "InstitutionName"),
];

type Object = dicom_object::FileDicomObject<InMemDicomObject>;

/// The text of `tag`, trimmed, if present and non-empty.
fn text(obj: &Object, tag: Tag) -> Option<String> {
    let e = obj.get(tag)?;
    let s = e.to_str().ok()?;
    let s = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!s.is_empty()).then(|| s.to_string())
}

/// The first number of a (possibly multi-valued) numeric attribute.
fn number(obj: &Object, tag: Tag) -> Option<f64> {
    text(obj, tag)?.split('\\').next()?.trim().parse().ok()
}

fn int(obj: &Object, tag: Tag) -> Option<u32> {
    obj.get(tag)?.to_int::<u32>().ok()
}

/// Decodes the first frame of a DICOM file (with or without its 128-byte preamble).
pub fn decode(bytes: &[u8]) -> Result<Picture, DicomError> {
    let body = if has_preamble(bytes) {
        &bytes[PREAMBLE..]
    } else {
        bytes
    };
    if body.starts_with(b"DICM") {
        dicom_lengths::check(body).map_err(DicomError::Parse)?;
    }
    let obj = OpenFileOptions::new()
        .read_preamble(ReadPreamble::Never)
        .from_reader(body)
        .map_err(|e| DicomError::Parse(e.to_string()))?;
    let uid = obj.meta().transfer_syntax().to_string();
    let ts = TransferSyntaxRegistry.get(&uid);
    if !ts.is_some_and(|t| t.can_decode_all()) {
        return Err(DicomError::UnsupportedTransferSyntax {
            name: ts.map_or_else(|| "unknown".into(), |t| t.name().to_string()),
            uid,
        });
    }
    let ts_name = ts.map_or_else(String::new, |t| t.name().to_string());
    if obj.get(tags::PIXEL_DATA).is_none() {
        return Err(DicomError::NoPixels);
    }
    let layout = Layout::read(&obj)?;
    // dicom-rs indexes some decoded buffers by the DICOM header's sizes without checking them
    // (dicom-transfer-syntax-registry 0.10: `rle_lossless.rs` and `jpeg.rs` panic on a short or
    // oversized frame); the encapsulated frame is checked against the header first.
    match ts.map(|t| t.codec()) {
        _ if uid == RLE_LOSSLESS => check_rle(&obj, &layout)?,
        Some(dicom_encoding::Codec::EncapsulatedPixelData(..)) => check_jpeg(&obj, &layout)?,
        _ => {}
    }
    let px = obj
        .decode_pixel_data_frame(0)
        .map_err(|e| DicomError::Pixels(e.to_string()))?;
    if px.data().len() < layout.frame_bytes() {
        return Err(DicomError::Pixels(format!(
            "the first frame has {} bytes, {} expected for {}×{}×{} at {} bits",
            px.data().len(),
            layout.frame_bytes(),
            layout.cols,
            layout.rows,
            layout.channels,
            layout.bits_allocated
        )));
    }
    // Encapsulated colour comes back as RGB; grey keeps its MONOCHROME1/2.
    let photometric = px.photometric_interpretation().to_string();
    let rescale_slope = number(&obj, tags::RESCALE_SLOPE).unwrap_or(1.0);
    let rescale_intercept = number(&obj, tags::RESCALE_INTERCEPT).unwrap_or(0.0);
    let values: Vec<f64> = if layout.channels == 1 {
        let opts = ConvertOptions::new()
            .with_modality_lut(ModalityLutOption::Default)
            .with_voi_lut(VoiLutOption::Identity);
        px.to_vec_frame_with_options::<f64>(0, &opts)
    } else {
        px.to_vec_frame_with_options::<f64>(
            0,
            &ConvertOptions::new().with_modality_lut(ModalityLutOption::None),
        )
    }
    .map_err(|e| DicomError::Pixels(e.to_string()))?;
    let stats = Stats::of(values.iter().copied());
    let scale = sample_scale(&values, &stats);
    let samples: Vec<u16> = values
        .iter()
        .map(|v| {
            ((v - scale.offset) / scale.step)
                .round()
                .clamp(0.0, 65535.0) as u16
        })
        .collect();
    let eight = scale == SampleScale::IDENTITY && stats.max <= 255.0 && layout.bits_stored <= 8;
    let window = match (
        number(&obj, tags::WINDOW_CENTER),
        number(&obj, tags::WINDOW_WIDTH),
    ) {
        (Some(center), Some(width)) if width >= 1.0 => Some(Window { center, width }),
        _ => None,
    };
    let identifying = IDENTIFYING
        .iter()
        .filter_map(|&(tag, name)| {
            text(&obj, tag).map(|value| Identifying {
                name: name.into(),
                value,
            })
        })
        .collect();
    Ok(Picture {
        format: Format::Dicom,
        pixels: Decoded {
            width: layout.cols,
            height: layout.rows,
            channels: layout.channels,
            bits: if eight { 8 } else { 16 },
            samples,
        },
        bits_stored: layout.bits_stored,
        photometric: if layout.channels == 3 {
            "RGB".into()
        } else {
            photometric
        },
        stats,
        dicom: Some(DicomInfo {
            transfer_syntax: uid,
            transfer_syntax_name: ts_name,
            frames: int(&obj, tags::NUMBER_OF_FRAMES).unwrap_or(1).max(1),
            rescale_slope,
            rescale_intercept,
            window,
            scale,
        }),
        identifying,
    })
}

/// The pixel attributes, checked before dicom-rs slices anything with them.
struct Layout {
    rows: u32,
    cols: u32,
    channels: u8,
    bits_allocated: u16,
    bits_stored: u16,
}

impl Layout {
    fn read(obj: &Object) -> Result<Layout, DicomError> {
        let need = |tag: Tag, name: &str| {
            int(obj, tag).ok_or_else(|| DicomError::Unsupported(format!("{name} is missing")))
        };
        let (rows, cols) = (need(tags::ROWS, "Rows")?, need(tags::COLUMNS, "Columns")?);
        if rows == 0 || cols == 0 || rows > MAX_SIDE || cols > MAX_SIDE {
            return Err(DicomError::Unsupported(format!(
                "size {cols}×{rows} (1 to {MAX_SIDE} pixels per side)"
            )));
        }
        let spp = int(obj, tags::SAMPLES_PER_PIXEL).unwrap_or(1);
        let bits_allocated = need(tags::BITS_ALLOCATED, "BitsAllocated")?;
        let bits_stored = int(obj, tags::BITS_STORED).unwrap_or(bits_allocated);
        if !matches!(spp, 1 | 3) {
            return Err(DicomError::Unsupported(format!("{spp} samples per pixel")));
        }
        if !matches!(bits_allocated, 8 | 16) || bits_stored == 0 || bits_stored > bits_allocated {
            return Err(DicomError::Unsupported(format!(
                "{bits_stored} bits stored in {bits_allocated} allocated (8 or 16 allocated expected)"
            )));
        }
        Ok(Layout {
            rows,
            cols,
            channels: spp as u8,
            bits_allocated: bits_allocated as u16,
            bits_stored: bits_stored as u16,
        })
    }

    fn frame_bytes(&self) -> usize {
        self.rows as usize
            * self.cols as usize
            * usize::from(self.channels)
            * usize::from(self.bits_allocated / 8)
    }
}

/// RLE Lossless.
const RLE_LOSSLESS: &str = "1.2.840.10008.1.2.5";

/// The encapsulated fragments of the pixel data.
fn fragments(obj: &Object) -> Result<&[Vec<u8>], DicomError> {
    match obj.get(tags::PIXEL_DATA).map(|e| e.value()) {
        Some(dicom_core::DicomValue::PixelSequence(seq)) => Ok(seq.fragments()),
        _ => Err(DicomError::Pixels(
            "the transfer syntax is encapsulated but the pixel data is not".into(),
        )),
    }
}

/// Checks that the JPEG stream's size and sample format are the header's.
fn check_jpeg(obj: &Object, layout: &Layout) -> Result<(), DicomError> {
    let bytes: Vec<u8> = fragments(obj)?.concat();
    let mut dec = jpeg_decoder::Decoder::new(&bytes[..]);
    dec.read_info()
        .map_err(|e| DicomError::Pixels(format!("JPEG header: {e}")))?;
    let Some(info) = dec.info() else {
        return Err(DicomError::Pixels("JPEG header: no frame".into()));
    };
    let got = usize::from(info.width) * usize::from(info.height) * info.pixel_format.pixel_bytes();
    if got != layout.frame_bytes() {
        return Err(DicomError::Pixels(format!(
            "the JPEG stream is {}×{} {:?}, the DICOM header says {}×{} with {} sample(s) of {} bits",
            info.width,
            info.height,
            info.pixel_format,
            layout.cols,
            layout.rows,
            layout.channels,
            layout.bits_allocated
        )));
    }
    Ok(())
}

/// Checks the first frame's RLE fragment (ref: PS3.5 G.3-G.5): a 64-byte header naming one
/// segment per sample byte, and segments long enough for the frame.
fn check_rle(obj: &Object, layout: &Layout) -> Result<(), DicomError> {
    let bad = |why: String| DicomError::Pixels(format!("damaged RLE data: {why}"));
    let frag = fragments(obj)?
        .first()
        .ok_or_else(|| bad("no fragment".into()))?;
    let word = |i: usize| {
        frag.get(4 * i..4 * i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let segments = word(0).ok_or_else(|| bad("no header".into()))?;
    let want = usize::from(layout.channels) * usize::from(layout.bits_allocated / 8);
    if segments != want || frag.len() < 64 {
        return Err(bad(format!("{segments} segments, {want} expected")));
    }
    let mut offsets: Vec<usize> = (1..=segments).filter_map(word).collect();
    offsets.push(frag.len());
    let pixels = layout.rows as usize * layout.cols as usize;
    if offsets[0] < 64 || offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err(bad(format!("segment offsets {offsets:?}")));
    }
    for w in offsets.windows(2) {
        let n = packbits_len(&frag[w[0]..w[1]]);
        if n < pixels {
            return Err(bad(format!("a segment of {n} bytes, {pixels} expected")));
        }
    }
    Ok(())
}

/// Bytes a PackBits segment decodes to before its end or a run that goes past it (an encoder
/// pads segments to an even length, which can look like such a run).
fn packbits_len(seg: &[u8]) -> usize {
    let (mut i, mut n) = (0, 0usize);
    while i < seg.len() {
        let h = seg[i] as i8;
        i += 1;
        match h {
            0..=127 => {
                let len = h as usize + 1;
                if i + len > seg.len() {
                    break;
                }
                i += len;
                n += len;
            }
            -127..=-1 => {
                if i >= seg.len() {
                    break;
                }
                i += 1;
                n += 1 + (-h) as usize;
            }
            -128 => {}
        }
    }
    n
}

/// How rescaled values become u16 samples: unchanged when they are integers in 0..=65535,
/// shifted when integers spanning at most 65536 values, else spread over the u16 range.
fn sample_scale(values: &[f64], s: &Stats) -> SampleScale {
    let integers = values.iter().all(|v| v.fract() == 0.0);
    if integers && s.min >= 0.0 && s.max <= 65535.0 {
        SampleScale::IDENTITY
    } else if integers && s.max - s.min <= 65535.0 {
        SampleScale {
            offset: s.min,
            step: 1.0,
        }
    } else {
        SampleScale {
            offset: s.min,
            step: ((s.max - s.min) / 65535.0).max(f64::MIN_POSITIVE),
        }
    }
}
