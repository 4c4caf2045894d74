//! The security descriptor every instance of one pipe is created with, built from an SDDL
//! string.
#![allow(
    unsafe_code,
    reason = "the security descriptor is made and freed by Win32 calls with no safe wrapper"
)]

use super::*;

/// A self-relative security descriptor from `ConvertStringSecurityDescriptorToSecurityDescriptorW`
/// and the `SECURITY_ATTRIBUTES` pointing at it, handed to every `CreateNamedPipeW` of one pipe.
pub(super) struct PipeSecurity {
    pub(super) sddl: String,
    descriptor: PSECURITY_DESCRIPTOR,
    attributes: SECURITY_ATTRIBUTES,
}

// SAFETY: the descriptor is a LocalAlloc'ed buffer owned exclusively by this value and never
// mutated after construction; `CreateNamedPipeW` only reads it (and the SECURITY_ATTRIBUTES that
// points at it). Reading immutable memory from several threads is sound.
unsafe impl Send for PipeSecurity {}
// SAFETY: see `Send`: shared access is read-only.
unsafe impl Sync for PipeSecurity {}

impl PipeSecurity {
    pub(super) fn from_sddl(sddl: &str) -> io::Result<Box<Self>> {
        let invalid = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("invalid pipe security descriptor (SDDL) {sddl:?}: {why}"),
            )
        };
        if sddl.trim().is_empty() {
            return Err(invalid(
                "empty; it must contain a DACL such as \"D:P(A;;GA;;;SY)(A;;GA;;;BA)\"".into(),
            ));
        }
        if sddl.contains('\0') {
            return Err(invalid("contains a NUL character".into()));
        }
        let wide: Vec<u16> = sddl.encode_utf16().chain(std::iter::once(0)).collect();
        let mut descriptor = PSECURITY_DESCRIPTOR::default();
        // SAFETY: `wide` is a NUL-terminated UTF-16 string that outlives the call; `descriptor` is
        // a valid out-pointer. On success the function stores a LocalAlloc'ed self-relative
        // descriptor there, which `Drop` releases with LocalFree (as the API documents).
        unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                PCWSTR(wide.as_ptr()),
                SDDL_REVISION_1,
                &mut descriptor,
                None,
            )
        }
        .map_err(|e| invalid(describe_windows_error(&e)))?;
        let security = Box::new(PipeSecurity {
            sddl: sddl.to_owned(),
            descriptor,
            attributes: SECURITY_ATTRIBUTES {
                nLength: size_of::<SECURITY_ATTRIBUTES>() as u32,
                lpSecurityDescriptor: descriptor.0,
                // Pipe handles are never inherited by child processes.
                bInheritHandle: BOOL(0),
            },
        });

        // A descriptor without a DACL ("O:SY", "S:...") or with a NULL DACL
        // ("D:NO_ACCESS_CONTROL") grants everyone full access: refuse it. An empty DACL ("D:")
        // grants nobody access, not even the daemon's own FILE_CREATE_PIPE_INSTANCE for the
        // second instance: refuse it too. (wine 8 parses "D:NO_ACCESS_CONTROL" as an empty DACL,
        // so the string is refused there as well, with the second message.)
        let mut present = BOOL(0);
        let mut dacl: *mut ACL = std::ptr::null_mut();
        let mut defaulted = BOOL(0);
        // SAFETY: `descriptor` is the valid descriptor created above (still owned by `security`);
        // the three out-pointers are valid locals.
        unsafe { GetSecurityDescriptorDacl(descriptor, &mut present, &mut dacl, &mut defaulted) }
            .map_err(|e| invalid(describe_windows_error(&e)))?;
        if !present.as_bool() || dacl.is_null() {
            return Err(invalid(
                "it has no DACL (\"D:...\") or a NULL DACL, which would let every local user \
                 connect"
                    .into(),
            ));
        }
        // SAFETY: GetSecurityDescriptorDacl returned a non-null pointer to the ACL header inside
        // `descriptor`, which `security` keeps alive; the header is plain data and is only read.
        let ace_count = unsafe { (*dacl).AceCount };
        if ace_count == 0 {
            return Err(invalid(
                "its DACL is empty and grants access to nobody (not even csi-proxy itself)".into(),
            ));
        }
        Ok(security)
    }

    /// Pointer for `create_with_security_attributes_raw`; valid while `self` lives.
    pub(super) fn attributes_ptr(&self) -> *mut c_void {
        // CreateNamedPipeW takes `LPSECURITY_ATTRIBUTES` but only reads through it.
        std::ptr::from_ref(&self.attributes).cast_mut().cast()
    }
}

impl Drop for PipeSecurity {
    fn drop(&mut self) {
        // SAFETY: `descriptor` came from ConvertStringSecurityDescriptorToSecurityDescriptorW,
        // whose documentation says to free it with LocalFree; it is freed exactly once, here,
        // and no pipe creation can be using it any more (they borrow `self`).
        unsafe {
            LocalFree(Some(HLOCAL(self.descriptor.0)));
        }
    }
}

impl fmt::Debug for PipeSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipeSecurity")
            .field("sddl", &self.sddl)
            .finish_non_exhaustive()
    }
}

pub(super) fn describe_windows_error(e: &windows::core::Error) -> String {
    let message = e.message();
    let code = e.code().0 as u32;
    if message.trim().is_empty() {
        format!("Windows error 0x{code:08X}")
    } else {
        format!("{} (0x{code:08X})", message.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sddl_converts() {
        let security = PipeSecurity::from_sddl(DEFAULT_PIPE_SDDL).unwrap();
        assert!(!security.descriptor.0.is_null());
        assert_eq!(
            security.attributes.lpSecurityDescriptor,
            security.descriptor.0
        );
    }

    #[test]
    fn sddl_without_dacl_is_refused() {
        for sddl in [
            "",
            "  ",
            "O:SY",
            "D:",
            "D:P",
            "D:NO_ACCESS_CONTROL",
            "bogus",
            "D:(X;;GA;;;SY)",
        ] {
            let e = PipeSecurity::from_sddl(sddl).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{sddl:?}: {e}");
            assert!(e.to_string().contains("SDDL"), "{sddl:?}: {e}");
        }
    }
}
