//! The AWS event-stream framing (`application/vnd.amazon.eventstream`) that carries
//! ConverseStream and InvokeModelWithResponseStream.
//!
//! Each message is a 12-byte prelude (total length, headers length, both big-endian
//! `u32`, and the CRC-32 of those 8 bytes), its headers (a name of up to 255 bytes, a type
//! byte, a value), its payload, and the CRC-32 of everything before it. A small decoder of
//! a complete body is all a folded stream needs: it checks both CRCs, tells a message cut
//! off by the end of the body (the stream was truncated) from one that is corrupt, and
//! costs one already-built crate (`crc`, which sqlx builds) where `aws-smithy-eventstream`
//! would add its own build and a streaming API this transport does not use.

use crc::{CRC_32_ISO_HDLC, Crc};

/// CRC-32 as the framing uses it (IEEE 802.3, the one zlib computes).
const CRC32: Crc<u32> = Crc::<u32>::new(&CRC_32_ISO_HDLC);

/// Prelude (12 bytes) and message CRC (4).
const OVERHEAD: usize = 16;

/// The largest message AWS sends (16 MiB): a longer length is corruption.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The headers whose values are strings (`:message-type`, `:event-type` …); values
    /// of other types are skipped, as nothing here reads them.
    pub headers: Vec<(String, String)>,
    /// The message's body: for an event, the JSON of one chunk.
    pub payload: Vec<u8>,
    /// The offset just past this message in the body.
    pub end: usize,
}

impl Message {
    /// A string header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the body ended after its last whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Right after a message.
    Clean,
    /// In the middle of a message: the body was cut off.
    Cut {
        /// How many bytes of the partial message had arrived.
        bytes: usize,
    },
    /// At a message that is not one: a CRC that does not match, a length that cannot be.
    Corrupt(String),
}

/// Why a message is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Corrupt {
    #[error("the prelude's CRC does not match")]
    PreludeCrc,
    #[error("a message of {total} bytes with {headers} bytes of headers")]
    Lengths { total: usize, headers: usize },
    #[error("the message's CRC does not match")]
    MessageCrc,
    #[error("a header runs past its block")]
    ShortHeader,
    #[error("header `{name}` has an unknown type {kind}")]
    HeaderType { name: String, kind: u8 },
}

/// Every whole message of `body`, in order, and how the body ended after them.
pub fn messages(body: &[u8]) -> (Vec<Message>, Ending) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        match message(&body[at..]) {
            Ok(Some((mut message, length))) => {
                at += length;
                message.end = at;
                out.push(message);
            }
            Ok(None) => {
                return (
                    out,
                    Ending::Cut {
                        bytes: body.len() - at,
                    },
                );
            }
            Err(why) => return (out, Ending::Corrupt(format!("at byte {at}: {why}"))),
        }
    }
    (out, Ending::Clean)
}

/// The message at the start of `bytes` and its length; `None` when `bytes` ends before
/// it does.
fn message(bytes: &[u8]) -> Result<Option<(Message, usize)>, Corrupt> {
    let Some(prelude) = bytes.get(..12) else {
        return Ok(None);
    };
    let total = be32(&prelude[0..4]) as usize;
    let headers_length = be32(&prelude[4..8]) as usize;
    if CRC32.checksum(&prelude[..8]) != be32(&prelude[8..12]) {
        return Err(Corrupt::PreludeCrc);
    }
    if !(OVERHEAD..=MAX_MESSAGE).contains(&total) || headers_length > total - OVERHEAD {
        return Err(Corrupt::Lengths {
            total,
            headers: headers_length,
        });
    }
    let Some(whole) = bytes.get(..total) else {
        return Ok(None);
    };
    if CRC32.checksum(&whole[..total - 4]) != be32(&whole[total - 4..]) {
        return Err(Corrupt::MessageCrc);
    }
    let headers = headers(&whole[12..12 + headers_length])?;
    let payload = whole[12 + headers_length..total - 4].to_vec();
    Ok(Some((
        Message {
            headers,
            payload,
            end: 0,
        },
        total,
    )))
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The string headers of a header block; every other type is read past.
fn headers(mut block: &[u8]) -> Result<Vec<(String, String)>, Corrupt> {
    let mut out = Vec::new();
    let short = || Corrupt::ShortHeader;
    while !block.is_empty() {
        let name_length = usize::from(block[0]);
        let name = block.get(1..1 + name_length).ok_or_else(short)?;
        let name = String::from_utf8_lossy(name).into_owned();
        block = &block[1 + name_length..];
        let (&kind, rest) = block.split_first().ok_or_else(short)?;
        let fixed = match kind {
            0 | 1 => Some(0),
            2 => Some(1),
            3 => Some(2),
            4 => Some(4),
            5 | 8 => Some(8),
            9 => Some(16),
            6 | 7 => None,
            other => return Err(Corrupt::HeaderType { name, kind: other }),
        };
        block = match fixed {
            Some(length) => rest.get(length..).ok_or_else(short)?,
            None => {
                let length = usize::from(u16::from_be_bytes([
                    *rest.first().ok_or_else(short)?,
                    *rest.get(1).ok_or_else(short)?,
                ]));
                let value = rest.get(2..2 + length).ok_or_else(short)?;
                if kind == 7 {
                    out.push((name, String::from_utf8_lossy(value).into_owned()));
                }
                &rest[2 + length..]
            }
        };
    }
    Ok(out)
}

/// One message with string `headers` and `payload`, framed: what AWS sends, for the mock
/// servers and recorded streams of the tests.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(7);
        block.extend_from_slice(&(value.len() as u16).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    let total = (OVERHEAD + block.len() + payload.len()) as u32;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(block.len() as u32).to_be_bytes());
    let prelude_crc = CRC32.checksum(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&block);
    out.extend_from_slice(payload);
    let crc = CRC32.checksum(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// An event message, as ConverseStream sends one.
pub fn event(kind: &str, payload: &str) -> Vec<u8> {
    frame(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

/// An exception message inside a stream (`throttlingException` …).
pub fn exception(kind: &str, message: &str) -> Vec<u8> {
    let payload = serde_json::json!({ "message": message }).to_string();
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload.as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_it_frames_and_checks_both_crcs() {
        let body = [
            event("messageStart", r#"{"role":"assistant"}"#),
            exception("throttlingException", "slow down"),
        ]
        .concat();
        let (found, ending) = messages(&body);
        assert_eq!(ending, Ending::Clean);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].header(":event-type"), Some("messageStart"));
        assert_eq!(found[0].payload, br#"{"role":"assistant"}"#);
        assert_eq!(found[1].header(":message-type"), Some("exception"));
        assert_eq!(found[1].end, body.len());
        // Cut anywhere inside the second message: one message, then a cut.
        let (found, ending) = messages(&body[..body.len() - 3]);
        assert_eq!(found.len(), 1);
        assert!(matches!(ending, Ending::Cut { .. }));
        let (_, ending) = messages(&body[..found[0].end + 5]);
        assert!(matches!(ending, Ending::Cut { bytes: 5 }));
        // One flipped payload byte: the message CRC fails; one in the prelude: its own.
        let mut flipped = body.clone();
        flipped[found[0].end - 6] ^= 1;
        assert!(matches!(messages(&flipped).1, Ending::Corrupt(m) if m.contains("message's CRC")));
        let mut flipped = body.clone();
        flipped[2] ^= 1;
        assert!(matches!(messages(&flipped).1, Ending::Corrupt(m) if m.contains("prelude")));
    }

    #[test]
    fn reads_the_crc_of_a_known_message() {
        // The CRC-32 of "123456789" is the check value of CRC-32/ISO-HDLC.
        assert_eq!(CRC32.checksum(b"123456789"), 0xCBF4_3926);
    }
}
