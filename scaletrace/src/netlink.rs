//! Netlink framing shared by the kernel queries that have no maintained Rust binding here
//! (sock_diag's `tcp_info` at the stop, RDMA's `nldev` resource and counter dumps): a request
//! builder, a dump reader that follows multipart replies to NLMSG_DONE, and an attribute walker.
//! Layouts are from include/uapi/linux/netlink.h; attributes are 4-byte aligned TLVs whose type
//! may carry the NLA_F_NESTED / NLA_F_NET_BYTEORDER flags in its top bits.
use std::{
    fs::File,
    io::{Read as _, Write as _},
    os::fd::FromRawFd as _,
};

use anyhow::{bail, Context as _, Result};

pub const NLMSG_HDRLEN: usize = 16;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 1;
pub const NLM_F_DUMP: u16 = 0x300;
/// Attribute type bits that are flags, not the type (NLA_F_NESTED | NLA_F_NET_BYTEORDER).
const NLA_TYPE_MASK: u16 = 0x3fff;

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink request: header, then a fixed family header and attributes appended in order.
pub struct Request(Vec<u8>);

impl Request {
    pub fn new(kind: u16, flags: u16, seq: u32) -> Self {
        let mut msg = Vec::with_capacity(64);
        msg.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `bytes`
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
        Request(msg)
    }

    /// Raw bytes after the header (a family's fixed header such as inet_diag_req_v2).
    pub fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }

    pub fn attr_u32(mut self, kind: u16, value: u32) -> Self {
        self.0.extend_from_slice(&8u16.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(&value.to_ne_bytes());
        self
    }

    pub fn bytes(mut self) -> Vec<u8> {
        let len = self.0.len() as u32;
        self.0[..4].copy_from_slice(&len.to_ne_bytes());
        self.0
    }
}

/// One message of a reply: its type and what follows its header.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: u16,
    pub payload: Vec<u8>,
}

/// Splits a datagram into its messages. An NLMSG_ERROR with a non-zero code becomes the error
/// (`errno`), an acknowledgement (code 0) is dropped.
pub fn messages(buf: &[u8]) -> std::result::Result<Vec<Message>, i32> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + NLMSG_HDRLEN <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        if len < NLMSG_HDRLEN || at + len > buf.len() {
            break;
        }
        let payload = &buf[at + NLMSG_HDRLEN..at + len];
        if kind == NLMSG_ERROR {
            let code = payload
                .get(..4)
                .map(|b| i32::from_ne_bytes(b.try_into().unwrap()))
                .unwrap_or(0);
            if code != 0 {
                return Err(-code);
            }
        } else {
            out.push(Message {
                kind,
                payload: payload.to_vec(),
            });
        }
        at += align4(len);
    }
    Ok(out)
}

/// The attributes of a payload (after any fixed header): (type without flag bits, value).
/// Stops at the first malformed one, as the kernel's own walker does.
pub fn attributes(mut buf: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if buf.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            return None;
        }
        let value = &buf[4..len];
        buf = &buf[align4(len).min(buf.len())..];
        Some((kind, value))
    })
}

/// The value of the first attribute of type `kind` in a payload.
pub fn attribute(buf: &[u8], kind: u16) -> Option<&[u8]> {
    attributes(buf).find(|(k, _)| *k == kind).map(|(_, v)| v)
}

pub fn attr_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.get(..4)?.try_into().ok()?))
}

pub fn attr_u64(value: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(value.get(..8)?.try_into().ok()?))
}

pub fn attr_u8(value: &[u8]) -> Option<u8> {
    value.first().copied()
}

/// A NUL-terminated string attribute.
pub fn attr_str(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// A netlink socket of one protocol, in the calling thread's network namespace.
pub struct Socket {
    file: File,
    buf: Vec<u8>,
}

impl Socket {
    pub fn open(protocol: libc::c_int) -> std::io::Result<Self> {
        // SAFETY: plain socket(2); the descriptor is owned right away.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                protocol,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Socket {
            // SAFETY: fd was just returned by socket(2) and nothing else owns it.
            file: unsafe { File::from_raw_fd(fd) },
            // a dump datagram is at most a page or two; 32 KiB is what iproute2 reads with
            buf: vec![0u8; 32 * 1024],
        })
    }

    /// Sends one request and returns the messages of its single reply datagram.
    pub fn request(&mut self, request: &[u8]) -> Result<std::result::Result<Vec<Message>, i32>> {
        self.file
            .write_all(request)
            .context("sending a netlink request")?;
        let n = self
            .file
            .read(&mut self.buf)
            .context("reading a netlink reply")?;
        Ok(messages(&self.buf[..n]))
    }

    /// Sends a dump request and collects every message until NLMSG_DONE.
    pub fn dump(&mut self, request: &[u8]) -> Result<std::result::Result<Vec<Message>, i32>> {
        self.file
            .write_all(request)
            .context("sending a netlink dump request")?;
        let mut out = Vec::new();
        loop {
            let n = self
                .file
                .read(&mut self.buf)
                .context("reading a netlink dump")?;
            if n == 0 {
                bail!("netlink dump ended without NLMSG_DONE");
            }
            let msgs = match messages(&self.buf[..n]) {
                Ok(m) => m,
                Err(errno) => return Ok(Err(errno)),
            };
            let done = msgs.iter().any(|m| m.kind == NLMSG_DONE);
            out.extend(msgs.into_iter().filter(|m| m.kind != NLMSG_DONE));
            if done {
                return Ok(Ok(out));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_skip_padding_and_flag_bits_and_stop_at_a_bad_length() {
        let mut buf = Vec::new();
        // a u8 attribute (length 5, padded to 8), a nested one with NLA_F_NESTED, a bad one
        buf.extend_from_slice(&5u16.to_ne_bytes());
        buf.extend_from_slice(&7u16.to_ne_bytes());
        buf.extend_from_slice(&[9, 0, 0, 0]);
        buf.extend_from_slice(&8u16.to_ne_bytes());
        buf.extend_from_slice(&(19u16 | 0x8000).to_ne_bytes());
        buf.extend_from_slice(&42u32.to_ne_bytes());
        buf.extend_from_slice(&200u16.to_ne_bytes());
        buf.extend_from_slice(&1u16.to_ne_bytes());
        let got: Vec<_> = attributes(&buf).collect();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, attr_u8(got[0].1)), (7, Some(9)));
        assert_eq!((got[1].0, attr_u32(got[1].1)), (19, Some(42)));
    }

    #[test]
    fn an_error_reply_is_its_errno_and_an_ack_is_nothing() {
        let reply = |code: i32| {
            let mut m = Request::new(NLMSG_ERROR, 0, 1).bytes();
            m.extend_from_slice(&code.to_ne_bytes());
            m.extend_from_slice(&[0u8; 16]); // the request's header, echoed
            let len = m.len() as u32;
            m[..4].copy_from_slice(&len.to_ne_bytes());
            m
        };
        assert_eq!(messages(&reply(-libc::EINVAL)), Err(libc::EINVAL));
        assert_eq!(messages(&reply(0)), Ok(vec![]));
    }
}
