//! Member offsets of kernel structs, read from the running kernel's BTF
//! (`/sys/kernel/btf/vmlinux`), so the kernel programs read `linux_binprm`, `file`, `inode` and
//! `dentry` at this kernel's offsets rather than at one kernel's compiled in. aya parses BTF
//! but does not expose member lookups; this reads just enough of the format (the kernel's
//! `Documentation/bpf/btf.rst`) to walk types and members.

use std::{fs, io, path::Path};

/// The kernel's own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Why an offset could not be had; each names what was looked for.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("reading {VMLINUX}: {0}")]
    Read(#[from] io::Error),
    #[error("{VMLINUX} is not BTF: {0}")]
    Format(&'static str),
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no member {0}.{1}")]
    NoMember(String, String),
    #[error("{0}.{1} is a bit field")]
    BitField(String, String),
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;

/// One type of the BTF blob, as far as member lookups need it.
struct Type {
    name_off: u32,
    kind: u32,
    kind_flag: bool,
    /// The common part's third word: a size, or for typedefs and qualifiers the type referred to.
    size_or_type: u32,
    /// For structs and unions: (name_off, type id, bit offset word).
    members: Vec<(u32, u32, u32)>,
}

/// The kernel's types, parsed once.
pub struct KernelBtf {
    /// Index = type id (id 0 is `void`, a placeholder here).
    types: Vec<Type>,
    strings: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(BtfError::Format("truncated"))
}

impl KernelBtf {
    /// Parses the running kernel's BTF.
    pub fn load() -> Result<Self, BtfError> {
        Self::parse(&fs::read(Path::new(VMLINUX))?)
    }

    /// Parses a little-endian BTF blob.
    pub fn parse(b: &[u8]) -> Result<Self, BtfError> {
        if b.get(0..2) != Some(&MAGIC.to_le_bytes()[..]) {
            return Err(BtfError::Format("bad magic (or big-endian)"));
        }
        let hdr_len = u32_at(b, 4)? as usize;
        let (type_off, type_len) = (u32_at(b, 8)? as usize, u32_at(b, 12)? as usize);
        let (str_off, str_len) = (u32_at(b, 16)? as usize, u32_at(b, 20)? as usize);
        let types_bytes = b
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .ok_or(BtfError::Format("type section out of bounds"))?;
        let strings = b
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .ok_or(BtfError::Format("string section out of bounds"))?
            .to_vec();
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            kind_flag: false,
            size_or_type: 0,
            members: Vec::new(),
        }];
        let mut at = 0;
        while at < types_bytes.len() {
            let name_off = u32_at(types_bytes, at)?;
            let info = u32_at(types_bytes, at + 4)?;
            let size_or_type = u32_at(types_bytes, at + 8)?;
            let (vlen, kind) = ((info & 0xffff) as usize, (info >> 24) & 0x1f);
            at += 12;
            let mut members = Vec::new();
            // The bytes that follow each kind's common part.
            let extra = match kind {
                1 | 14 | 17 => 4,     // INT, VAR, DECL_TAG
                3 => 12,              // ARRAY
                6 | 13 => 8 * vlen,   // ENUM, FUNC_PROTO
                15 | 19 => 12 * vlen, // DATASEC, ENUM64
                KIND_STRUCT | KIND_UNION => {
                    for m in 0..vlen {
                        let m_at = at + 12 * m;
                        members.push((
                            u32_at(types_bytes, m_at)?,
                            u32_at(types_bytes, m_at + 4)?,
                            u32_at(types_bytes, m_at + 8)?,
                        ));
                    }
                    12 * vlen
                }
                2 | 7..=12 | 16 | 18 => 0,
                _ => return Err(BtfError::Format("unknown type kind")),
            };
            at += extra;
            types.push(Type {
                name_off,
                kind,
                kind_flag: info >> 31 == 1,
                size_or_type,
                members,
            });
        }
        Ok(Self { types, strings })
    }

    fn name(&self, off: u32) -> &[u8] {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]
    }

    /// The byte offset of `member` in `struct name`, looking through anonymous structs and
    /// unions as C does.
    pub fn offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let id = self
            .types
            .iter()
            .position(|t| {
                t.kind == KIND_STRUCT
                    && !t.members.is_empty()
                    && self.name(t.name_off) == name.as_bytes()
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_owned()))?;
        let bits = self
            .member_bits(id, member.as_bytes(), 0)
            .ok_or_else(|| BtfError::NoMember(name.to_owned(), member.to_owned()))?;
        if bits % 8 != 0 {
            return Err(BtfError::BitField(name.to_owned(), member.to_owned()));
        }
        Ok(bits / 8)
    }

    fn member_bits(&self, id: usize, member: &[u8], depth: u32) -> Option<u32> {
        let t = self.types.get(id)?;
        if depth > 8 {
            return None;
        }
        for &(name_off, ty, word) in &t.members {
            // With kind_flag, the low 24 bits are the offset and the high 8 a bit-field size.
            let bits = if t.kind_flag { word & 0xff_ffff } else { word };
            if name_off == 0 {
                let inner = self.resolve(ty as usize)?;
                if let Some(b) = self.member_bits(inner, member, depth + 1) {
                    return Some(bits + b);
                }
            } else if self.name(name_off) == member {
                return Some(bits);
            }
        }
        None
    }

    /// Follows typedefs and qualifiers (const, volatile, restrict, type tags) to a struct or union.
    fn resolve(&self, mut id: usize) -> Option<usize> {
        for _ in 0..16 {
            let t = self.types.get(id)?;
            match t.kind {
                KIND_STRUCT | KIND_UNION => return Some(id),
                8..=11 | 18 => id = t.size_or_type as usize,
                _ => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: `struct s { int a; union { long b; }; }` with an anonymous union member.
    fn blob() -> Vec<u8> {
        let strings = b"\0s\0a\0b\0int\0long\0";
        let (s, a, b, int, long) = (1u32, 3u32, 5u32, 7u32, 11u32);
        let mut types = Vec::new();
        let mut push = |words: &[u32]| words.iter().for_each(|w| types.extend(w.to_le_bytes()));
        push(&[int, 1 << 24, 4, 32]); // 1: INT int
        push(&[long, 1 << 24, 8, 64]); // 2: INT long
        push(&[0, (KIND_UNION << 24) | 1, 8, b, 2, 0]); // 3: union { long b; }
        push(&[0, 8 << 24, 3]); // 4: typedef (anonymous) -> 3
        push(&[s, (KIND_STRUCT << 24) | 2, 16, a, 1, 0, 0, 4, 64]); // 5: struct s
        let mut out = Vec::new();
        for w in [
            u32::from(MAGIC) | (1 << 16),
            24,
            0,
            types.len() as u32,
            types.len() as u32,
        ] {
            out.extend(w.to_le_bytes());
        }
        out.extend((strings.len() as u32).to_le_bytes());
        out.extend(&types);
        out.extend(strings);
        out
    }

    #[test]
    fn members_are_found_directly_and_through_anonymous_unions() {
        let btf = KernelBtf::parse(&blob()).expect("parse");
        assert_eq!(btf.offset("s", "a").expect("a"), 0);
        assert_eq!(btf.offset("s", "b").expect("b"), 8);
        assert!(matches!(btf.offset("s", "c"), Err(BtfError::NoMember(..))));
        assert!(matches!(btf.offset("t", "a"), Err(BtfError::NoStruct(_))));
        assert!(KernelBtf::parse(b"nope").is_err());
    }

    #[test]
    fn the_running_kernel_has_what_the_exec_program_reads() {
        let Ok(btf) = KernelBtf::load() else {
            eprintln!("skipping: no readable {VMLINUX}");
            return;
        };
        for (s, m) in [
            ("linux_binprm", "file"),
            ("file", "f_inode"),
            ("dentry", "d_parent"),
        ] {
            btf.offset(s, m).expect("offset");
        }
        // struct path's dentry follows its vfsmount pointer.
        assert_eq!(btf.offset("path", "dentry").expect("path.dentry"), 8);
    }
}
