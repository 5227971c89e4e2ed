//! The destination allow-lists of every guarded call: exact addresses (`ALLOW4`, `ALLOW6`,
//! hash maps the kernel also marks each first use in) and networks (`NETS4`, `NETS6`, longest
//! prefix match tries).

use aya::{
    Ebpf,
    maps::{HashMap, LpmTrie, MapData, MapError},
};
use guard_common::net::{Dest4, Dest6, Net4, Net6};

use super::{MonitorError, keys::DestKey, map_err};

/// The four maps, taken from the loaded programs.
pub(super) struct DestMaps {
    allow4: HashMap<MapData, Dest4, u8>,
    allow6: HashMap<MapData, Dest6, u8>,
    nets4: LpmTrie<MapData, Net4, u8>,
    nets6: LpmTrie<MapData, Net6, u8>,
}

impl DestMaps {
    /// Takes them out of `ebpf`.
    pub fn take(ebpf: &mut Ebpf) -> Result<Self, MonitorError> {
        let mut take =
            |name: &'static str| ebpf.take_map(name).ok_or(MonitorError::MissingMap { name });
        Ok(Self {
            allow4: HashMap::try_from(take("ALLOW4")?).map_err(map_err("ALLOW4"))?,
            allow6: HashMap::try_from(take("ALLOW6")?).map_err(map_err("ALLOW6"))?,
            nets4: LpmTrie::try_from(take("NETS4")?).map_err(map_err("NETS4"))?,
            nets6: LpmTrie::try_from(take("NETS6")?).map_err(map_err("NETS6"))?,
        })
    }

    /// Installs `key`: 1 for an exact destination, approved and not used yet (the kernel
    /// reports its first use and marks it 2).
    pub fn insert(&mut self, key: &DestKey) -> Result<(), MonitorError> {
        match key {
            DestKey::V4(k) => self.allow4.insert(k, 1, 0).map_err(map_err("ALLOW4")),
            DestKey::V6(k) => self.allow6.insert(k, 1, 0).map_err(map_err("ALLOW6")),
            DestKey::Net4(k) => self.nets4.insert(k, 1, 0).map_err(map_err("NETS4")),
            DestKey::Net6(k) => self.nets6.insert(k, 1, 0).map_err(map_err("NETS6")),
        }
    }

    /// Removes `key`; one never installed (a launch that failed before its kernel watch was
    /// whole) is gone already.
    pub fn remove(&mut self, key: &DestKey) -> Result<(), MonitorError> {
        let gone = |r: Result<(), MapError>| match r {
            Err(MapError::KeyNotFound) => Ok(()),
            Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => {
                Ok(())
            }
            other => other,
        };
        match key {
            DestKey::V4(k) => gone(self.allow4.remove(k)).map_err(map_err("ALLOW4")),
            DestKey::V6(k) => gone(self.allow6.remove(k)).map_err(map_err("ALLOW6")),
            DestKey::Net4(k) => gone(self.nets4.remove(k)).map_err(map_err("NETS4")),
            DestKey::Net6(k) => gone(self.nets6.remove(k)).map_err(map_err("NETS6")),
        }
    }
}
