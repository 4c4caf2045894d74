//! Conditions the daemon's API cannot make, made by the selftest itself through the thin Win32
//! layer on its own objects only, then undone: its disk made read-only (ledger row 21, and the
//! extend on it inside the grow flow, `stage.rs`), its partition hidden while the disk is online
//! (row 53), a chain of 64 links in its scratch folder (row 36), folders renamed and a listing
//! read while its entries are deleted (rows 37 and 86, `renames.rs`), and a copy of its VHDX
//! attached beside it (row 71, `copy.rs`). Each step records what Windows answered and fails,
//! naming the row, when that is not what the simulated Windows models; the next step still
//! runs.

use super::record::Stop;
use super::{Selftest, ms, poll, status};
use csi_proxy_formats::windows_buffers::ioctl as io;
use csi_proxy_formats::windows_buffers::layout::{
    BASIC_DATA, HIDDEN, Layout, gpt_layout_with, parse_drive_layout,
};
use csi_proxy_formats::windows_buffers::volume::extend_sectors;
use csi_proxy_host::windows::disk::volume_device;
use csi_proxy_host::windows::os::files::{access, create_symlink, utf16};
use csi_proxy_host::windows::os::{self, Handle, OsError, ReturnValue, code};
use std::time::Instant;

/// The steps, in order.
pub const STEPS: &[&str] = &[
    "read-only disk: layout and grow controls",
    "hidden partition while online",
    "64 links: open through them",
    "read-only disk: FSCTL_EXTEND_VOLUME after a grow",
];

/// How much the extend step grows the partition by itself: a few MiB of the space the VHDX's
/// resize added, leaving the rest for the daemon's ResizeVolume.
const EXTEND_GROW: u64 = 8 << 20;

/// ERROR_CANT_RESOLVE_FILENAME (1921): "The name of the file cannot be resolved by the system".
const CANT_RESOLVE_FILENAME: u32 = 1921;

/// `MSFT_Volume.Format`'s 43006: "Cannot perform the requested operation when the drive is
/// read only".
const FORMAT_READ_ONLY: u32 = 43006;

/// How many links a chain has: one past the 63 reparse points a path may pass through.
const LINKS: usize = 64;

/// The disk device of disk `n`.
fn disk_device(n: u32) -> String {
    format!(r"\\.\PhysicalDrive{n}")
}

impl<'a> Selftest<'a> {
    /// The selftest's own disk, checked as [`Selftest::guard_volume`] checks it (its page 83
    /// identity, and the volume on it), opened to be written: every step that writes to a disk
    /// directly starts here.
    pub(super) async fn own_disk(&mut self) -> Result<(u32, Handle<'a>), String> {
        let n = self.guard_volume().await?;
        let path = disk_device(n);
        let h = os::open(self.os, &path, true).map_err(|e| format!("opening {path}: {e}"))?;
        Ok((n, h))
    }
}

/// Sets or clears DISK_ATTRIBUTE_READ_ONLY (not persisted) on the disk open as `h`.
fn set_read_only(h: &Handle<'_>, on: bool) -> os::Win32Result<Vec<u8>> {
    let ro = io::DISK_ATTRIBUTE_READ_ONLY;
    let value = if on { ro } else { 0 };
    os::ioctl(
        h,
        io::DISK_SET_DISK_ATTRIBUTES,
        &io::set_disk_attributes(value, ro, false),
        0,
    )
}

/// The disk's layout, read through `h`.
pub(super) fn read_layout(h: &Handle<'_>) -> Result<Layout, String> {
    let buf = os::ioctl(h, io::DISK_GET_DRIVE_LAYOUT_EX, &[], 4096)
        .map_err(|e| format!("IOCTL_DISK_GET_DRIVE_LAYOUT_EX: {e}"))?;
    parse_drive_layout(&buf).map_err(|e| format!("IOCTL_DISK_GET_DRIVE_LAYOUT_EX: {e}"))
}

/// The index in `l` of its basic data partition (the selftest's volume's).
pub(super) fn data_partition(l: &Layout) -> Result<usize, String> {
    l.partitions
        .iter()
        .position(|p| p.gpt_type == Some(BASIC_DATA))
        .ok_or_else(|| format!("no basic data partition in {l:?}"))
}

/// A control's answer as recorded: `OK` or the error.
fn shown(r: &Result<Vec<u8>, OsError>) -> String {
    match r {
        Ok(_) => "OK".into(),
        Err(e) => e.to_string(),
    }
}

impl Selftest<'_> {
    pub(super) async fn direct(&mut self) -> Result<(), Stop> {
        let _ = self.read_only_disk().await;
        let _ = self.hidden_partition().await;
        let _ = self.link_chain();
        let _ = self.renames();
        let _ = self.calls().await;
        // Last: it detaches and attaches the VHDX again.
        let _ = self.disk_copy().await;
        Ok(())
    }

    /// Ledger row 21: with `DISK_ATTRIBUTE_READ_ONLY` set (not persisted) on the selftest's
    /// disk, the provider's format answers its documented 43006 ("Cannot perform the requested
    /// operation when the drive is read only"; asked directly: the daemon's FormatVolume of a
    /// formatted volume formats nothing), and the layout and grow
    /// controls themselves, sent with nothing to change (the layout as read, a grow by 0 bytes),
    /// answer ERROR_WRITE_PROTECT. The attribute is cleared again whatever happened.
    async fn read_only_disk(&mut self) -> Result<(), Stop> {
        let name = STEPS[0];
        let t = Instant::now();
        let r = async {
            let (n, h) = self.own_disk().await?;
            set_read_only(&h, true).map_err(|e| {
                format!("IOCTL_DISK_SET_DISK_ATTRIBUTES read-only on disk {n}: {e}")
            })?;
            let observed = self.read_only_answers(&h).await;
            let cleared = set_read_only(&h, false);
            let (answer, wrong) = match (observed, cleared) {
                (Ok(o), Ok(_)) => o,
                (Ok((a, _)) | Err(a), Err(e)) => {
                    return Err(format!("{a}; clearing DISK_ATTRIBUTE_READ_ONLY again: {e}"));
                }
                (Err(a), Ok(_)) => return Err(a),
            };
            match wrong {
                None => Ok((
                    (),
                    format!(
                        "{answer} (settles ledger row 21: ERROR_WRITE_PROTECT from the controls)"
                    ),
                )),
                Some(w) => Err(format!("{answer} (ledger row 21 models otherwise: {w})")),
            }
        }
        .await;
        self.out.record(name, t, r)
    }

    /// Ledger row 21, `FSCTL_EXTEND_VOLUME`: run in the grow flow once the VHDX was resized
    /// and attached again, before the daemon's ResizeVolume (only a grow gives the control an
    /// input that asks for something: the sector count the volume is to have). With the disk
    /// writable, its data partition grown by [`EXTEND_GROW`]; then `DISK_ATTRIBUTE_READ_ONLY`
    /// set (not persisted) and the volume extended to fill the grown partition (the count the
    /// daemon's ResizeVolume computes, `extend_sectors`); modelled: ERROR_WRITE_PROTECT, the
    /// filesystem not grown. The attribute is cleared again whatever happened; the daemon's
    /// ResizeVolume then grows the rest.
    pub(super) async fn read_only_extend(&mut self) -> Result<(), Stop> {
        let name = STEPS[3];
        let t = Instant::now();
        let r = async {
            let (n, h) = self.own_disk().await?;
            let geo = os::ioctl(&h, io::DISK_GET_DRIVE_GEOMETRY_EX, &[], 256)
                .map_err(|e| format!("IOCTL_DISK_GET_DRIVE_GEOMETRY_EX: {e}"))?;
            // DISK_GEOMETRY_EX: BytesPerSector u32 @20.
            let sector = io::le_u32(&geo, 20)
                .filter(|s| *s >= 512 && s.is_power_of_two())
                .ok_or("IOCTL_DISK_GET_DRIVE_GEOMETRY_EX: no sector size")?;
            let l = read_layout(&h)?;
            let p = l.partitions[data_partition(&l)?].clone();
            let grow = io::grow_partition(p.number, EXTEND_GROW);
            os::ioctl(&h, io::DISK_GROW_PARTITION, &grow, 0).map_err(|e| {
                format!(
                    "IOCTL_DISK_GROW_PARTITION partition {} on disk {n}: {e}",
                    p.number
                )
            })?;
            let _ = os::ioctl(&h, io::DISK_UPDATE_PROPERTIES, &[], 0);
            let sectors = extend_sectors(p.length + EXTEND_GROW, sector) as i64;
            set_read_only(&h, true).map_err(|e| {
                format!("IOCTL_DISK_SET_DISK_ATTRIBUTES read-only on disk {n}: {e}")
            })?;
            let extend = self.extend_to(sectors);
            let cleared = set_read_only(&h, false);
            let answer = format!(
                "partition {} grown by {EXTEND_GROW} bytes while writable; read-only, \
                 FSCTL_EXTEND_VOLUME to {sectors} sectors: {}",
                p.number,
                match &extend {
                    Ok(Ok(())) => "OK".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.clone(),
                }
            );
            if let Err(e) = cleared {
                return Err(format!(
                    "{answer}; clearing DISK_ATTRIBUTE_READ_ONLY again: {e}"
                ));
            }
            match extend {
                Ok(Err(e)) if e.code == code::WRITE_PROTECT => Ok((
                    (),
                    format!(
                        "{answer} (settles ledger row 21: ERROR_WRITE_PROTECT from the extend)"
                    ),
                )),
                _ => Err(format!(
                    "{answer} (ledger row 21 models ERROR_WRITE_PROTECT)"
                )),
            }
        }
        .await;
        self.out.record(name, t, r)
    }

    /// `FSCTL_EXTEND_VOLUME` on the selftest's volume to `sectors`, asked again while the
    /// volume, re-reading its grown partition, answers not ready (within 10 s, as the daemon
    /// asks): Windows' answer, or (`Err`) why the volume could not be opened.
    fn extend_to(&self, sectors: i64) -> Result<Result<(), OsError>, String> {
        let device = volume_device(&self.volume);
        let vh = os::open(self.os, &device, true).map_err(|e| format!("opening {device}: {e}"))?;
        let until = self.os.now() + std::time::Duration::from_secs(10);
        loop {
            match os::ioctl(&vh, io::FSCTL_EXTEND_VOLUME, &sectors.to_le_bytes(), 0) {
                Err(e) if e.code == code::NOT_READY && self.os.now() < until => {
                    self.os.sleep(std::time::Duration::from_millis(100));
                }
                r => return Ok(r.map(|_| ())),
            }
        }
    }

    /// What the provider and the controls answer on the read-only disk `h` is open on: the
    /// answers, and what in them the model does not say.
    async fn read_only_answers(
        &mut self,
        h: &Handle<'_>,
    ) -> Result<(String, Option<String>), String> {
        let mut wrong = Vec::new();
        let v = self.volume.clone();
        let format = match self.os.format_ntfs(&v) {
            Ok(ReturnValue::Code(FORMAT_READ_ONLY)) => "MSFT_Volume.Format: 43006".to_string(),
            other => {
                wrong.push("MSFT_Volume.Format did not answer 43006".to_string());
                format!("MSFT_Volume.Format: {other:?}")
            }
        };
        let l = read_layout(h)?;
        let number = l.partitions[data_partition(&l)?].number;
        let set = os::ioctl(
            h,
            io::DISK_SET_DRIVE_LAYOUT_EX,
            &gpt_layout_with(&l, &[]),
            0,
        );
        let grow = os::ioctl(
            h,
            io::DISK_GROW_PARTITION,
            &io::grow_partition(number, 0),
            0,
        );
        for (what, r) in [("SET_DRIVE_LAYOUT_EX", &set), ("GROW_PARTITION", &grow)] {
            if !matches!(r, Err(e) if e.code == code::WRITE_PROTECT) {
                wrong.push(format!("{what} did not answer ERROR_WRITE_PROTECT"));
            }
        }
        let answer = format!(
            "{format}; IOCTL_DISK_SET_DRIVE_LAYOUT_EX (the layout as read): {}; \
             IOCTL_DISK_GROW_PARTITION (partition {number}, 0 bytes): {}",
            shown(&set),
            shown(&grow)
        );
        Ok((answer, (!wrong.is_empty()).then(|| wrong.join("; "))))
    }

    /// Ledger row 53: the selftest's partition given `GPT_BASIC_DATA_ATTRIBUTE_HIDDEN` while
    /// its disk is online; its volume is then no longer listed (the model: "the partition is
    /// not detected by the mount manager"), and once the attribute is cleared it is listed
    /// again. The attribute is cleared whatever happened.
    async fn hidden_partition(&mut self) -> Result<(), Stop> {
        let name = STEPS[1];
        let t = Instant::now();
        let r = async {
            let (n, h) = self.own_disk().await?;
            let l = read_layout(&h)?;
            let i = data_partition(&l)?;
            let attrs = l.partitions[i].gpt_attributes();
            let mut hidden = l.clone();
            hidden.partitions[i] = l.partitions[i].with_gpt_attributes(attrs | HIDDEN);
            os::ioctl(
                &h,
                io::DISK_SET_DRIVE_LAYOUT_EX,
                &gpt_layout_with(&hidden, &[]),
                0,
            )
            .map_err(|e| format!("IOCTL_DISK_SET_DRIVE_LAYOUT_EX with HIDDEN: {e}"))?;
            let gone = self.volume_listed(n, false).await;
            os::ioctl(
                &h,
                io::DISK_SET_DRIVE_LAYOUT_EX,
                &gpt_layout_with(&l, &[]),
                0,
            )
            .map_err(|e| format!("IOCTL_DISK_SET_DRIVE_LAYOUT_EX clearing HIDDEN again: {e}"))?;
            let gone = gone?;
            let (wait, v) = (self.opts.wait, self.volume.clone());
            let back = self.volume_back(n).await?;
            let answer = format!(
                "{v} {}; once cleared, {}",
                gone.map_or(
                    format!("still listed {wait:?} after HIDDEN was set"),
                    |t| format!("no longer listed {t} ms after HIDDEN was set")
                ),
                back.as_ref().map_or(
                    format!("no volume listed again after {wait:?}"),
                    |(b, t)| {
                        format!(
                            "{} listed again after {t} ms",
                            if b.eq_ignore_ascii_case(&v) {
                                "it is".to_string()
                            } else {
                                format!("{b} (another GUID path)")
                            }
                        )
                    }
                ),
            );
            if let Some((b, _)) = back.as_ref() {
                self.volume = b.clone();
            }
            match (gone, back) {
                (Some(_), Some(_)) => Ok(((), format!("{answer} (settles ledger row 53)"))),
                _ => Err(format!(
                    "{answer} (ledger row 53 models the volume leaving, and coming back once \
                     cleared)"
                )),
            }
        }
        .await;
        self.out.record(name, t, r)
    }

    /// Waits (within the selftest's wait) until ListVolumesOnDisk of disk `n` lists a volume:
    /// it (the selftest's from then on: Windows may give a partition that came back another
    /// GUID path) and the ms it took; `None` if none came.
    pub(super) async fn volume_back(&mut self, n: u32) -> Result<Option<(String, u128)>, String> {
        self.poll_listing(n, |vols, took| vols.into_iter().next().map(|v| (v, took)))
            .await
    }

    /// Waits (within the selftest's wait) until ListVolumesOnDisk of disk `n` lists the
    /// selftest's volume (`listed`) or does not: the ms it took, `None` if it never did.
    async fn volume_listed(&mut self, n: u32, listed: bool) -> Result<Option<u128>, String> {
        let v = self.volume.clone();
        self.poll_listing(n, |vols, took| {
            let there = vols.iter().any(|x| x.eq_ignore_ascii_case(&v));
            (there == listed).then_some(took)
        })
        .await
    }

    /// Asks ListVolumesOnDisk of disk `n` until `pick` takes an answer from the listing and
    /// the ms since the first ask, within the selftest's wait.
    async fn poll_listing<T>(
        &mut self,
        n: u32,
        pick: impl Fn(Vec<String>, u128) -> Option<T>,
    ) -> Result<Option<T>, String> {
        let (wait, t) = (self.opts.wait, Instant::now());
        let volume = &mut self.c().volume;
        poll(wait, async || {
            let vols = volume
                .list_volumes_on_disk(n, 0)
                .await
                .map_err(|s| status("ListVolumesOnDisk", &s))?;
            Ok(pick(vols, ms(t.elapsed())))
        })
        .await
    }

    /// Ledger row 36: 64 directory links in a folder of the scratch folder, each to the one
    /// before and the first to a directory holding `d`. A path through 63 of them opens `d`;
    /// through all 64 it passes one reparse point too many (modelled: ERROR_CANT_RESOLVE_FILENAME).
    /// Everything made is removed again, links as themselves.
    fn link_chain(&mut self) -> Result<(), Stop> {
        let name = STEPS[2];
        let t = Instant::now();
        let dir = format!(r"{}\links", self.scratch_dir());
        let mut made: Vec<String> = Vec::new();
        let r = self.links_answers(&dir, &mut made);
        let os = self.os;
        let mut left = Vec::new();
        // Last made first: each link, then `d`, `t` and the folder, once empty.
        for path in made.iter().rev() {
            if let Err(e) = os.remove_directory(&utf16(path)) {
                left.push(format!("{path}: {e}"));
            }
        }
        let r = match (r, left.is_empty()) {
            (r, true) => r,
            (Ok(((), a)) | Err(a), false) => Err(format!("{a}; NOT removed: {}", left.join("; "))),
        };
        self.out.record(name, t, r)
    }

    /// Makes the chain (each thing made pushed to `made`) and opens through it.
    fn links_answers(&self, dir: &str, made: &mut Vec<String>) -> Result<((), String), String> {
        let os = self.os;
        let target = format!(r"{dir}\t");
        for d in [dir.to_string(), target.clone(), format!(r"{target}\d")] {
            os.create_directory(&utf16(&d))
                .map_err(|e| format!("CreateDirectoryW {d}: {e}"))?;
            made.push(d);
        }
        let link = |i: usize| format!(r"{dir}\l{i}");
        for i in 1..=LINKS {
            let to = if i == 1 { target.clone() } else { link(i - 1) };
            create_symlink(os, &utf16(&link(i)), &utf16(&to), true)
                .map_err(|e| format!("CreateSymbolicLinkW {} -> {to}: {e}", link(i)))?;
            made.push(link(i));
        }
        let open = |hops: usize| {
            let path = format!(r"{}\d", link(hops));
            let share = access::SHARE_READ | access::SHARE_WRITE | access::SHARE_DELETE;
            os.open_entry(&utf16(&path), access::READ_ATTRIBUTES, share, true)
                .map(|h| os.close(h))
        };
        let (within, past) = (open(LINKS - 1), open(LINKS));
        let answer = format!(
            "through {} links: {}; through {LINKS}: {}",
            LINKS - 1,
            within
                .as_ref()
                .map_or_else(|e| e.to_string(), |()| "opened".into()),
            past.as_ref()
                .map_or_else(|e| e.to_string(), |()| "opened".into()),
        );
        match (within, past) {
            (Ok(()), Err(e)) if e.code == CANT_RESOLVE_FILENAME => Ok((
                (),
                format!("{answer} (settles ledger row 36: ERROR_CANT_RESOLVE_FILENAME)"),
            )),
            _ => Err(format!(
                "{answer} (ledger row 36 models 63 followed and the 64th ERROR_CANT_RESOLVE_FILENAME)"
            )),
        }
    }
}
