//! The NRI multiplexer's frames: several logical connections over the one socket.
//!
//! ```text
//! frame = conn id (u32, big-endian) · length (u32, big-endian) · payload (length bytes)
//! ```
//!
//! Each connection is a byte stream of its own: a payload carries bytes of that stream
//! (the runtime's writer sends one ttrpc message per frame, but nothing here relies on
//! it; `ttrpc::Reassembly` cuts the stream into messages). Connection 1 carries the
//! runtime's calls to the plugin, connection 2 the plugin's calls to the runtime; id 0 is
//! reserved.
//!
//! Owns: frame encoding and reading. Must not touch: what the payload means.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::ttrpc;

/// The runtime calls the plugin on this connection (service `nri.pkg.api.v1alpha1.Plugin`).
pub const PLUGIN_CONN: u32 = 1;
/// The plugin calls the runtime on this connection (service `...Runtime`).
pub const RUNTIME_CONN: u32 = 2;
/// Connection id and payload length.
pub const HEADER_LEN: usize = 8;
/// The largest payload the runtime's multiplexer accepts: one whole ttrpc message.
pub const MAX_PAYLOAD: usize = ttrpc::HEADER_LEN + ttrpc::MAX_MESSAGE;

/// A frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    /// frame payload of {0} bytes is over the multiplexer's limit
    #[error("frame payload of {0} bytes is over the multiplexer's limit of {MAX_PAYLOAD}")]
    Oversized(usize),
    /// the socket failed or closed in the middle of a frame
    #[error("reading a frame: {0}")]
    Io(#[from] std::io::Error),
}

/// One frame, as read from the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub conn: u32,
    pub payload: Vec<u8>,
}

/// The bytes of one frame carrying `payload` on connection `conn`.
pub fn encode(conn: u32, payload: &[u8]) -> Result<Vec<u8>, MuxError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(MuxError::Oversized(payload.len()));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&conn.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// Reads the next frame; `None` when the peer closed the socket between frames.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>, MuxError> {
    let mut header = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        let n = r.read(&mut header[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        got += n;
    }
    let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_PAYLOAD {
        return Err(MuxError::Oversized(len));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some(Frame { conn, payload }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_conn_then_length_big_endian_then_payload() {
        let bytes = encode(2, b"abc").unwrap();
        assert_eq!(bytes, [0, 0, 0, 2, 0, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn an_oversized_payload_is_refused() {
        let big = vec![0u8; MAX_PAYLOAD + 1];
        assert!(matches!(encode(1, &big), Err(MuxError::Oversized(_))));
    }

    #[tokio::test]
    async fn frames_read_back_and_a_clean_close_is_none() {
        let mut bytes = encode(1, b"hello").unwrap();
        bytes.extend(encode(2, b"").unwrap());
        let mut r = &bytes[..];
        assert_eq!(
            read(&mut r).await.unwrap(),
            Some(Frame {
                conn: 1,
                payload: b"hello".to_vec()
            })
        );
        assert_eq!(
            read(&mut r).await.unwrap(),
            Some(Frame {
                conn: 2,
                payload: vec![]
            })
        );
        assert_eq!(read(&mut r).await.unwrap(), None);
    }

    /// Random bytes read as frames: each read ends in a frame, a clean end or an
    /// error, never a panic, and no frame is longer than the limit however long its
    /// header says it is.
    #[tokio::test]
    async fn random_bytes_read_as_frames_or_errors_never_past_the_limit() {
        let mut rng = crate::measure::rng::Rng::new(49);
        let (mut frames, mut oversized) = (0, 0);
        for _ in 0..2000 {
            let mut bytes: Vec<u8> = (0..rng.below(40)).map(|_| rng.next_u64() as u8).collect();
            if rng.below(2) == 0 && bytes.len() >= HEADER_LEN {
                // A plausible length, so that payloads are read too.
                let len = rng.below(bytes.len()) as u32;
                bytes[4..8].copy_from_slice(&len.to_be_bytes());
            }
            let mut r = &bytes[..];
            loop {
                match read(&mut r).await {
                    Ok(Some(f)) => {
                        assert!(f.payload.len() <= MAX_PAYLOAD);
                        frames += 1;
                    }
                    Ok(None) => break,
                    Err(MuxError::Oversized(n)) => {
                        assert!(n > MAX_PAYLOAD);
                        oversized += 1;
                        break;
                    }
                    Err(MuxError::Io(_)) => break,
                }
            }
        }
        assert!(frames > 100 && oversized > 100, "{frames} {oversized}");
    }

    #[tokio::test]
    async fn a_frame_cut_short_is_an_error() {
        let bytes = encode(1, b"hello").unwrap();
        let mut r = &bytes[..7];
        assert!(read(&mut r).await.is_err());
        let mut r = &bytes[..10];
        assert!(read(&mut r).await.is_err());
    }
}
