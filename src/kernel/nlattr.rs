//! Netlink attributes of the nfnetlink subsystems (ipset, nf_tables): a builder for requests and a
//! tolerant iterator for the kernel's answers. Values in network byte order carry `NLA_F_NET_BYTEORDER`.

/// The attribute holds nested attributes.
pub const NLA_F_NESTED: u16 = 0x8000;
/// The attribute's value is in network byte order.
pub const NLA_F_NET_BYTEORDER: u16 = 0x4000;
/// The attribute type without its flags.
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);
/// `struct nfgenmsg` (family, version, resource id) heading every nfnetlink message.
pub const NFGENMSG_LEN: usize = 4;

/// A growing buffer of netlink attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs(pub Vec<u8>);

impl Attrs {
    /// One attribute with a raw value (padded to 4 bytes).
    pub fn put(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = (4 + value.len()) as u16;
        self.0.extend_from_slice(&len.to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }

    /// One byte.
    pub fn u8(&mut self, kind: u16, v: u8) -> &mut Self {
        self.put(kind, &[v])
    }

    /// A 16-bit value in network byte order (the kernel insists on the flag).
    pub fn be16(&mut self, kind: u16, v: u16) -> &mut Self {
        self.put(kind | NLA_F_NET_BYTEORDER, &v.to_be_bytes())
    }

    /// A 32-bit value in network byte order.
    pub fn be32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.put(kind | NLA_F_NET_BYTEORDER, &v.to_be_bytes())
    }

    /// A 64-bit value in network byte order.
    pub fn be64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.put(kind | NLA_F_NET_BYTEORDER, &v.to_be_bytes())
    }

    /// A NUL-terminated string.
    pub fn string(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut v = s.as_bytes().to_vec();
        v.push(0);
        self.put(kind, &v)
    }

    /// A nested attribute whose content `f` writes.
    pub fn nested(&mut self, kind: u16, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut inner = Attrs::default();
        f(&mut inner);
        self.put(kind | NLA_F_NESTED, &inner.0)
    }
}

/// Iterator over (type without flags, value) of a buffer of attributes; stops at the first malformed one.
pub struct Nlas<'a> {
    buf: &'a [u8],
}

impl<'a> Nlas<'a> {
    /// The attributes of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Nlas { buf }
    }
}

impl<'a> Iterator for Nlas<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let len = usize::from(u16::from_ne_bytes(self.buf.get(0..2)?.try_into().ok()?));
        let kind = u16::from_ne_bytes(self.buf.get(2..4)?.try_into().ok()?);
        if len < 4 || len > self.buf.len() {
            self.buf = &[];
            return None;
        }
        let value = &self.buf[4..len];
        let next = ((len + 3) & !3).min(self.buf.len());
        self.buf = &self.buf[next..];
        Some((kind & NLA_TYPE_MASK, value))
    }
}

/// A big-endian u16 value, if long enough.
pub fn be16(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?))
}

/// A big-endian u32 value, if long enough.
pub fn be32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

/// A big-endian u64 value, if long enough.
pub fn be64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))
}

/// A string value up to its first NUL (lossy UTF-8).
pub fn c_string(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_padding() {
        let mut a = Attrs::default();
        a.string(1, "kube-proxy")
            .be64(4, 0x0102_0304_0506_0708)
            .nested(7, |n| {
                n.u8(2, 9);
            });
        assert!(a.0.len().is_multiple_of(4));
        let got: Vec<(u16, Vec<u8>)> = Nlas::new(&a.0).map(|(k, v)| (k, v.to_vec())).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(c_string(&got[0].1), "kube-proxy");
        assert_eq!(be64(&got[1].1), Some(0x0102_0304_0506_0708));
        assert_eq!(got[2].0, 7);
        assert_eq!(Nlas::new(&got[2].1).next(), Some((2, &[9u8][..])));
        // A length past the end stops the iteration instead of panicking.
        let mut bad = a.0.clone();
        bad[0] = 0xff;
        assert_eq!(Nlas::new(&bad).count(), 0);
    }
}
