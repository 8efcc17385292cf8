//! The user's own images: PNG, JPEG or DICOM bytes decoded into one grey (or RGB) image with
//! what the viewer and the model input need to know about it (DICOM window, MONOCHROME1
//! inversion, modality rescale), and the identifying attributes kept apart.
//!
//! PNG and JPEG go through [`crate::image::decode`] unchanged, so a ReXVQA PNG gives the same
//! model input through either path; DICOM goes through [`dicom`] (dicom-rs, pure Rust). The
//! 16→8-bit step is the benchmark's [`Policy`], plus [`Policy::Window`] for a DICOM file's own
//! Window Center/Width.

pub mod dicom;
mod dicom_lengths;
#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::image::{self, Decoded, Image8, ImageError, Policy};

/// Errors opening an image file; each names what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    /// A 0-byte file.
    #[error("the file is empty (0 bytes)")]
    Empty,
    /// Neither PNG, JPEG nor DICOM.
    #[error(
        "not a PNG, JPEG or DICOM file (a DICOM file has \"DICM\" at byte 128); open a PNG, JPEG or DICOM file"
    )]
    Unknown,
    /// A `.dcm` file whose bytes are not DICOM.
    #[error(
        "named .dcm but not a DICOM file (no \"DICM\" marker at byte 128){}", looks_like.map(|f| format!("; its bytes are a {f} image: rename it to .{}", f.to_lowercase())).unwrap_or_default()
    )]
    NotDicom {
        /// The format the bytes have, when one is recognised.
        looks_like: Option<&'static str>,
    },
    /// A PNG or JPEG that does not decode.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A DICOM file that does not decode.
    #[error(transparent)]
    Dicom(#[from] dicom::DicomError),
}

/// What kind of file an image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// PNG (8/16-bit grey or RGB).
    Png,
    /// JPEG (baseline or progressive, 8-bit).
    Jpeg,
    /// DICOM Part 10 file.
    Dicom,
}

/// Min, max and mean of the grey values (after the DICOM modality rescale; over all channels
/// of an RGB image).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Stats {
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Mean value.
    pub mean: f64,
}

impl Stats {
    /// The stats of `values` (zeros for none).
    pub fn of(values: impl Iterator<Item = f64>) -> Stats {
        let (mut min, mut max, mut sum, mut n) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize);
        for v in values {
            min = min.min(v);
            max = max.max(v);
            sum += v;
            n += 1;
        }
        if n == 0 {
            return Stats {
                min: 0.0,
                max: 0.0,
                mean: 0.0,
            };
        }
        Stats {
            min,
            max,
            mean: sum / n as f64,
        }
    }
}

/// A VOI window in rescaled (modality) units, as DICOM Window Center/Width give it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Window {
    /// Window Center (0028,1050).
    pub center: f64,
    /// Window Width (0028,1051).
    pub width: f64,
}

impl Window {
    /// The 8-bit output of the DICOM linear VOI function for `x` (ref: PS3.3 C.11.2.1.2.1:
    /// below c−0.5−(w−1)/2 → 0, above c−0.5+(w−1)/2 → 255, linear between), rounded.
    pub fn apply(&self, x: f64) -> u8 {
        let (c, w) = (self.center - 0.5, (self.width - 1.0).max(0.0));
        if x <= c - w / 2.0 {
            0
        } else if x > c + w / 2.0 {
            255
        } else {
            (((x - c) / w.max(f64::MIN_POSITIVE) + 0.5) * 255.0)
                .round()
                .clamp(0.0, 255.0) as u8
        }
    }
}

/// How a decoded sample maps back to the rescaled value: `value = offset + step * sample`.
/// Identity for PNG/JPEG and for DICOM whose rescaled values are integers in 0..=65535 (plain
/// radiographs); otherwise chosen so the range fits u16 (CT-like negative values, fractional
/// slopes).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct SampleScale {
    /// Rescaled value of sample 0.
    pub offset: f64,
    /// Rescaled units per sample step.
    pub step: f64,
}

impl SampleScale {
    /// `value = sample`.
    pub const IDENTITY: SampleScale = SampleScale {
        offset: 0.0,
        step: 1.0,
    };

    /// The rescaled value of `sample`.
    pub fn value(&self, sample: u16) -> f64 {
        self.offset + self.step * f64::from(sample)
    }
}

/// One identifying attribute (patient name, ID, birth date, accession, institution): shown to
/// the user on this machine only, never written to storage, journals or exports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Identifying {
    /// The attribute's name (`PatientName`).
    pub name: String,
    /// Its value as written in the file.
    pub value: String,
}

/// What a DICOM file says about its pixels.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DicomInfo {
    /// Transfer syntax UID.
    pub transfer_syntax: String,
    /// Its name (`Explicit VR Little Endian`).
    pub transfer_syntax_name: String,
    /// Number of frames in the file (only the first is shown and asked about).
    pub frames: u32,
    /// Rescale Slope (1 when absent).
    pub rescale_slope: f64,
    /// Rescale Intercept (0 when absent).
    pub rescale_intercept: f64,
    /// The file's first window, in rescaled units.
    pub window: Option<Window>,
    /// How samples map back to rescaled values.
    pub scale: SampleScale,
}

/// A decoded image file.
#[derive(Debug, Clone, PartialEq)]
pub struct Picture {
    /// What it was.
    pub format: Format,
    /// The samples (DICOM: modality-rescaled values through [`DicomInfo::scale`]).
    pub pixels: Decoded,
    /// Bits stored per sample (8 or 16 for PNG/JPEG; Bits Stored for DICOM).
    pub bits_stored: u16,
    /// DICOM Photometric Interpretation, or `MONOCHROME2`/`RGB` for PNG and JPEG.
    pub photometric: String,
    /// Stats of the values after the modality rescale.
    pub stats: Stats,
    /// DICOM-only facts.
    pub dicom: Option<DicomInfo>,
    /// Identifying attributes present in the file (DICOM only; kept apart from everything
    /// that is stored or exported).
    pub identifying: Vec<Identifying>,
}

/// The facts `rexvqa image-info` prints (no identifying attribute among them).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ImageInfo {
    /// `png`, `jpeg` or `dicom`.
    pub format: Format,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// 1 (grey) or 3 (RGB).
    pub channels: u8,
    /// Bits stored per sample.
    pub bits_stored: u16,
    /// Photometric interpretation.
    pub photometric: String,
    /// Frames in the file (1 for PNG/JPEG).
    pub frames: u32,
    /// DICOM transfer syntax UID.
    pub transfer_syntax: Option<String>,
    /// Its name.
    pub transfer_syntax_name: Option<String>,
    /// The file's window, if any.
    pub window: Option<Window>,
    /// Grey values after the modality rescale.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// See `min`.
    pub mean: f64,
}

/// The format `bytes` have, from their first bytes.
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    if dicom::has_preamble(bytes) || bytes.starts_with(b"DICM") {
        return Some(Format::Dicom);
    }
    match ::image::guess_format(bytes).ok() {
        Some(::image::ImageFormat::Png) => Some(Format::Png),
        Some(::image::ImageFormat::Jpeg) => Some(Format::Jpeg),
        _ => None,
    }
}

/// Decodes a PNG, JPEG or DICOM file told apart by its bytes.
pub fn decode(bytes: &[u8]) -> Result<Picture, PictureError> {
    if bytes.is_empty() {
        return Err(PictureError::Empty);
    }
    match sniff(bytes) {
        Some(Format::Dicom) => Ok(dicom::decode(bytes)?),
        Some(f) => plain(f, bytes),
        None => Err(PictureError::Unknown),
    }
}

/// Decodes the file `name`: a `.dcm`/`.dicom` name must hold DICOM (a PNG renamed `.dcm` is
/// refused, saying what it is); other names go by their bytes.
pub fn decode_named(name: &str, bytes: &[u8]) -> Result<Picture, PictureError> {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    if bytes.is_empty() {
        return Err(PictureError::Empty);
    }
    if matches!(ext.as_deref(), Some("dcm" | "dicom")) && sniff(bytes) != Some(Format::Dicom) {
        return Err(PictureError::NotDicom {
            looks_like: match sniff(bytes) {
                Some(Format::Png) => Some("PNG"),
                Some(Format::Jpeg) => Some("JPEG"),
                _ => None,
            },
        });
    }
    decode(bytes)
}

/// A PNG or JPEG through [`crate::image::decode`].
fn plain(format: Format, bytes: &[u8]) -> Result<Picture, PictureError> {
    let pixels = image::decode(bytes)?;
    let stats = Stats::of(pixels.samples.iter().map(|&v| f64::from(v)));
    Ok(Picture {
        format,
        bits_stored: u16::from(pixels.bits),
        photometric: if pixels.channels == 1 {
            "MONOCHROME2"
        } else {
            "RGB"
        }
        .into(),
        pixels,
        stats,
        dicom: None,
        identifying: Vec::new(),
    })
}

impl Picture {
    /// Whether low values are white (DICOM MONOCHROME1): shown and given to the model inverted.
    pub fn inverted(&self) -> bool {
        self.photometric == "MONOCHROME1"
    }

    /// The file's window, if it has one.
    pub fn window(&self) -> Option<Window> {
        self.dicom.as_ref().and_then(|d| d.window)
    }

    /// The file's window in the units of [`Picture::pixels`]' samples (its rescaled window
    /// mapped back through [`DicomInfo::scale`]), for a viewer that windows the samples
    /// directly.
    pub fn sample_window(&self) -> Option<Window> {
        let w = self.window()?;
        let scale = self
            .dicom
            .as_ref()
            .map_or(SampleScale::IDENTITY, |d| d.scale);
        Some(Window {
            center: (w.center - scale.offset) / scale.step,
            width: w.width / scale.step,
        })
    }

    /// The policy that actually maps this image to 8 bits when `asked` is chosen: 8-bit images
    /// pass through (`None`), and [`Policy::Window`] on a file without a window is min–max.
    pub fn applied_policy(&self, asked: Policy) -> Option<Policy> {
        match asked {
            _ if self.pixels.bits == 8 => None,
            Policy::Window if self.window().is_none() => Some(Policy::Minmax),
            p => Some(p),
        }
    }

    /// The mapping to the model's 8 bits, in words, for the page and the CLI.
    pub fn describe_policy(&self, asked: Policy) -> String {
        let how = match (self.applied_policy(asked), self.window()) {
            (None, _) => "8-bit, as stored".to_string(),
            (Some(Policy::Window), Some(w)) => {
                format!("window (center {}, width {})", w.center, w.width)
            }
            (Some(Policy::Minmax), _) if asked == Policy::Window => {
                "minmax (the file has no window)".to_string()
            }
            (Some(p), _) => p.name().to_string(),
        };
        if self.inverted() {
            format!("{how}, inverted (MONOCHROME1)")
        } else {
            how
        }
    }

    /// The 8-bit image the model's preprocessing starts from.
    pub fn to_8bit(&self, asked: Policy) -> Image8 {
        let mut out = match (self.applied_policy(asked), self.window()) {
            (Some(Policy::Window), Some(w)) => {
                let scale = self
                    .dicom
                    .as_ref()
                    .map_or(SampleScale::IDENTITY, |d| d.scale);
                // One output per possible sample: cheaper than the formula per pixel.
                let lut: Vec<u8> = (0..=u16::MAX).map(|s| w.apply(scale.value(s))).collect();
                Image8 {
                    width: self.pixels.width,
                    height: self.pixels.height,
                    channels: self.pixels.channels,
                    data: self
                        .pixels
                        .samples
                        .iter()
                        .map(|&s| lut[usize::from(s)])
                        .collect(),
                }
            }
            (Some(p), _) => self.pixels.to_8bit(p),
            (None, _) => self.pixels.to_8bit(Policy::Scale),
        };
        if self.inverted() {
            out.data.iter_mut().for_each(|v| *v = 255 - *v);
        }
        out
    }

    /// The facts `rexvqa image-info` prints.
    pub fn info(&self) -> ImageInfo {
        ImageInfo {
            format: self.format,
            width: self.pixels.width,
            height: self.pixels.height,
            channels: self.pixels.channels,
            bits_stored: self.bits_stored,
            photometric: self.photometric.clone(),
            frames: self.dicom.as_ref().map_or(1, |d| d.frames),
            transfer_syntax: self.dicom.as_ref().map(|d| d.transfer_syntax.clone()),
            transfer_syntax_name: self.dicom.as_ref().map(|d| d.transfer_syntax_name.clone()),
            window: self.window(),
            min: self.stats.min,
            max: self.stats.max,
            mean: self.stats.mean,
        }
    }
}
