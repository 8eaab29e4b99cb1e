//! POSIX access control lists as Linux stores them in the `system.posix_acl_access` and
//! `system.posix_acl_default` extended attributes, and the rules that tie them to an inode's
//! mode (Linux's fs/posix_acl.c): what a valid list is, the mode an access list implies (and
//! whether the mode alone says the same), chmod's rewrite of a list, and what a new inode
//! inherits from its directory's default list.
//!
//! Value layout (little-endian): `version u32 = 2`, then entries of `tag u16, perm u16,
//! id u32`; tags USER_OBJ 1, USER 2, GROUP_OBJ 4, GROUP 8, MASK 0x10, OTHER 0x20; perm bits
//! r 4, w 2, x 1; the id is a uid (USER), a gid (GROUP) or 0xFFFFFFFF.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use fsoc_flash::codec::{Reader, Writer};

use crate::fs::FsError;

pub const ACL_ACCESS_NAME: &[u8] = b"system.posix_acl_access";
pub const ACL_DEFAULT_NAME: &[u8] = b"system.posix_acl_default";

const ACL_XATTR_VERSION: u32 = 2;
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A list of entries in the canonical order Linux requires (`Acl::decode` refuses others).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

impl Acl {
    /// Decodes and validates an ACL attribute value. `Ok(None)` for a value holding no
    /// entries (Linux reads it as "no list", so setting it removes the list). EINVAL for a
    /// value of another version or shape, and for a list Linux's posix_acl_valid refuses.
    pub fn decode(bytes: &[u8]) -> Result<Option<Acl>, FsError> {
        const BAD: FsError = FsError::InvalidArgument("malformed POSIX ACL");
        let mut reader = Reader::new("posix acl", bytes);
        if reader.u32_le().map_err(|_| BAD)? != ACL_XATTR_VERSION || !reader.remaining_bytes().is_multiple_of(8) {
            return Err(BAD);
        }
        let mut entries = Vec::with_capacity(reader.remaining_bytes() / 8);
        while reader.remaining_bytes() != 0 {
            let tag = reader.u16_le().map_err(|_| BAD)?;
            let perm = reader.u16_le().map_err(|_| BAD)?;
            let id = reader.u32_le().map_err(|_| BAD)?;
            let id = if matches!(tag, ACL_USER | ACL_GROUP) { id } else { ACL_UNDEFINED_ID };
            entries.push(AclEntry { tag, perm, id });
        }
        if entries.is_empty() {
            return Ok(None);
        }
        let acl = Acl { entries };
        if !acl.is_valid() {
            return Err(BAD);
        }
        Ok(Some(acl))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(4 + 8 * self.entries.len());
        writer.u32_le(ACL_XATTR_VERSION);
        for entry in &self.entries {
            writer.u16_le(entry.tag);
            writer.u16_le(entry.perm);
            writer.u32_le(entry.id);
        }
        writer.bytes
    }

    /// Linux's posix_acl_valid: perms within rwx; USER_OBJ, then USER entries, GROUP_OBJ,
    /// GROUP entries, MASK (required when there are USER or GROUP entries), OTHER, in that
    /// order; named entries sorted by id without repeats.
    fn is_valid(&self) -> bool {
        // The state machine of posix_acl_valid: the tag expected next.
        let mut state = ACL_USER_OBJ;
        let mut needs_mask = false;
        let mut last_id: Option<u32> = None;
        for entry in &self.entries {
            if entry.perm & !7 != 0 {
                return false;
            }
            match entry.tag {
                ACL_USER_OBJ if state == ACL_USER_OBJ => state = ACL_USER,
                ACL_USER | ACL_GROUP if state == entry.tag => {
                    if last_id.is_some_and(|last| last >= entry.id) {
                        return false;
                    }
                    last_id = Some(entry.id);
                    needs_mask = true;
                }
                ACL_GROUP_OBJ if state == ACL_USER => {
                    state = ACL_GROUP;
                    last_id = None;
                }
                ACL_MASK if state == ACL_GROUP => state = ACL_OTHER,
                ACL_OTHER if state == ACL_OTHER || (state == ACL_GROUP && !needs_mask) => state = 0,
                _ => return false,
            }
        }
        state == 0
    }

    /// Linux's posix_acl_equiv_mode: the permission bits this access list implies (the rest
    /// of `mode` kept), and whether the mode alone says everything the list says (then the
    /// list need not be stored).
    pub fn mode_and_equivalence(&self, mode: u32) -> (u32, bool) {
        let mut mode = mode & !0o777;
        let mut equivalent = true;
        for entry in &self.entries {
            let perm = u32::from(entry.perm & 7);
            match entry.tag {
                ACL_USER_OBJ => mode |= perm << 6,
                ACL_GROUP_OBJ => mode |= perm << 3,
                ACL_OTHER => mode |= perm,
                ACL_MASK => {
                    mode = (mode & !0o070) | (perm << 3);
                    equivalent = false;
                }
                _ => equivalent = false,
            }
        }
        (mode, equivalent)
    }

    /// Linux's posix_acl_chmod: the list after a chmod to `mode` (the owner, other, and the
    /// mask or, without one, the owning group take the new bits).
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|entry| entry.tag == ACL_MASK);
        for entry in &mut self.entries {
            // Each shifted value is masked to three bits.
            let bits = |shift: u32| ((mode >> shift) & 7) as u16;
            match entry.tag {
                ACL_USER_OBJ => entry.perm = bits(6),
                ACL_MASK => entry.perm = bits(3),
                ACL_GROUP_OBJ if !has_mask => entry.perm = bits(3),
                ACL_OTHER => entry.perm = bits(0),
                _ => {}
            }
        }
    }

    /// Linux's posix_acl_create_masq: a directory's default list applied to a new inode
    /// created with `mode`. Returns the new inode's mode and whether the list says more than
    /// that mode (then it is stored as the inode's access list).
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut bits = mode & 0o777;
        let mut not_equivalent = false;
        let mut mask = None;
        let mut group = None;
        for (index, entry) in self.entries.iter_mut().enumerate() {
            match entry.tag {
                ACL_USER_OBJ => {
                    // Masked to three bits before the narrowing.
                    entry.perm &= ((bits >> 6) & 7) as u16;
                    bits &= (u32::from(entry.perm) << 6) | !0o700;
                }
                ACL_USER | ACL_GROUP => not_equivalent = true,
                ACL_GROUP_OBJ => group = Some(index),
                ACL_OTHER => {
                    entry.perm &= (bits & 7) as u16;
                    bits &= u32::from(entry.perm) | !0o007;
                }
                ACL_MASK => {
                    mask = Some(index);
                    not_equivalent = true;
                }
                _ => {}
            }
        }
        // A valid list has a GROUP_OBJ entry; a mask, when present, stands in for it.
        if let Some(entry) = mask.or(group).and_then(|index| self.entries.get_mut(index)) {
            entry.perm &= ((bits >> 3) & 7) as u16;
            bits &= (u32::from(entry.perm) << 3) | !0o070;
        }
        ((mode & !0o777) | bits, not_equivalent)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn entry(tag: u16, perm: u16, id: u32) -> AclEntry {
        AclEntry { tag, perm, id }
    }

    fn acl(entries: &[AclEntry]) -> Acl {
        Acl { entries: entries.to_vec() }
    }

    const U: u32 = ACL_UNDEFINED_ID;

    #[test]
    fn values_round_trip_and_bad_ones_are_refused() {
        let list = acl(&[
            entry(ACL_USER_OBJ, 7, U),
            entry(ACL_USER, 5, 1000),
            entry(ACL_GROUP_OBJ, 5, U),
            entry(ACL_MASK, 5, U),
            entry(ACL_OTHER, 0, U),
        ]);
        assert_eq!(Acl::decode(&list.encode()), Ok(Some(list.clone())));
        assert_eq!(Acl::decode(&2u32.to_le_bytes()), Ok(None), "no entries: no list");
        let mut wrong_version = list.encode();
        wrong_version[0] = 1;
        assert!(Acl::decode(&wrong_version).is_err());
        assert!(Acl::decode(&list.encode()[..12]).is_err(), "a torn entry");
        for bad in [
            // A named user without a mask.
            acl(&[
                entry(ACL_USER_OBJ, 7, U),
                entry(ACL_USER, 5, 1),
                entry(ACL_GROUP_OBJ, 5, U),
                entry(ACL_OTHER, 0, U),
            ]),
            // Out of order.
            acl(&[entry(ACL_GROUP_OBJ, 5, U), entry(ACL_USER_OBJ, 7, U), entry(ACL_OTHER, 0, U)]),
            // A repeated user.
            acl(&[
                entry(ACL_USER_OBJ, 7, U),
                entry(ACL_USER, 5, 1),
                entry(ACL_USER, 4, 1),
                entry(ACL_GROUP_OBJ, 5, U),
                entry(ACL_MASK, 5, U),
                entry(ACL_OTHER, 0, U),
            ]),
            // A perm beyond rwx, and a missing OTHER.
            acl(&[entry(ACL_USER_OBJ, 8, U), entry(ACL_GROUP_OBJ, 5, U), entry(ACL_OTHER, 0, U)]),
            acl(&[entry(ACL_USER_OBJ, 7, U), entry(ACL_GROUP_OBJ, 5, U)]),
        ] {
            assert!(Acl::decode(&bad.encode()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mode_follows_the_list_and_chmod_follows_the_mode() {
        let base = acl(&[entry(ACL_USER_OBJ, 6, U), entry(ACL_GROUP_OBJ, 4, U), entry(ACL_OTHER, 0, U)]);
        assert_eq!(base.mode_and_equivalence(0o4777), (0o4640, true));
        let mut named = acl(&[
            entry(ACL_USER_OBJ, 7, U),
            entry(ACL_USER, 7, 1000),
            entry(ACL_GROUP_OBJ, 4, U),
            entry(ACL_MASK, 5, U),
            entry(ACL_OTHER, 1, U),
        ]);
        assert_eq!(named.mode_and_equivalence(0o644), (0o751, false), "group bits from the mask");
        named.chmod(0o640);
        assert_eq!(named.entries[0].perm, 6);
        assert_eq!(named.entries[1].perm, 7, "named entries keep theirs");
        assert_eq!(named.entries[2].perm, 4, "the owning group keeps its own under a mask");
        assert_eq!(named.entries[3].perm, 4);
        assert_eq!(named.entries[4].perm, 0);
    }

    #[test]
    fn a_new_inode_takes_the_default_list_masked_by_its_mode() {
        let mut default = acl(&[
            entry(ACL_USER_OBJ, 7, U),
            entry(ACL_USER, 7, 1000),
            entry(ACL_GROUP_OBJ, 5, U),
            entry(ACL_MASK, 7, U),
            entry(ACL_OTHER, 5, U),
        ]);
        // open(O_CREAT, 0666) under it: no x anywhere; the mask takes the group bits.
        assert_eq!(default.create_masq(0o666), (0o664, true));
        assert_eq!(default.entries[0].perm, 6);
        assert_eq!(default.entries[1].perm, 7, "named entries are not masked by the mode");
        assert_eq!(default.entries[3].perm, 6);
        assert_eq!(default.entries[4].perm, 4);
        let mut plain = acl(&[entry(ACL_USER_OBJ, 7, U), entry(ACL_GROUP_OBJ, 0, U), entry(ACL_OTHER, 0, U)]);
        assert_eq!(plain.create_masq(0o777), (0o700, false), "equivalent to the mode: not stored");
    }
}
