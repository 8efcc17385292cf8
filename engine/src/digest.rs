//! SHA-256 of model files, so a report names exactly which weights produced it.

use sha2::{Digest, Sha256};

use crate::gguf::{RangeSource, SourceError};

/// Bytes read per step (also the progress granularity).
const PIECE: usize = 8 << 20;

/// A SHA-256 fed piece by piece, so that a copy can hash the bytes it writes in the same pass
/// instead of reading the whole file again afterwards.
#[derive(Clone, Default)]
pub struct Sha256Stream(Sha256);

impl Sha256Stream {
    /// An empty digest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The lower-case hex digest of everything added.
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

/// Lower-case hex SHA-256 of a whole source, read in pieces; `progress(done, total)` after each.
pub async fn sha256<S: RangeSource>(
    src: &S,
    mut progress: impl FnMut(u64, u64),
) -> Result<String, SourceError> {
    let total = src.size();
    let mut h = Sha256Stream::new();
    let mut done = 0u64;
    while done < total {
        let n = PIECE.min((total - done) as usize);
        h.update(&src.read_range(done, n).await?);
        done += n as u64;
        progress(done, total);
    }
    Ok(h.finish())
}

/// Lower-case hex SHA-256 of bytes in memory.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::gguf::SliceSource;

    #[test]
    fn known_digests_and_pieces_agree() {
        // FIPS 180-2 test vector.
        assert_eq!(
            sha256_bytes(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let data: Vec<u8> = (0..(PIECE * 2 + 12345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut steps = Vec::new();
        let got = pollster::block_on(sha256(&SliceSource(data.clone()), |d, t| {
            steps.push((d, t))
        }))
        .unwrap();
        assert_eq!(got, sha256_bytes(&data));
        // Fed in uneven pieces, as a copy feeds it, the stream gives the same digest.
        let mut stream = Sha256Stream::new();
        for piece in data.chunks(PIECE / 3 + 7) {
            stream.update(piece);
        }
        assert_eq!(stream.finish(), got);
        assert_eq!(steps.len(), 3);
        assert_eq!(steps.last(), Some(&(data.len() as u64, data.len() as u64)));
    }
}
