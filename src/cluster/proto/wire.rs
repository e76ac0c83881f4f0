//! The protobuf wire format, as far as reading and pruning Kubernetes objects need it: varints, field
//! keys and the wire types. No Kubernetes message uses groups (wire types 3 and 4); one is read as a
//! whole (an unknown field to skip), as prost skips it.

use thiserror::Error;

/// A malformed encoding.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// A varint runs past the end of its buffer or over ten bytes.
    #[error("truncated or overlong varint")]
    Varint,
    /// A field's value runs past the end of its buffer.
    #[error("field {0} is truncated")]
    Truncated(u32),
    /// Field number 0, or a wire type no Kubernetes message uses.
    #[error("field {tag} has wire type {wire_type}, which is not readable")]
    WireType { tag: u32, wire_type: u8 },
}

/// One field's value, borrowed from the encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0: integers, booleans, enums.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: strings, bytes, messages, packed lists.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
    /// Wire types 3 to 4: a group's content, up to its end.
    Group(&'a [u8]),
}

/// How deep groups may nest (prost's recursion limit).
const GROUP_DEPTH: usize = 100;

/// One field of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The field number.
    pub tag: u32,
    /// Its value.
    pub value: Value<'a>,
    /// The whole field as encoded (key and value), for copying it unchanged.
    pub raw: &'a [u8],
}

/// The fields of an encoded message, in wire order. After an error the iterator ends.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    /// The fields of `message`.
    pub fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn field(&mut self) -> Result<Field<'a>, WireError> {
        let start = self.rest;
        let key = read_varint(&mut self.rest)?;
        let tag = u32::try_from(key >> 3).unwrap_or(0);
        let wire_type = (key & 7) as u8;
        if tag == 0 {
            return Err(WireError::WireType { tag, wire_type });
        }
        let value = match wire_type {
            0 => Value::Varint(read_varint(&mut self.rest)?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take_array(tag)?)),
            2 => {
                let len = read_varint(&mut self.rest)?;
                let len = usize::try_from(len).map_err(|_| WireError::Truncated(tag))?;
                Value::Bytes(self.take(tag, len)?)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take_array(tag)?)),
            3 => Value::Group(self.group(tag, 0)?),
            _ => return Err(WireError::WireType { tag, wire_type }),
        };
        let raw = &start[..start.len() - self.rest.len()];
        Ok(Field { tag, value, raw })
    }

    /// The content of group `tag` up to its end key, which is consumed too.
    fn group(&mut self, tag: u32, depth: usize) -> Result<&'a [u8], WireError> {
        if depth >= GROUP_DEPTH {
            return Err(WireError::WireType { tag, wire_type: 3 });
        }
        let start = self.rest;
        loop {
            let before = self.rest;
            let key = read_varint(&mut self.rest)?;
            let inner = u32::try_from(key >> 3).unwrap_or(0);
            match key & 7 {
                4 if inner == tag => return Ok(&start[..start.len() - before.len()]),
                0 => {
                    read_varint(&mut self.rest)?;
                }
                1 => {
                    self.take(inner, 8)?;
                }
                2 => {
                    let len = read_varint(&mut self.rest)?;
                    let len = usize::try_from(len).map_err(|_| WireError::Truncated(inner))?;
                    self.take(inner, len)?;
                }
                3 if inner != 0 => {
                    self.group(inner, depth + 1)?;
                }
                5 => {
                    self.take(inner, 4)?;
                }
                wire_type => {
                    return Err(WireError::WireType {
                        tag: inner,
                        wire_type: wire_type as u8,
                    });
                }
            }
        }
    }

    fn take(&mut self, tag: u32, len: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < len {
            return Err(WireError::Truncated(tag));
        }
        let (value, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(value)
    }

    fn take_array<const N: usize>(&mut self, tag: u32) -> Result<[u8; N], WireError> {
        let bytes = self.take(tag, N)?;
        bytes.try_into().map_err(|_| WireError::Truncated(tag))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

/// Reads one varint from the front of `buf`.
pub fn read_varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    let mut value = 0u64;
    for (i, byte) in buf.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    Err(WireError::Varint)
}

/// Appends `value` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a length-delimited field (wire type 2).
pub fn put_bytes(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    put_varint(out, (u64::from(tag) << 3) | 2);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// Writes a length-delimited field whose content `fill` appends to `out`, without a buffer of its
/// own: room for the longest length is reserved, then the content moves back over what is unused.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    tag: u32,
    fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    const ROOM: usize = 5;
    put_varint(out, (u64::from(tag) << 3) | 2);
    let at = out.len();
    out.extend_from_slice(&[0; ROOM]);
    fill(out)?;
    let len = out.len() - at - ROOM;
    let mut prefix = Vec::with_capacity(ROOM);
    put_varint(&mut prefix, len as u64);
    out[at..at + prefix.len()].copy_from_slice(&prefix);
    out.copy_within(at + ROOM.., at + prefix.len());
    out.truncate(at + prefix.len() + len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_fail_when_cut() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut buf = out.as_slice();
            assert_eq!(read_varint(&mut buf), Ok(v));
            assert!(buf.is_empty());
            let mut cut = &out[..out.len() - 1];
            assert_eq!(read_varint(&mut cut), Err(WireError::Varint));
        }
    }

    #[test]
    fn fields_are_read_with_their_raw_bytes() {
        let mut msg = Vec::new();
        put_varint(&mut msg, 1 << 3);
        put_varint(&mut msg, 300);
        put_bytes(&mut msg, 2, b"abc");
        let fields: Vec<Field<'_>> = Fields::new(&msg).map(Result::unwrap).collect();
        assert_eq!(fields.len(), 2);
        assert_eq!(fields[0].value, Value::Varint(300));
        assert_eq!(fields[1].value, Value::Bytes(b"abc"));
        assert_eq!(fields[1].raw, &msg[3..]);
    }

    #[test]
    fn malformed_fields_end_the_iteration_with_an_error() {
        let mut msg = Vec::new();
        put_bytes(&mut msg, 2, b"abcdef");
        let cut = &msg[..msg.len() - 2];
        let read: Vec<_> = Fields::new(cut).collect();
        assert_eq!(read, vec![Err(WireError::Truncated(2))]);
        // A group is read whole, as prost skips it; an unterminated one is an error.
        let group = [(3 << 3) | 3, 1 << 3, 5, (3 << 3) | 4, 2 << 3, 1];
        let fields: Vec<_> = Fields::new(&group).map(Result::unwrap).collect();
        assert_eq!(fields[0].value, Value::Group(&[1 << 3, 5]));
        assert_eq!(fields[1].value, Value::Varint(1));
        assert!(Fields::new(&group[..3]).next().unwrap().is_err());
        let end_only = [(3 << 3) | 4];
        assert!(matches!(
            Fields::new(&end_only).next(),
            Some(Err(WireError::WireType {
                tag: 3,
                wire_type: 4
            }))
        ));
    }

    #[test]
    fn nested_fields_get_their_shortest_length() {
        for len in [0usize, 5, 127, 128, 20_000] {
            let mut out = vec![9];
            put_nested(&mut out, 4, |o| {
                o.extend(std::iter::repeat_n(7u8, len));
                Ok::<(), ()>(())
            })
            .unwrap();
            let mut expected = vec![9];
            put_bytes(&mut expected, 4, &vec![7u8; len]);
            assert_eq!(out, expected);
        }
    }
}
