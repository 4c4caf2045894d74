//! The tag that tells one credential's cifs mount of a share from another's, without the
//! password: HMAC-MD5 (RFC 2104) under a random key of this boot. As a keyed PRF HMAC-MD5 is
//! unaffected by MD5's collision weakness (RFC 6151, 2.3), and without the key a tag reveals
//! nothing and cannot be checked against a guessed password.
//!
//! The key lives in the SMB mount base inside the state directory (root's, 0700), mode 0600,
//! with the boot it was made in: a daemon restart finds the mounts of this boot again under
//! the same names; after a reboot (no mount survives one) a new key is made.

use crate::linux::state_dir;
use csi_proxy_core::smb::SmbMapping;
use md5::{Digest, Md5};
use std::path::Path;

/// The key file's name in the mount base (not a share key: those never start with `.`).
const KEY_FILE: &str = ".credential-key";
const KEY_LEN: usize = 32;

/// The key of this boot.
#[derive(Clone)]
pub struct CredentialKey([u8; KEY_LEN]);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey(<redacted>)")
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl CredentialKey {
    /// The key of this boot kept in `base`, or a new one (written there). When it cannot be
    /// kept, a key held in memory only: the mounts of this daemon then are not found again
    /// after a restart (they are made anew), but credentials are still never mixed.
    pub fn load_or_create(base: &Path) -> std::io::Result<CredentialKey> {
        let boot = boot_id();
        if let Ok(Some(bytes)) = state_dir::read_file(base, KEY_FILE)
            && let Some(key) = Self::parse(&String::from_utf8_lossy(&bytes), &boot)
        {
            return Ok(key);
        }
        let key = Self::random()?;
        let text = format!("{boot}\n{}\n", hex(&key.0));
        if let Err(e) = state_dir::write_file(base, KEY_FILE, text.as_bytes(), 0o600) {
            tracing::warn!(dir = %base.display(), "cannot keep the SMB credential key: {e}");
        }
        Ok(key)
    }

    fn parse(text: &str, boot: &str) -> Option<CredentialKey> {
        let mut lines = text.lines();
        if boot.is_empty() || lines.next()? != boot {
            return None;
        }
        let h = lines.next()?;
        if h.len() != KEY_LEN * 2 {
            return None;
        }
        let mut key = [0u8; KEY_LEN];
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(CredentialKey(key))
    }

    /// A key from the kernel's random source (`getrandom(2)`, which blocks until the pool is
    /// initialised).
    pub fn random() -> std::io::Result<CredentialKey> {
        let mut key = [0u8; KEY_LEN];
        let mut filled = 0;
        while filled < KEY_LEN {
            match rustix::rand::getrandom(&mut key[filled..], rustix::rand::GetRandomFlags::empty())
            {
                Ok(n) => filled += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(CredentialKey(key))
    }

    /// The tag of the credentials of `mapping` for its root: 32 hex digits.
    pub fn tag(&self, mapping: &SmbMapping) -> String {
        // Each field length-prefixed, so no two credentials give the same message.
        let mut msg = Vec::new();
        let mut field = |b: &[u8]| {
            msg.extend_from_slice(&(b.len() as u64).to_le_bytes());
            msg.extend_from_slice(b);
        };
        field(mapping.root.as_bytes());
        match &mapping.credentials {
            None => field(b"guest"),
            Some(c) => {
                field(b"user");
                // Windows user names are case-insensitive; passwords are not.
                field(c.username.to_lowercase().as_bytes());
                field(c.password.expose().as_bytes());
            }
        }
        field(if mapping.require_privacy {
            b"seal"
        } else {
            b""
        });
        hex(&self.hmac(&msg))
    }

    fn hmac(&self, msg: &[u8]) -> [u8; 16] {
        const BLOCK: usize = 64;
        let mut ipad = [0x36u8; BLOCK];
        let mut opad = [0x5cu8; BLOCK];
        for (i, k) in self.0.iter().enumerate() {
            ipad[i] ^= k;
            opad[i] ^= k;
        }
        let inner = Md5::new().chain_update(ipad).chain_update(msg).finalize();
        Md5::new()
            .chain_update(opad)
            .chain_update(inner)
            .finalize()
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_core::smb::SmbCredentials;

    fn mapping(user: Option<(&str, &str)>) -> SmbMapping {
        SmbMapping {
            root: "\\\\srv\\share".into(),
            credentials: user.map(|(u, p)| SmbCredentials {
                username: u.into(),
                password: p.into(),
            }),
            require_privacy: true,
        }
    }

    /// RFC 2202, test case 2 (HMAC-MD5 with key "Jefe"), padded to our key length with zeros,
    /// which HMAC does itself for a shorter key.
    #[test]
    fn hmac_md5_matches_rfc_2202() {
        let mut key = [0u8; KEY_LEN];
        key[..4].copy_from_slice(b"Jefe");
        let mac = CredentialKey(key).hmac(b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "750c783e6ab0b503eaa86e310a5db738");
    }

    #[test]
    fn tags_tell_credentials_apart_and_hide_them() {
        let k = CredentialKey::random().unwrap();
        let a = k.tag(&mapping(Some(("alice", "Pw-1"))));
        assert_eq!(a.len(), 32);
        assert_eq!(a, k.tag(&mapping(Some(("ALICE", "Pw-1")))));
        for other in [
            mapping(Some(("alice", "Pw-2"))),
            mapping(Some(("bob", "Pw-1"))),
            mapping(None),
        ] {
            assert_ne!(a, k.tag(&other));
        }
        assert_ne!(
            a,
            CredentialKey::random()
                .unwrap()
                .tag(&mapping(Some(("alice", "Pw-1"))))
        );
        assert!(!format!("{k:?}").contains(&hex(&k.0)));
    }

    #[test]
    fn the_key_is_kept_for_this_boot_only() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("smb");
        let m = mapping(Some(("alice", "Pw-1")));
        let first = CredentialKey::load_or_create(&base).unwrap().tag(&m);
        assert_eq!(CredentialKey::load_or_create(&base).unwrap().tag(&m), first);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(base.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A key of another boot is replaced.
        let text = std::fs::read_to_string(base.join(KEY_FILE)).unwrap();
        let other = text.replacen(&boot_id(), "another-boot", 1);
        std::fs::write(base.join(KEY_FILE), other).unwrap();
        assert_ne!(CredentialKey::load_or_create(&base).unwrap().tag(&m), first);
    }
}
