//! ttrpc messages: the header, the call envelope, and a connection's byte stream cut
//! into messages.
//!
//! ```text
//! message = length (u32 BE, of the payload) · stream id (u32 BE) · type (u8) · flags (u8) · payload
//! type 1: request  (payload: ttrpc.Request  {service, method, payload, timeout_nano, metadata})
//! type 2: response (payload: ttrpc.Response {status {code, message}, payload})
//! ```
//!
//! The caller numbers its calls with odd stream ids (1, 3, 5, …); a response carries its
//! request's id. Owns: the header and envelope. Must not touch: NRI's messages.

use protobuf::Message as _;

use super::proto::ttrpc::{Request, Response, Status};

/// Length, stream id, type and flags.
pub const HEADER_LEN: usize = 10;
/// ttrpc's largest message payload (4 MiB).
pub const MAX_MESSAGE: usize = 4 << 20;
/// A call.
pub const TYPE_REQUEST: u8 = 1;
/// An answer.
pub const TYPE_RESPONSE: u8 = 2;

/// gRPC status codes used here.
pub mod code {
    pub const OK: i32 = 0;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;

    /// The gRPC name of a status code, as runtimes log it (`Unknown` for 2, the code a
    /// Go error with no status of its own travels as).
    pub fn name(code: i32) -> String {
        const NAMES: [&str; 17] = [
            "OK",
            "Canceled",
            "Unknown",
            "InvalidArgument",
            "DeadlineExceeded",
            "NotFound",
            "AlreadyExists",
            "PermissionDenied",
            "ResourceExhausted",
            "FailedPrecondition",
            "Aborted",
            "OutOfRange",
            "Unimplemented",
            "Internal",
            "Unavailable",
            "DataLoss",
            "Unauthenticated",
        ];
        usize::try_from(code)
            .ok()
            .and_then(|i| NAMES.get(i))
            .map_or_else(|| format!("code {code}"), |n| (*n).to_string())
    }
}

/// A message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TtrpcError {
    #[error("ttrpc message of {0} bytes is over the limit of {MAX_MESSAGE}")]
    Oversized(usize),
    #[error("ttrpc message of unknown type {0}")]
    UnknownType(u8),
    #[error("ttrpc envelope does not decode: {0}")]
    Decode(#[from] protobuf::Error),
}

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Message {
    /// Header then payload.
    pub fn encode(&self) -> Result<Vec<u8>, TtrpcError> {
        if self.payload.len() > MAX_MESSAGE {
            return Err(TtrpcError::Oversized(self.payload.len()));
        }
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len());
        out.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(self.flags);
        out.extend_from_slice(&self.payload);
        Ok(out)
    }

    /// A call of `service`/`method` with the encoded argument `payload`.
    pub fn request(stream: u32, service: &str, method: &str, payload: Vec<u8>) -> Message {
        let req = Request {
            service: service.to_owned(),
            method: method.to_owned(),
            payload,
            ..Default::default()
        };
        Message::envelope(stream, TYPE_REQUEST, &req)
    }

    /// The answer to call `stream`: the encoded result, or a status that is not OK.
    pub fn response(stream: u32, result: Result<Vec<u8>, (i32, String)>) -> Message {
        let mut resp = Response::new();
        match result {
            Ok(payload) => {
                resp.payload = payload;
                resp.status = protobuf::MessageField::some(Status::new());
            }
            Err((code, message)) => {
                resp.status = protobuf::MessageField::some(Status {
                    code,
                    message,
                    ..Default::default()
                });
            }
        }
        Message::envelope(stream, TYPE_RESPONSE, &resp)
    }

    fn envelope(stream: u32, kind: u8, m: &dyn protobuf::MessageDyn) -> Message {
        let payload = m
            .write_to_bytes_dyn()
            .expect("encoding a message held in memory cannot fail");
        Message {
            stream,
            kind,
            flags: 0,
            payload,
        }
    }

    /// This message's call envelope.
    pub fn as_request(&self) -> Result<Request, TtrpcError> {
        Ok(Request::parse_from_bytes(&self.payload)?)
    }

    /// This message's answer envelope, as the result or the status that is not OK.
    pub fn as_response(&self) -> Result<Result<Vec<u8>, (i32, String)>, TtrpcError> {
        let resp = Response::parse_from_bytes(&self.payload)?;
        let status = resp.status.into_option().unwrap_or_default();
        if status.code == code::OK {
            Ok(Ok(resp.payload))
        } else {
            Ok(Err((status.code, status.message)))
        }
    }
}

/// One connection's bytes, cut into messages as they arrive.
#[derive(Debug, Default)]
pub struct Reassembly {
    buf: Vec<u8>,
}

impl Reassembly {
    /// Bytes that arrived on the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one has arrived.
    pub fn next_message(&mut self) -> Result<Option<Message>, TtrpcError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let b = &self.buf;
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(TtrpcError::Oversized(len));
        }
        let kind = b[8];
        if kind != TYPE_REQUEST && kind != TYPE_RESPONSE && kind != 3 {
            return Err(TtrpcError::UnknownType(kind));
        }
        if b.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let stream = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let flags = b[9];
        let payload = b[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Ok(Some(Message {
            stream,
            kind,
            flags,
            payload,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by hand from the format, so that encoder and decoder cannot agree on a
    /// mistake: stream 3, a request for `S`/`M` with payload `x`.
    const HAND_MADE: [u8; 19] = [
        0, 0, 0, 9, // payload length
        0, 0, 0, 3, // stream id
        1, 0, // request, no flags
        0x0a, 1, b'S', // field 1 (service), length 1
        0x12, 1, b'M', // field 2 (method), length 1
        0x1a, 1,
        b'x', // field 3 (payload), length 1
              // (timeout and metadata absent)
    ];

    #[test]
    fn a_request_is_the_bytes_the_format_says() {
        let m = Message::request(3, "S", "M", b"x".to_vec());
        assert_eq!(m.encode().unwrap(), HAND_MADE);
    }

    #[test]
    fn hand_made_bytes_read_as_a_request_even_when_they_arrive_in_pieces() {
        let mut r = Reassembly::default();
        for b in &HAND_MADE[..18] {
            r.push(&[*b]);
            assert_eq!(r.next_message().unwrap(), None);
        }
        r.push(&HAND_MADE[18..19]);
        let m = r.next_message().unwrap().unwrap();
        assert_eq!((m.stream, m.kind, m.flags), (3, TYPE_REQUEST, 0));
        let req = m.as_request().unwrap();
        assert_eq!((req.service.as_str(), req.method.as_str()), ("S", "M"));
        assert_eq!(req.payload, b"x");
        assert_eq!(r.next_message().unwrap(), None);
    }

    #[test]
    fn an_unimplemented_answer_carries_code_12() {
        let m = Message::response(5, Err((code::UNIMPLEMENTED, "no".into())));
        // status {code: 12, message: "no"}, no payload
        assert_eq!(
            m.encode().unwrap(),
            [0, 0, 0, 8, 0, 0, 0, 5, 2, 0, 0x0a, 6, 0x08, 12, 0x12, 2, b'n', b'o']
        );
        assert_eq!(m.as_response().unwrap(), Err((12, "no".to_string())));
    }

    /// Bytes as a broken or hostile runtime might send them, in chunks of any size:
    /// half of them messages with a plausible header (small length, a known type) and a
    /// random envelope, so that the envelopes' decoding is reached too. Never a panic;
    /// the buffer never holds more than one unfinished message and the chunk after it.
    #[test]
    fn random_bytes_never_panic_and_the_buffer_stays_bounded() {
        let mut rng = crate::measure::rng::Rng::new(49);
        let (mut messages, mut errors) = (0, 0);
        for _ in 0..2000 {
            let mut r = Reassembly::default();
            'stream: for _ in 0..8 {
                let mut chunk = Vec::new();
                if rng.below(2) == 0 {
                    let len = rng.below(64);
                    chunk.extend_from_slice(&(len as u32).to_be_bytes());
                    chunk.extend_from_slice(&(rng.next_u64() as u32).to_be_bytes());
                    chunk.push(1 + rng.below(3) as u8);
                    chunk.push(rng.next_u64() as u8);
                }
                let tail = rng.below(80);
                chunk.extend((0..tail).map(|_| rng.next_u64() as u8));
                r.push(&chunk);
                loop {
                    match r.next_message() {
                        Ok(Some(m)) => {
                            messages += 1;
                            let _ = m.as_request();
                            let _ = m.as_response();
                        }
                        Ok(None) => break,
                        // The session ends here; nothing more is read.
                        Err(_) => {
                            errors += 1;
                            break 'stream;
                        }
                    }
                }
                assert!(
                    r.buf.len() <= HEADER_LEN + MAX_MESSAGE + chunk.len(),
                    "{}",
                    r.buf.len()
                );
            }
        }
        assert!(messages > 1000 && errors > 100, "{messages} {errors}");
    }

    #[test]
    fn an_oversized_length_is_refused_before_it_arrives() {
        let mut r = Reassembly::default();
        r.push(&[0x10, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
        assert!(matches!(r.next_message(), Err(TtrpcError::Oversized(_))));
    }
}
