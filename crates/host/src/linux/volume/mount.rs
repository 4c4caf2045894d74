//! MountVolume and UnmountVolume on Linux: mount(2) onto the directory handle that was checked,
//! umount(2) of what is mounted at the target.

use super::*;

impl LinuxVolumeHost {
    pub(super) fn mount(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "MountVolume";
        let vol = self.resolve(OP, id)?;
        let object = format!("{} at {target:?}", shown(id));
        let dir = open_dir_nofollow(Path::new(target)).map_err(|e| match e.raw_os_error() {
            Some(40) => Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "target_path is a symbolic link, not a directory",
            ),
            Some(2) => Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "target_path does not exist; create the directory first",
            ),
            _ => Error::io(OP, &object, &e),
        })?;
        let table = read_mountinfo(OP)?;
        let kpath = kernel_path(Path::new(target)).map_err(|e| Error::io(OP, &object, &e))?;
        if let Some(m) = mountinfo::topmost_at(&table, &kpath) {
            if !vol.mounts(std::slice::from_ref(m)).is_empty() {
                return Ok(()); // the same volume already mounted here: idempotent
            }
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!(
                    "another filesystem ({} {:?}) is mounted there",
                    m.fs_type, m.source
                ),
            ));
        }
        if fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|e| Error::io(OP, &object, &e))?
            .next()
            .is_some()
        {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "target_path is not empty",
            ));
        }
        let (sig, _) = self.probe(OP, &vol)?;
        let Some(sig) = sig else {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "the volume has no filesystem; FormatVolume first",
            ));
        };
        let Some(fs_type) = sig.mount_type else {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                format!(
                    "the volume holds {}, which is not a filesystem this host mounts",
                    sig.kind
                ),
            ));
        };
        if let (Some(i), Some(u)) = (self.read_intent(&vol), sig.uuid)
            && !i.done
            && i.id == signatures::uuid_string(&u)
        {
            return Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                &object,
                "a FormatVolume of this volume was interrupted; call FormatVolume again first",
            ));
        }
        vol.unchanged(OP)?;
        // Mount onto the handle opened above (through its /proc magic link), so the directory
        // checked is the directory mounted on.
        let via = format!("/proc/self/fd/{}", dir.as_raw_fd());
        rustix::mount::mount(
            vol.node(),
            via.as_str(),
            fs_type,
            rustix::mount::MountFlags::empty(),
            None,
        )
        .map_err(|e| {
            let e = io::Error::from(e);
            let kind = match e.raw_os_error() {
                Some(16) | Some(22) => Kind::FailedPrecondition,
                _ => csi_proxy_core::error::io_kind(&e),
            };
            Error::new(kind, OP, &object, format!("mount {fs_type}: {e}"))
        })?;
        if let Err(e) = vol.unchanged(OP) {
            // What was mounted is not the volume asked for: take it away again.
            let _ = rustix::mount::unmount(via.as_str(), rustix::mount::UnmountFlags::empty());
            return Err(e.context("after mount (unmounted again)"));
        }
        tracing::info!(volume = id, target, fs_type, "mounted");
        Ok(())
    }

    pub(super) fn unmount(&self, id: &str, target: &str) -> Result<()> {
        const OP: &str = "UnmountVolume";
        if parse_id(id).is_none() {
            return Err(Error::invalid(
                OP,
                shown(id),
                "not a volume ID of this host",
            ));
        }
        let object = format!("{} at {target:?}", shown(id));
        let kpath = match kernel_path(Path::new(target)) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()), // nothing there
            Err(e) => return Err(Error::io(OP, &object, &e)),
        };
        for _ in 0..16 {
            let table = read_mountinfo(OP)?;
            let Some(m) = mountinfo::topmost_at(&table, &kpath) else {
                return Ok(()); // not (or no longer) mounted: success
            };
            let other = || {
                Error::new(
                    Kind::FailedPrecondition,
                    OP,
                    &object,
                    format!(
                        "a different filesystem ({} {:?}) is mounted there; not unmounting it",
                        m.fs_type, m.source
                    ),
                )
            };
            match self.resolve(OP, id) {
                Ok(vol) if vol.mounts(std::slice::from_ref(m)).is_empty() => return Err(other()),
                Ok(_) => {}
                // The volume is gone (its disk was detached by force, or replaced): what is
                // mounted there is its stale mount only when the device it came from is gone
                // too. Left, it would keep the target busy for kubelet forever.
                Err(e) if e.kind() == Kind::NotFound => {
                    if !is_stale_device_mount(m) {
                        return Err(Error::new(
                            Kind::FailedPrecondition,
                            OP,
                            &object,
                            format!(
                                "the volume cannot be found ({}), and what is mounted there ({} {:?}) is not a \
                                 mount of a detached device; not unmounting it",
                                e.message(),
                                m.fs_type,
                                m.source
                            ),
                        ));
                    }
                    tracing::warn!(
                        volume = id,
                        target,
                        source = m.source,
                        "the volume is gone; unmounting its stale mount"
                    );
                }
                Err(e) => return Err(e),
            }
            if let Ok(d) = open_dir_nofollow(&kpath) {
                let _ = rustix::fs::syncfs(&d);
            }
            // EBUSY can be transient: a process another request starts at this moment (mkfs for
            // another disk) briefly holds copies of the daemon's descriptors until its exec
            // closes them. Retry for up to a second before calling the filesystem busy.
            let mut tries = 0;
            let unmounted = loop {
                match rustix::mount::unmount(&kpath, rustix::mount::UnmountFlags::NOFOLLOW) {
                    Err(e) if e == rustix::io::Errno::BUSY && tries < 20 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    r => break r,
                }
            };
            unmounted.map_err(|e| {
                let e = io::Error::from(e);
                if e.raw_os_error() == Some(16) {
                    Error::new(
                        Kind::FailedPrecondition,
                        OP,
                        &object,
                        "the filesystem is busy (open files or a process working in it)",
                    )
                } else {
                    Error::io(OP, &object, &e)
                }
            })?;
            tracing::info!(volume = id, target, "unmounted");
        }
        Err(Error::new(
            Kind::FailedPrecondition,
            OP,
            &object,
            "still mounted after 16 unmounts",
        ))
    }
}

/// Whether `m` is the mount of a block device that is gone: its source is a device node under
/// `/dev` that no longer exists, and no attached block device has its device number. A mount of
/// anything else (tmpfs, a bind, an attached device) is never taken for one.
fn is_stale_device_mount(m: &MountInfo) -> bool {
    let source = Path::new(&m.source);
    source.starts_with("/dev/")
        && !source.exists()
        && !Path::new(&format!("/sys/dev/block/{}:{}", m.major, m.minor)).exists()
}
