//! MountVolume and UnmountVolume on Linux: mount(2) onto the directory handle that was checked,
//! umount(2) of what is mounted at the target.

use super::format::content_of;
use super::mount_policy;
use super::*;
use csi_proxy_core::volume::rules::{self, Content, MountTarget, Occupant};
use std::cell::{Ref, RefCell};

const OP: &str = "MountVolume";

/// One resolved volume and its target, as the core's mount rule asks about them. The target
/// directory is opened once, without following a link, and that handle is what is checked and
/// mounted on.
struct Mounting<'a> {
    host: &'a LinuxVolumeHost,
    vol: Volume,
    /// The path acted on: through the directory the service holds (see `shown_target`).
    target: &'a str,
    /// The target as messages show it.
    shown: String,
    dir: RefCell<Option<Fd>>,
    /// What the probe found, for the mount's filesystem type.
    sig: RefCell<Option<Signature>>,
}

impl Mounting<'_> {
    fn dir(&self) -> Result<Ref<'_, Fd>> {
        Ref::filter_map(self.dir.borrow(), Option::as_ref)
            .map_err(|_| Error::new(Kind::Internal, OP, self.object(), "target not opened"))
    }
}

impl MountTarget for Mounting<'_> {
    fn object(&self) -> String {
        format!("{} at {:?}", shown(&self.vol.id), self.shown)
    }

    fn target_exists(&self) -> Result<bool> {
        match Fd::open(&self.host.os, Path::new(self.target), Open::DirNoFollow) {
            Ok(dir) => {
                *self.dir.borrow_mut() = Some(dir);
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(2) => Ok(false),
            Err(e) if e.raw_os_error() == Some(40) => Err(Error::new(
                Kind::FailedPrecondition,
                OP,
                self.object(),
                "target_path is a symbolic link, not a directory",
            )),
            Err(e) => Err(Error::io(OP, self.object(), &e)),
        }
    }

    fn occupant(&self) -> Result<Occupant> {
        let table = read_mountinfo(&self.host.os, OP)?;
        let kpath = kernel_path(&self.host.os, Path::new(self.target), false)
            .map_err(|e| Error::io(OP, self.object(), &e))?;
        Ok(match mountinfo::topmost_at(&table, &kpath) {
            None => Occupant::Nothing,
            Some(m) if !self.vol.mounts(std::slice::from_ref(m)).is_empty() => Occupant::ThisVolume,
            Some(m) => Occupant::Other(format!("{} {:?}", m.fs_type, m.source)),
        })
    }

    fn target_empty(&self) -> Result<Option<bool>> {
        let empty = self
            .dir()?
            .dir_is_empty()
            .map_err(|e| Error::io(OP, self.object(), &e))?;
        Ok(Some(empty))
    }

    fn content(&self) -> Result<Option<Content>> {
        let (sig, buf) = self.host.probe(OP, &self.vol)?;
        // A filesystem at the start (what the tail holds has no mount type).
        if let Some(head) = sig.as_ref().filter(|s| s.mount_type.is_some()) {
            self.host.refuse_member_at_end(OP, &self.vol, head, &buf)?;
        }
        let content = sig.as_ref().map(content_of);
        *self.sig.borrow_mut() = sig;
        Ok(content)
    }

    fn record(&self) -> Option<FormatRecord> {
        self.host.read_intent(&self.vol)
    }

    fn mount(&self) -> Result<()> {
        let object = self.object();
        let vol = &self.vol;
        let sig = self.sig.borrow();
        let clone = match sig.as_ref() {
            Some(sig) => self.host.mount_as_clone(OP, vol, sig)?,
            None => false,
        };
        let how = mount_policy::plan(
            OP,
            &object,
            sig.as_ref(),
            &self.host.mount_filesystems,
            false,
            clone,
        )?;
        drop(sig);
        let fs_type = how.fs_type;
        vol.unchanged(OP)?;
        // Mount onto the handle opened first, so the directory checked is the directory
        // mounted on.
        let dir = self.dir()?;
        let os = &self.host.os;
        os.mount(&vol.node(), At::Dir(&dir), fs_type, how.flags)
            .map_err(|e| {
                let kind = match e.raw_os_error() {
                    Some(16) | Some(22) => Kind::FailedPrecondition,
                    _ => csi_proxy_core::error::io_kind(&e),
                };
                Error::new(kind, OP, &object, format!("mount {fs_type}: {e}"))
            })?;
        if let Err(e) = vol.unchanged(OP) {
            // What was mounted is not the volume asked for: take it away again.
            let _ = os.unmount(At::Dir(&dir), false);
            return Err(e.context("after mount (unmounted again)"));
        }
        tracing::info!(volume = vol.id, target = self.shown, fs_type, "mounted");
        Ok(())
    }
}

impl LinuxVolumeHost {
    pub(super) fn mount(&self, id: &str, target: &str) -> Result<()> {
        let vol = self.resolve_to_change(OP, id)?;
        rules::mount(
            OP,
            &Mounting {
                host: self,
                vol,
                target,
                shown: shown_target(&self.os, target),
                dir: RefCell::new(None),
                sig: RefCell::new(None),
            },
        )
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
        let os = &self.os;
        let shown_path = shown_target(os, target);
        let object = format!("{} at {shown_path:?}", shown(id));
        let kpath = match kernel_path(os, Path::new(target), false) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()), // nothing there
            Err(e) => return Err(Error::io(OP, &object, &e)),
        };
        // Resolved once, when something is first found mounted there; stacked mounts of the
        // same volume are then unmounted without naming it again.
        let mut resolved: Option<Result<Volume>> = None;
        for _ in 0..16 {
            let table = read_mountinfo(os, OP)?;
            let Some(m) = mountinfo::topmost_at(&table, &kpath) else {
                return Ok(()); // not (or no longer) mounted: success
            };
            match resolved.get_or_insert_with(|| self.resolve(OP, id)) {
                Ok(vol) => {
                    let occupant = if vol.mounts(std::slice::from_ref(m)).is_empty() {
                        Occupant::Other(format!("{} {:?}", m.fs_type, m.source))
                    } else {
                        Occupant::ThisVolume
                    };
                    rules::unmount_decision(OP, &object, &occupant)?;
                }
                // The volume is gone (its disk was detached by force, or replaced): what is
                // mounted there is its stale mount only when the device it came from is gone
                // too. Left, it would keep the target busy for kubelet forever.
                Err(e) if e.kind() == Kind::NotFound => {
                    if !is_stale_device_mount(os, m) {
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
                        target = shown_path,
                        source = m.source,
                        "the volume is gone; unmounting its stale mount"
                    );
                }
                Err(e) => return Err(e.clone()),
            }
            if let Ok(d) = Fd::open(os, Path::new(target), Open::DirNoFollow) {
                let _ = d.syncfs();
            }
            // Unmounted by the path given: through the held directory, so what is unmounted is
            // the mount on the entry that was checked, not one a swapped link leads to.
            // EBUSY can be transient: a process another request starts at this moment (mkfs for
            // another disk) briefly holds copies of the daemon's descriptors until its exec
            // closes them. Retry for up to a second before calling the filesystem busy.
            let mut tries = 0;
            let unmounted = loop {
                match os.unmount(At::Path(Path::new(target)), true) {
                    Err(e) if e.raw_os_error() == Some(16) && tries < 20 => {
                        tries += 1;
                        os.sleep(std::time::Duration::from_millis(50));
                    }
                    r => break r,
                }
            };
            unmounted.map_err(|e| {
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
            tracing::info!(volume = id, target = shown_path, "unmounted");
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
fn is_stale_device_mount(os: &Os, m: &MountInfo) -> bool {
    let source = Path::new(&m.source);
    source.starts_with("/dev/") && !os.exists(source) && !block::dev_exists(os, m.major, m.minor)
}
